// Explicit instantiations of the TMA MaxSim kernel for int8 corpora scored
// against quantised queries (int8 MMA): embedding widths 128 and 256, which
// the block sees as float16 rows of 64 and 128.
#include "kernels/detail/maxsim_tma_kernel.cuh"

MAXSIMD_INSTANTIATE_TMA(maxsimd::detail::Int8MmaDecode, 64, 1);
MAXSIMD_INSTANTIATE_TMA(maxsimd::detail::Int8MmaDecode, 64, 2);
MAXSIMD_INSTANTIATE_TMA(maxsimd::detail::Int8MmaDecode, 128, 1);
MAXSIMD_INSTANTIATE_TMA(maxsimd::detail::Int8MmaDecode, 128, 2);
