// The Prometheus /metrics endpoint: a small HTTP/1.1 server on one thread
// that no number of idle, slow or unauthenticated connections can starve.
//
// What it answers (every response carries Content-Length and
// `Connection: close`, and the connection is closed after it):
//   GET or HEAD /metrics   200, `Content-Type: text/plain; version=0.0.4;
//                          charset=utf-8`, the text format of every live
//                          collectable's Collect() (a query string is
//                          ignored); HEAD sends the headers only.
//   another path           404
//   another method         405 with `Allow: GET, HEAD`
//   a malformed head       400 (not `METHOD /target HTTP/1.x`, or a header
//                          line without a name and a colon)
//   a head over max_request_bytes
//                          431
//   with bearer_tokens, a request for /metrics without exactly one
//   `Authorization: Bearer <token>` header whose token is one of them
//                          401 with `WWW-Authenticate: Bearer realm="maxsimd
//                          metrics"`
//   a collectable throws   500
// A head is checked in the order 431, 400, 405, 404, 401.
// A request body is never read; bytes sent after the head are discarded.
//
// Why a connection cannot block a scrape:
//   - One thread waits on every socket at once (epoll, non-blocking
//     sockets): a connection that sends nothing or one byte at a time costs
//     a slot, never the thread.
//   - Each connection has request_timeout from its accept to deliver its
//     whole request head, then response_timeout to take the whole response;
//     at either deadline it is closed without an answer. Once the response
//     is sent, the connection is shut down for writing and read (bytes
//     discarded) for up to 1 s more, until the client closes it: closing
//     with unread bytes would reset the connection and could destroy the
//     response before the client reads it.
//   - At most max_connections are open. A new connection that would exceed
//     it closes the oldest one that has not yet sent a complete request
//     (failing that, the oldest one already answered, then the oldest one
//     still being answered), so idle or slow connections can delay a
//     scraper's connection but never lock it out.
//   - When accept fails for want of file descriptors (EMFILE, ENFILE), the
//     oldest connection without a complete request (if any) is closed and
//     accepting pauses for 100 ms, rather than the loop spinning on a
//     listening socket it cannot drain.
//   - Events of open connections are handled before new connections are
//     accepted, so a scraper whose request has arrived is answered before
//     a flood of new connections can evict it.
// What it does not defend against: a client that opens connections faster
// than a scraper sends its request can still evict the scraper's connection
// (which is then older than the client's); Collect() runs on the serving
// thread, so a slow collectable delays every connection; and the plain HTTP can
// be read and its tokens replayed by anyone who can watch the network.
//
// Logging: nothing per connection or per request. A warning at most once a
// minute when accepting fails for want of file descriptors, and an error if
// the event loop itself fails. No token is ever logged.
//
// Thread-safety: Start() and the destructor are called from one thread;
// port() from any thread. The serving thread calls each collectable's
// Collect(), concurrently with whatever else uses it, so collectables must
// be thread-safe (prometheus::Registry is).
#ifndef MAXSIMD_SERVER_METRICS_HTTP_H_
#define MAXSIMD_SERVER_METRICS_HTTP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace maxsimd {

struct MetricsHttpOptions {
  // --metrics_listen: "host:port" (an IPv4 address or a host name) or
  // "[v6]:port"; port 0 picks a free port (MetricsHttpServer::port()).
  std::string listen = "0.0.0.0:9464";
  // --metrics_token_file: the tokens a scrape may present as
  // `Authorization: Bearer <token>`, compared in constant time
  // (ConstantTimeEquals, auth.h); empty = no authentication.
  std::vector<std::string> bearer_tokens;
  // --metrics_max_connections: connections open at once, in [1, 65536].
  int max_connections = 256;
  // --metrics_request_timeout: from accept, to receive the whole request
  // head; in (0, 1h].
  absl::Duration request_timeout = absl::Seconds(5);
  // From the end of the request head, to hand the whole response to the
  // kernel; in (0, 1h].
  absl::Duration response_timeout = absl::Seconds(10);
  // The longest request head (request line and headers, with line ends),
  // in [256, 1 MiB].
  int64_t max_request_bytes = 8192;
};

class MetricsHttpServer {
 public:
  // Checks the options, binds and listens, and starts the serving thread.
  // INVALID_ARGUMENT naming the flag (or the field of MetricsHttpOptions
  // that has none) and its limit for an option out of range or a listen
  // address that is not host:port or [v6]:port or does not resolve;
  // UNAVAILABLE naming --metrics_listen when it cannot bind or listen.
  // The server holds the collectables by weak_ptr: the caller keeps them
  // alive, and one that has expired is left out of the scrape.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsHttpOptions& options,
      std::vector<std::weak_ptr<prometheus::Collectable>> collectables);

  // Stops the serving thread (a scrape being collected finishes first) and
  // closes the listening socket and every connection.
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The port listened on (the chosen one when options.listen asked for 0).
  int port() const { return port_; }

 private:
  class Loop;  // the serving thread's state (metrics_http.cc)

  MetricsHttpServer() = default;

  int port_ = 0;
  int wake_fd_ = -1;  // eventfd: written once by the destructor
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_METRICS_HTTP_H_
