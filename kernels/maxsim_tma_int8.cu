// Explicit instantiations of the TMA MaxSim kernel for int8 corpora (rows
// widened to float16 in shared memory), every (padded width, warpgroups)
// bucket.
#include "kernels/detail/maxsim_tma_kernel.cuh"

#define MAXSIMD_INSTANTIATE_TMA(DP, WG)                           \
  template absl::Status                                           \
  maxsimd::detail::LaunchTmaTyped<maxsimd::detail::Int8, DP, WG>( \
      const maxsimd::TmaLaunchParams&, cudaStream_t)

MAXSIMD_INSTANTIATE_TMA(64, 1);
MAXSIMD_INSTANTIATE_TMA(64, 2);
MAXSIMD_INSTANTIATE_TMA(128, 1);
MAXSIMD_INSTANTIATE_TMA(128, 2);
MAXSIMD_INSTANTIATE_TMA(256, 1);
MAXSIMD_INSTANTIATE_TMA(256, 2);
