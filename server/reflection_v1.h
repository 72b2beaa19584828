// grpc.reflection.v1.ServerReflection: what grpcurl, grpcui and Postman ask
// for first. The libgrpc++ this builds against serves only v1alpha
// (grpc::reflection::InitProtoReflectionServerBuilderPlugin); this service
// answers the same questions under the v1 name, from a protobuf
// DescriptorPool (the generated pool: every .proto compiled into the
// binary).
//
// One ServerReflectionInfo stream answers its requests one at a time, in
// the order they arrive, each with one response that carries the request's
// host (valid_host) and the request itself (original_request):
//   list_services                  the service names given at construction,
//                                  in that order; the request's text is
//                                  ignored.
//   file_by_filename               the file, then the files it imports,
//   file_containing_symbol         transitively; a file already sent on the
//   file_containing_extension      stream is not sent again, except the one
//                                  asked for, which always comes first.
//                                  A symbol is the full name of a service,
//                                  method, message (nested ones too), field,
//                                  enum, enum value or extension.
//   all_extension_numbers_of_type  the field numbers of the type's known
//                                  extensions, in ascending order.
// A name that is not in the pool is answered with error_response NOT_FOUND
// and a request without a question (or with an empty name) with
// INVALID_ARGUMENT; the stream carries on either way. Files go out as
// serialized google.protobuf.FileDescriptorProto without source info.
//
// Like v1alpha, the service needs no credential (auth.h): it describes the
// API, never data. Each answer is computed in the reaction that read its
// request (pool look-ups only; nothing blocks).
//
// Thread-safety: the service is immutable once constructed and may serve
// any number of streams at once; the pool must be thread-safe for look-ups
// (the generated pool is) and outlive the service.
#ifndef MAXSIMD_SERVER_REFLECTION_V1_H_
#define MAXSIMD_SERVER_REFLECTION_V1_H_

#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace maxsimd {

class ReflectionV1Service final
    : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // `services`: the full names list_services answers with ("maxsimd.v1.
  // Reranker", ...); their files are built in `pool` now. `pool` is looked
  // up for everything else; not owned.
  explicit ReflectionV1Service(
      std::vector<std::string> services,
      const google::protobuf::DescriptorPool* pool =
          google::protobuf::DescriptorPool::generated_pool());

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // The answer to `request` on a stream that has already sent the files in
  // `*sent` (names; updated with those this answer sends). What each
  // reaction of a stream calls; public for tests.
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request,
      std::set<std::string>* sent) const;

 private:
  const std::vector<std::string> services_;
  const google::protobuf::DescriptorPool* const pool_;
};

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_REFLECTION_V1_H_
