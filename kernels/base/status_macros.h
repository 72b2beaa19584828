// Small Status helpers that Debian's Abseil (20220623) does not provide.
//
// Thread-safety: macros only; no state.
#ifndef MAXSIMD_KERNELS_BASE_STATUS_MACROS_H_
#define MAXSIMD_KERNELS_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MAXSIMD_STATUS_CONCAT_INNER_(a, b) a##b
#define MAXSIMD_STATUS_CONCAT_(a, b) MAXSIMD_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define MAXSIMD_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    const ::absl::Status maxsimd_status_ = (expr);     \
    if (!maxsimd_status_.ok()) return maxsimd_status_; \
  } while (0)

// `lhs = value-of(rexpr)` where rexpr is an absl::StatusOr<T>; returns the
// error from the enclosing function otherwise. lhs may declare a variable.
#define MAXSIMD_ASSIGN_OR_RETURN(lhs, rexpr) \
  MAXSIMD_ASSIGN_OR_RETURN_IMPL_(            \
      MAXSIMD_STATUS_CONCAT_(maxsimd_statusor_, __LINE__), lhs, rexpr)
#define MAXSIMD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                   \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()

#endif  // MAXSIMD_KERNELS_BASE_STATUS_MACROS_H_
