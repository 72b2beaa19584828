// The methods served raw (their messages as grpc::ByteBuffer: Rerank,
// RerankStream and AddDocuments) parse and serialise here, so that a message
// that is not a valid protobuf becomes the caller's INVALID_ARGUMENT naming
// the method (and, in a stream, the message) rather than gRPC's own answer
// (INTERNAL "Unable to parse request" for the completion-queue API, a
// silent end of the stream for the callback API's streams). The unary
// callback methods get the same status from ParseErrorInterceptor
// (parse_error_interceptor.h).
//
// Thread-safety: pure functions.
#ifndef MAXSIMD_SERVER_RAW_MESSAGE_H_
#define MAXSIMD_SERVER_RAW_MESSAGE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace maxsimd {

// The INVALID_ARGUMENT of a message of type `type` that does not parse;
// `where` names the method, and the message in a stream.
inline absl::Status UnparseableMessageError(absl::string_view where,
                                            absl::string_view type) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": the message is not a valid ", type,
                   " (it does not parse as protocol buffers)"));
}

// Parses `buffer` (consumed) into `message`; UnparseableMessageError when
// it is not one.
template <typename Message>
absl::Status ParseRawMessage(grpc::ByteBuffer* buffer, Message* message,
                             absl::string_view where) {
  if (grpc::SerializationTraits<Message>::Deserialize(buffer, message).ok()) {
    return absl::OkStatus();
  }
  return UnparseableMessageError(where, Message::descriptor()->full_name());
}

// `message`'s wire form, to write on a raw method.
template <typename Message>
grpc::ByteBuffer SerializeRawMessage(const Message& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  // Fails only past 2 GiB, which --max_message_bytes keeps responses under.
  (void)grpc::SerializationTraits<Message>::Serialize(message, &buffer, &own);
  return buffer;
}

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_RAW_MESSAGE_H_
