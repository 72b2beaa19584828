// Conversions between absl::Status and grpc::Status, and time helpers for
// gRPC deadlines.
//
// Thread-safety: pure functions.
#ifndef MAXSIMD_SERVER_GRPC_STATUS_H_
#define MAXSIMD_SERVER_GRPC_STATUS_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace maxsimd {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

// The call's deadline; InfiniteFuture when the client set none.
inline absl::Time DeadlineOf(const grpc::CallbackServerContext& ctx) {
  const auto d = ctx.deadline();
  if (d >= std::chrono::system_clock::time_point::max() -
               std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_GRPC_STATUS_H_
