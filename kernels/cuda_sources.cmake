# CUDA sources of maxsimd_kernels, included when MAXSIMD_WITH_CUDA is on.
# Until the CUDA backend lands, builds with CUDA use the no-device stand-in.
target_sources(maxsimd_kernels PRIVATE gpu_backend_none.cc)
