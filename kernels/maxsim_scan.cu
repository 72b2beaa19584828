// Scan launcher: the one dispatch from run-time (dtype, dim, row tiles) to
// the kernel instantiations in maxsim_scan_{fp16,bf16}.cu.
#include "kernels/detail/dtype_dispatch.cuh"
#include "kernels/detail/maxsim_warp.cuh"
#include "kernels/detail/mma.cuh"
#include "kernels/maxsim_scan.h"

namespace maxsimd {
namespace detail {
// Defined in detail/maxsim_kernels.cuh, instantiated per dtype.
template <typename Tag, int kD, int kMT>
absl::Status LaunchScanTyped(const ScanLaunchParams& p, cudaStream_t stream);
}  // namespace detail

int ChooseRowTiles(int64_t rows, int32_t dpad) {
  return rows > 32 && detail::MaxSimSmemBytes(8, dpad) <= 160 * 1024 ? 8 : 2;
}

absl::Status LaunchMaxSimScan(const ScanLaunchParams& p, cudaStream_t stream) {
  return detail::DispatchMmaInstance(
      p, "LaunchMaxSimScan", [&](auto tag, auto d, auto mt) {
        return detail::LaunchScanTyped<decltype(tag), decltype(d)::value,
                                       decltype(mt)::value>(p, stream);
      });
}

}  // namespace maxsimd
