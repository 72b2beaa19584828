// A minimal HTTP/1.0 client over a plain socket, for `maxsimctl top`: one GET
// of a server's /metrics (server/metrics_http.h), so that maxsimctl needs no
// HTTP library.
//
// Thread-safety: pure functions; each call opens and closes its own socket.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_HTTP_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_HTTP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace maxsimd::ctl {

// Splits a gRPC target "host:port" ("dns:///" prefix allowed, "[v6]:port"
// with its brackets removed) into `host` and `port`; false when it has no
// port.
bool SplitHostPort(absl::string_view target, std::string* host,
                   std::string* port);

// The body of GET http://<address>/metrics (address: HOST:PORT), chunked
// transfer decoded. `timeout` bounds the connect and each read; a non-empty
// `token` is sent as `Authorization: Bearer <token>`. INVALID_ARGUMENT for
// an address without a port; UNAVAILABLE when the host does not resolve,
// nothing accepts, or the answer is not HTTP or not 200; DATA_LOSS for a
// bad chunked body; the errno's code when a read fails.
absl::StatusOr<std::string> HttpGetMetrics(const std::string& address,
                                           absl::Duration timeout,
                                           const std::string& token);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_HTTP_H_
