# GPU tests: built whenever CUDA is on (CI compiles them), run through the
# GpuBackend API, and skip at run time on a machine without a CUDA device.
foreach(_gpu_test maxsim_scan_test maxsim_gather_test topk_test gpu_backend_test
                  host_stream_test gpu_int8_test gpu_plaid_test)
  maxsimd_add_test(NAME ${_gpu_test} SOURCES ${_gpu_test}.cc
                   LIBS maxsimd_kernels LABELS gpu)
endforeach()
# The k-means assignment against the host trainer's (index/plaid_train.h),
# with the host's arithmetic: no fused multiply-add in the test's own dot
# products either.
maxsimd_add_test(NAME gpu_kmeans_test SOURCES gpu_kmeans_test.cc
                 LIBS maxsimd_kernels maxsimd_index LABELS gpu)
target_compile_options(gpu_kmeans_test PRIVATE -ffp-contract=off)
