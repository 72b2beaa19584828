#include "server/parse_error_interceptor.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "server/grpc_status.h"
#include "server/raw_message.h"
#include "server/reranker_service.h"

namespace maxsimd {
namespace {

using grpc::experimental::InterceptionHookPoints;

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  // `method`: the full gRPC method name, "/maxsimd.v1.Admin/CreateCorpus".
  ParseErrorInterceptor(Metrics* metrics, const std::string& method)
      : metrics_(metrics), arrival_(absl::Now()), path_(method) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        m->GetRecvMessage() == nullptr) {
      unparsed_ = true;
    }
    if (unparsed_ && m->QueryInterceptionHookPoint(
                         InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status sent = m->GetSendStatus();
      if (sent.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        const absl::Status status = Error();
        m->ModifySendStatus(ToGrpcStatus(status));
        ObserveCall(metrics_, MethodName().c_str(), arrival_, status, "");
      }
    }
    m->Proceed();
  }

 private:
  // "CreateCorpus" of "/maxsimd.v1.Admin/CreateCorpus".
  std::string MethodName() const {
    const size_t slash = path_.rfind('/');
    return slash == std::string::npos ? path_ : path_.substr(slash + 1);
  }

  // INVALID_ARGUMENT naming "Admin.CreateCorpus" and its request type.
  absl::Status Error() const {
    // "maxsimd.v1.Admin.CreateCorpus", as the descriptor pool names it.
    const std::string full = absl::StrReplaceAll(
        path_.size() > 1 ? path_.substr(1) : path_, {{"/", "."}});
    const google::protobuf::MethodDescriptor* d =
        google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
            full);
    const size_t dot =
        d != nullptr ? d->service()->full_name().rfind('.') : std::string::npos;
    const std::string where =
        d == nullptr ? full
                     : absl::StrCat(d->service()->full_name().substr(dot + 1),
                                    ".", d->name());
    return UnparseableMessageError(
        where, d != nullptr ? d->input_type()->full_name() : "request");
  }

  Metrics* const metrics_;
  const absl::Time arrival_;
  const std::string path_;
  bool unparsed_ = false;
};

}  // namespace

grpc::experimental::Interceptor*
ParseErrorInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  // Methods with one request message (unary, and server streaming such as
  // Health.Watch); the client-streaming and bidi methods of maxsimd, and
  // Rerank, are served raw.
  const auto type = info->type();
  if ((type != grpc::experimental::ServerRpcInfo::Type::UNARY &&
       type != grpc::experimental::ServerRpcInfo::Type::SERVER_STREAMING) ||
      std::string(info->method()) == "/maxsimd.v1.Reranker/Rerank") {
    return nullptr;
  }
  return new ParseErrorInterceptor(metrics_, info->method());
}

}  // namespace maxsimd
