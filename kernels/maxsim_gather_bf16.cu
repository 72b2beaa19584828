// Explicit instantiations of the gather kernels for bf16 corpora, every
// (dim, row-tile) bucket: one translation unit per (dtype, operation).
#include "kernels/detail/maxsim_kernels.cuh"

MAXSIMD_INSTANTIATE_MAXSIM(LaunchGatherTyped, maxsimd::GatherLaunchParams,
                           maxsimd::detail::Bf16);
