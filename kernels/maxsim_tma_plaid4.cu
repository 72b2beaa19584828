// Explicit instantiations of the TMA MaxSim kernel for PLAID corpora of
// 4-bit residuals (rows decoded to float16 in shared memory).
#include "kernels/detail/maxsim_tma_kernel.cuh"

MAXSIMD_INSTANTIATE_TMA_TAG(maxsimd::detail::PlaidDecode<4>);
