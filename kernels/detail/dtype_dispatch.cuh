// The run-time dtype -> tag-type step that every kernel launcher starts
// with: float16 and bfloat16 corpora have kernels everywhere, int8 in the
// mma.sync kernels (widened) and the TMA kernel, others an error that names
// the launcher. Also the (dtype, dim, row tiles) -> instance step the two
// mma.sync launchers (scan and gather) share.
#ifndef MAXSIMD_KERNELS_DETAIL_DTYPE_DISPATCH_CUH_
#define MAXSIMD_KERNELS_DETAIL_DTYPE_DISPATCH_CUH_

#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/detail/mma.cuh"
#include "kernels/maxsim_scan.h"
#include "kernels/types.h"

namespace maxsimd::detail {

// Calls fn(Fp16{}) or fn(Bf16{}) for `dtype`; INVALID_ARGUMENT otherwise.
template <typename Fn>
absl::Status DispatchDtype(DType dtype, const char* launcher, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat16:
      return fn(Fp16{});
    case DType::kBFloat16:
      return fn(Bf16{});
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          launcher, ": dtype ", DTypeName(dtype), " has no kernel here"));
  }
}

// The mma.sync kernels' corpus tags: DispatchDtype's, and Int8Widened for
// int8 corpora.
template <typename Fn>
absl::Status DispatchMmaTag(DType dtype, const char* launcher, Fn&& fn) {
  if (dtype == DType::kInt8) return fn(Int8Widened{});
  return DispatchDtype(dtype, launcher, std::forward<Fn>(fn));
}

// Calls launch(Tag{}, kD, kMT) with kD and kMT as std::integral_constant:
// the compiled width for p.dim (64, 96, 128, 256, or 0 for any other
// positive width) and the row tiles p.row_tiles (2 or 8). p is a scan or
// gather launch's params; INVALID_ARGUMENT naming `launcher` for a dtype
// without kernels, a dpad that is not PaddedDim(dim), a dim <= 0 or another
// row tile count.
template <typename Params, typename Launch>
absl::Status DispatchMmaInstance(const Params& p, const char* launcher,
                                 Launch&& launch) {
  return DispatchMmaTag(p.dtype, launcher, [&](auto tag) -> absl::Status {
    if (p.dpad != PaddedDim(p.dim)) {
      return absl::InvalidArgumentError(
          absl::StrCat(launcher, ": dpad is ", p.dpad, " for dim ", p.dim,
                       ", must be ", PaddedDim(p.dim)));
    }
    if (p.dim <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(launcher, ": dim is ", p.dim));
    }
    auto rows = [&](auto d) -> absl::Status {
      if (p.row_tiles == 2) {
        return launch(tag, d, std::integral_constant<int, 2>{});
      }
      if (p.row_tiles == 8) {
        return launch(tag, d, std::integral_constant<int, 8>{});
      }
      return absl::InvalidArgumentError(absl::StrCat(
          launcher, ": row_tiles is ", p.row_tiles, ", must be 2 or 8"));
    };
    switch (p.dim) {
      case 64:
        return rows(std::integral_constant<int, 64>{});
      case 96:
        return rows(std::integral_constant<int, 96>{});
      case 128:
        return rows(std::integral_constant<int, 128>{});
      case 256:
        return rows(std::integral_constant<int, 256>{});
      default:
        return rows(std::integral_constant<int, 0>{});
    }
  });
}

}  // namespace maxsimd::detail

#endif  // MAXSIMD_KERNELS_DETAIL_DTYPE_DISPATCH_CUH_
