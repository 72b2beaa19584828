// Scan launcher: the one dispatch from run-time (dtype, dim, row tiles) to
// the kernel instantiations in maxsim_scan_{fp16,bf16}.cu.
#include "absl/strings/str_cat.h"
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

namespace {

template <typename Tag, int kD>
absl::Status DispatchRows(const ScanLaunchParams& p, cudaStream_t stream) {
  if (p.row_tiles == 2) return detail::LaunchScanTyped<Tag, kD, 2>(p, stream);
  if (p.row_tiles == 8) return detail::LaunchScanTyped<Tag, kD, 8>(p, stream);
  return absl::InvalidArgumentError(absl::StrCat(
      "LaunchMaxSimScan: row_tiles is ", p.row_tiles, ", must be 2 or 8"));
}

template <typename Tag>
absl::Status DispatchDim(const ScanLaunchParams& p, cudaStream_t stream) {
  if (p.dpad != PaddedDim(p.dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LaunchMaxSimScan: dpad is ", p.dpad, " for dim ", p.dim,
                     ", must be ", PaddedDim(p.dim)));
  }
  switch (p.dim) {
    case 64:
      return DispatchRows<Tag, 64>(p, stream);
    case 96:
      return DispatchRows<Tag, 96>(p, stream);
    case 128:
      return DispatchRows<Tag, 128>(p, stream);
    case 256:
      return DispatchRows<Tag, 256>(p, stream);
    default:
      if (p.dim <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("LaunchMaxSimScan: dim is ", p.dim));
      }
      return DispatchRows<Tag, 0>(p, stream);
  }
}

}  // namespace

absl::Status LaunchMaxSimScan(const ScanLaunchParams& p, cudaStream_t stream) {
  return detail::DispatchDtype(p.dtype, "LaunchMaxSimScan", [&](auto tag) {
    return DispatchDim<decltype(tag)>(p, stream);
  });
}

}  // namespace maxsimd
