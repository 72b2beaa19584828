// Explicit instantiations of the scan kernels for bf16 corpora, every
// (dim, row-tile) bucket: one translation unit per (dtype, operation).
#include "kernels/detail/maxsim_kernels.cuh"

MAXSIMD_INSTANTIATE_MAXSIM(LaunchScanTyped, maxsimd::ScanLaunchParams,
                           maxsimd::detail::Bf16);
