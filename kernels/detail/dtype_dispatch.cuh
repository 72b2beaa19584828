// The run-time dtype -> tag-type step that every kernel launcher starts
// with: float16 and bfloat16 corpora have kernels, others an error that
// names the launcher.
#ifndef MAXSIMD_KERNELS_DETAIL_DTYPE_DISPATCH_CUH_
#define MAXSIMD_KERNELS_DETAIL_DTYPE_DISPATCH_CUH_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/detail/mma.cuh"
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
      return absl::InvalidArgumentError(
          absl::StrCat(launcher, ": dtype ", DTypeName(dtype),
                       " has no GPU kernel (float16 and bfloat16 do)"));
  }
}

}  // namespace maxsimd::detail

#endif  // MAXSIMD_KERNELS_DETAIL_DTYPE_DISPATCH_CUH_
