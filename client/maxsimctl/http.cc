#include "client/maxsimctl/http.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/base/status_macros.h"

namespace maxsimd::ctl {
namespace {

// A socket connected to host:port (any address it resolves to), with
// `timeout` on the connect, each send and each read; UNAVAILABLE naming
// `address` otherwise.
absl::StatusOr<int> ConnectTcp(const std::string& address,
                               const std::string& host, const std::string& port,
                               absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  int fd = -1;
  const timeval tv = absl::ToTimeval(timeout);
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // connect too
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the metrics endpoint ", address));
  }
  return fd;
}

// Sends `request` on `fd` and reads the whole answer, until the server
// closes the connection. Closes `fd`.
absl::StatusOr<std::string> Exchange(int fd, const std::string& address,
                                     const std::string& request) {
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n =
        send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("send to ", address));
    }
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[16384];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  const int read_errno = errno;
  close(fd);
  if (n < 0) {
    return absl::ErrnoToStatus(read_errno,
                               absl::StrCat("reading from ", address));
  }
  return response;
}

// The body of a whole HTTP response to GET /metrics, which must be 200;
// chunked transfer decoded.
absl::StatusOr<std::string> ResponseBody(const std::string& address,
                                         const std::string& response) {
  const size_t header_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || header_end == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat(address, " did not answer HTTP"));
  }
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (status_line.find(" 200") == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat(address, "/metrics answered '", status_line, "'"));
  }
  std::string body = response.substr(header_end + 4);
  const std::string headers =
      absl::AsciiStrToLower(response.substr(0, header_end));
  if (headers.find("transfer-encoding: chunked") == std::string::npos) {
    return body;
  }
  std::string plain;
  size_t pos = 0;
  for (;;) {
    const size_t eol = body.find("\r\n", pos);
    size_t size = 0;
    if (eol == std::string::npos ||
        !absl::SimpleHexAtoi(
            absl::StripAsciiWhitespace(body.substr(pos, eol - pos)), &size) ||
        eol + 2 + size > body.size()) {
      return absl::DataLossError(
          absl::StrCat(address, "/metrics: bad chunked body"));
    }
    if (size == 0) break;
    plain.append(body, eol + 2, size);
    pos = eol + 2 + size + 2;
  }
  return plain;
}

}  // namespace

bool SplitHostPort(absl::string_view target, std::string* host,
                   std::string* port) {
  absl::ConsumePrefix(&target, "dns:///");
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      colon + 1 == target.size()) {
    return false;
  }
  absl::string_view h = target.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);  // [IPv6]
  }
  *host = std::string(h);
  *port = std::string(target.substr(colon + 1));
  return true;
}

absl::StatusOr<std::string> HttpGetMetrics(const std::string& address,
                                           absl::Duration timeout,
                                           const std::string& token) {
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics is '", address, "'; expected HOST:PORT"));
  }
  MAXSIMD_ASSIGN_OR_RETURN(int fd, ConnectTcp(address, host, port, timeout));
  const std::string request = absl::StrCat(
      "GET /metrics HTTP/1.0\r\nHost: ", address, "\r\nAccept: text/plain\r\n",
      token.empty() ? ""
                    : absl::StrCat("Authorization: Bearer ", token, "\r\n"),
      "Connection: close\r\n\r\n");
  MAXSIMD_ASSIGN_OR_RETURN(std::string response,
                           Exchange(fd, address, request));
  return ResponseBody(address, response);
}

}  // namespace maxsimd::ctl
