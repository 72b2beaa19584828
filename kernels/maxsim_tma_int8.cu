// Explicit instantiations of the TMA MaxSim kernel for int8 corpora (rows
// widened to float16 in shared memory).
#include "kernels/detail/maxsim_tma_kernel.cuh"

MAXSIMD_INSTANTIATE_TMA_TAG(maxsimd::detail::Int8Decode);
