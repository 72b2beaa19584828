// Gather launcher: the one dispatch from run-time (dtype, dim, row tiles) to
// the kernel instantiations in maxsim_gather_{fp16,bf16}.cu.
#include "kernels/detail/dtype_dispatch.cuh"
#include "kernels/detail/maxsim_warp.cuh"
#include "kernels/detail/mma.cuh"
#include "kernels/maxsim_gather.h"
#include "kernels/maxsim_scan.h"

namespace maxsimd {
namespace detail {
// Defined in detail/maxsim_kernels.cuh, instantiated per dtype.
template <typename Tag, int kD, int kMT>
absl::Status LaunchGatherTyped(const GatherLaunchParams& p,
                               cudaStream_t stream);
}  // namespace detail

absl::Status LaunchMaxSimGather(const GatherLaunchParams& p,
                                cudaStream_t stream) {
  return detail::DispatchMmaInstance(
      p, "LaunchMaxSimGather", [&](auto tag, auto d, auto mt) {
        return detail::LaunchGatherTyped<decltype(tag), decltype(d)::value,
                                         decltype(mt)::value>(p, stream);
      });
}

}  // namespace maxsimd
