// Explicit instantiations of the TMA MaxSim kernel for PLAID corpora on the
// int8 MMA (d = 128, one warpgroup; residuals widened to int8 levels, the
// centroid term from the query-centroid table).
#include "kernels/detail/maxsim_tma_kernel.cuh"

MAXSIMD_INSTANTIATE_TMA(maxsimd::detail::PlaidMmaDecode<1>, 64, 1);
MAXSIMD_INSTANTIATE_TMA(maxsimd::detail::PlaidMmaDecode<2>, 64, 1);
MAXSIMD_INSTANTIATE_TMA(maxsimd::detail::PlaidMmaDecode<4>, 64, 1);
