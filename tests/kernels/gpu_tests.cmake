# GPU tests: built whenever CUDA is on (CI compiles them), run through the
# GpuBackend API, and skip at run time on a machine without a CUDA device.
foreach(_gpu_test maxsim_scan_test maxsim_gather_test topk_test gpu_backend_test
                  host_stream_test gpu_int8_test gpu_plaid_test)
  maxsimd_add_test(NAME ${_gpu_test} SOURCES ${_gpu_test}.cc
                   LIBS maxsimd_kernels LABELS gpu)
endforeach()
# Whether this build carries sm_90a code (machine code or PTX), which the
# TMA kernels need: gpu_backend_test checks that they run exactly where the
# device and the build both have it.
string(FIND "${MAXSIMD_CUDA_GENCODE_FLAGS}" "compute_90a" _maxsimd_sm90a_at)
if(_maxsimd_sm90a_at EQUAL -1)
  set(_maxsimd_has_sm90a 0)
else()
  set(_maxsimd_has_sm90a 1)
endif()
target_compile_definitions(gpu_backend_test PRIVATE
  MAXSIMD_TEST_BUILD_HAS_SM90A=${_maxsimd_has_sm90a})
# The k-means assignment against the host trainer's (index/plaid_train.h),
# with the host's arithmetic: no fused multiply-add in the test's own dot
# products either.
maxsimd_add_test(NAME gpu_kmeans_test SOURCES gpu_kmeans_test.cc
                 LIBS maxsimd_kernels maxsimd_index LABELS gpu)
target_compile_options(gpu_kmeans_test PRIVATE -ffp-contract=off)
# PLAID candidate generation's centroid product on the GPU
# (kernels/plaid_centroids.h, Backend::ScoreCentroids) against the host's
# (index/plaid_search.h), bit for bit.
maxsimd_add_test(NAME gpu_backend_centroids_test
                 SOURCES gpu_backend_centroids_test.cc
                 LIBS maxsimd_kernels maxsimd_index LABELS gpu)
