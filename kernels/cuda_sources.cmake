# CUDA sources of maxsimd_kernels, included when MAXSIMD_WITH_CUDA is on.
# The MaxSim kernels are instantiated one translation unit per (operation,
# dtype), so a 2-core build compiles them in parallel; gpu/ is the GPU
# backend's host code that calls the launchers.
target_sources(maxsimd_kernels PRIVATE
  gpu/gather_pipeline.cu
  gpu/gpu_backend.cu
  gpu/pipeline.cu
  gpu/scan_pipeline.cu
  gpu/worker.cu
  kmeans.cu
  maxsim_scan.cu
  maxsim_scan_fp16.cu
  maxsim_scan_bf16.cu
  maxsim_scan_int8.cu
  maxsim_gather.cu
  maxsim_gather_fp16.cu
  maxsim_gather_bf16.cu
  maxsim_gather_int8.cu
  maxsim_tma.cu
  maxsim_tma_fp16.cu
  maxsim_tma_bf16.cu
  maxsim_tma_int8.cu
  maxsim_tma_int8mma.cu
  maxsim_tma_plaid1.cu
  maxsim_tma_plaid2.cu
  maxsim_tma_plaid4.cu
  maxsim_tma_plaidmma.cu
  plaid_centroids.cu
  plaid_qc.cu
  plaid_scan.cu
  topk.cu
)
maxsimd_set_cuda_flags(maxsimd_kernels)
target_link_libraries(maxsimd_kernels PUBLIC CUDA::cudart_static)
