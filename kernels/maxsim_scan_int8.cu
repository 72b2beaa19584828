// Explicit instantiations of the scan kernels for int8 corpora (codes
// widened to float16 in registers), every (dim, row-tile) bucket.
#include "kernels/detail/maxsim_kernels.cuh"

MAXSIMD_INSTANTIATE_MAXSIM(LaunchScanTyped, maxsimd::ScanLaunchParams,
                           maxsimd::detail::Int8Widened);
