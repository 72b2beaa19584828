// A server interceptor that turns gRPC's answer to a unary request that
// does not parse (UNIMPLEMENTED with an empty message, from the callback
// API) into INVALID_ARGUMENT naming the method and the message type, and
// records it as a failed call (metrics and log). The methods served raw
// (raw_message.h) parse their messages themselves and are left alone.
//
// Thread-safety: the factory is shared by gRPC's threads; each interceptor
// belongs to one call.
#ifndef MAXSIMD_SERVER_PARSE_ERROR_INTERCEPTOR_H_
#define MAXSIMD_SERVER_PARSE_ERROR_INTERCEPTOR_H_

#include "grpcpp/support/server_interceptor.h"

namespace maxsimd {

class Metrics;

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `metrics` may be null; else it must outlive the server.
  explicit ParseErrorInterceptorFactory(Metrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  Metrics* const metrics_;
};

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_PARSE_ERROR_INTERCEPTOR_H_
