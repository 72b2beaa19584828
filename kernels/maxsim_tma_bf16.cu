// Explicit instantiations of the TMA MaxSim kernel for bfloat16 corpora.
#include "kernels/detail/maxsim_tma_kernel.cuh"

MAXSIMD_INSTANTIATE_TMA_TAG(
    maxsimd::detail::DenseDecode<maxsimd::detail::Bf16>);
