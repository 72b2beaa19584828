// Conversions between absl::Status and grpc::Status, and time helpers for
// gRPC deadlines.
//
// Thread-safety: pure functions.
#ifndef MAXSIMD_SERVER_GRPC_STATUS_H_
#define MAXSIMD_SERVER_GRPC_STATUS_H_

#include <chrono>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace maxsimd {

// Most bytes of a status message sent to a client. gRPC sends the message
// as a header, which a client refuses past its metadata limit (8 KiB by
// default) with RESOURCE_EXHAUSTED instead of the error, and gRPC 1.51's
// connection then fails later calls too; an error that quotes a large
// request field (an id, a name) must not do that.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// A longer message keeps its start (the field) and its end (often the
// limit), and says how much was cut between them.
inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(s.code());
  const absl::string_view message = s.message();
  if (message.size() <= kMaxStatusMessageBytes) {
    return grpc::Status(code, std::string(message));
  }
  constexpr size_t kHead = 640, kTail = 256;
  return grpc::Status(
      code, absl::StrCat(message.substr(0, kHead), "[... ",
                         message.size() - kHead - kTail, " bytes cut ...]",
                         message.substr(message.size() - kTail)));
}

// The call's deadline; InfiniteFuture when the client set none.
inline absl::Time DeadlineOf(const grpc::ServerContextBase& ctx) {
  const auto d = ctx.deadline();
  if (d >= std::chrono::system_clock::time_point::max() -
               std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_GRPC_STATUS_H_
