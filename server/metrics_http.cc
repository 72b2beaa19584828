#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <iterator>
#include <list>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "server/auth.h"
#include "spdlog/spdlog.h"

namespace maxsimd {
namespace {

using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;

constexpr char kFlag[] = "--metrics_listen";
constexpr char kMetricsContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";
// How long accepting pauses after it failed for want of descriptors.
constexpr std::chrono::milliseconds kAcceptPause{100};
// Most connections accepted per wake-up, so that a flood of new connections
// does not hold back the events of open ones.
constexpr int kAcceptBatch = 64;
// After the response: how long, and how many bytes, the connection is still
// read (and discarded) while the client closes its side. Closing a socket
// with unread bytes sends a reset, which can destroy the response before
// the client has read it.
constexpr std::chrono::milliseconds kLingerTime{1000};
constexpr int64_t kMaxLingerBytes = int64_t{1} << 20;
constexpr int kMaxEvents = 64;
constexpr absl::Duration kMaxTimeout = absl::Hours(1);
constexpr int64_t kMinRequestBytes = 256;
constexpr int64_t kMaxRequestBytes = int64_t{1} << 20;
constexpr int kMaxConnections = 65536;
constexpr auto kFdWarningInterval = std::chrono::minutes(1);

// Closes the descriptor it holds unless released.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

absl::Status CheckOptions(const MetricsHttpOptions& o) {
  if (o.max_connections < 1 || o.max_connections > kMaxConnections) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_max_connections is ", o.max_connections,
                     "; must be in [1, ", kMaxConnections, "]"));
  }
  if (o.request_timeout <= absl::ZeroDuration() ||
      o.request_timeout > kMaxTimeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_request_timeout is ",
                     absl::FormatDuration(o.request_timeout),
                     "; must be more than 0 and at most 1h"));
  }
  if (o.response_timeout <= absl::ZeroDuration() ||
      o.response_timeout > kMaxTimeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("MetricsHttpOptions.response_timeout is ",
                     absl::FormatDuration(o.response_timeout),
                     "; must be more than 0 and at most 1h"));
  }
  if (o.max_request_bytes < kMinRequestBytes ||
      o.max_request_bytes > kMaxRequestBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MetricsHttpOptions.max_request_bytes is ", o.max_request_bytes,
        "; must be in [", kMinRequestBytes, ", ", kMaxRequestBytes, "]"));
  }
  for (size_t i = 0; i < o.bearer_tokens.size(); ++i) {
    if (o.bearer_tokens[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics_token_file: token ", i + 1, " is empty"));
    }
  }
  return absl::OkStatus();
}

// Binds and listens on `listen` ("host:port" or "[v6]:port"); returns the
// non-blocking listening socket.
absl::StatusOr<int> Listen(const std::string& listen) {
  const auto malformed = [&listen](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFlag, " is \"", absl::string_view(listen).substr(0, 256),
                     "\": ", why, "; expected host:port or [v6]:port"));
  };
  absl::string_view host;
  absl::string_view port;
  const absl::string_view spec(listen);
  if (absl::StartsWith(spec, "[")) {
    const size_t close_bracket = spec.find("]:");
    if (close_bracket == absl::string_view::npos) {
      return malformed("no \"]:\" after the IPv6 address");
    }
    host = spec.substr(1, close_bracket - 1);
    port = spec.substr(close_bracket + 2);
  } else {
    const size_t colon = spec.rfind(':');
    if (colon == absl::string_view::npos) return malformed("no port");
    host = spec.substr(0, colon);
    port = spec.substr(colon + 1);
    if (absl::StrContains(host, ':')) {
      return malformed("an IPv6 address needs brackets");
    }
  }
  uint32_t port_number = 0;
  if (host.empty()) {
    return malformed("no host (0.0.0.0 or [::] for every interface)");
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return malformed("the port is not a number in [0, 65535]");
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string host_string(host);
  const std::string port_string(port);
  if (const int rc =
          getaddrinfo(host_string.c_str(), port_string.c_str(), &hints, &found);
      rc != 0) {
    return malformed(
        absl::StrCat("the host does not resolve (", gai_strerror(rc), ")"));
  }
  std::string error = "no address";
  int listen_fd = -1;
  for (const addrinfo* a = found; a != nullptr && listen_fd < 0;
       a = a->ai_next) {
    ScopedFd fd(socket(a->ai_family,
                       a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                       a->ai_protocol));
    if (fd.get() < 0) {
      error = absl::StrCat("socket: ", std::strerror(errno));
      continue;
    }
    // A restart may bind while connections of the previous process are in
    // TIME_WAIT.
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      error = absl::StrCat("bind: ", std::strerror(errno));
      continue;
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) {
      error = absl::StrCat("listen: ", std::strerror(errno));
      continue;
    }
    listen_fd = fd.release();
  }
  freeaddrinfo(found);
  if (listen_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("could not listen on ", kFlag, "=", listen, ": ", error));
  }
  return listen_fd;
}

// An HTTP status line's code and reason phrase.
struct HttpStatus {
  int code;
  const char* reason;
};
constexpr HttpStatus kOk{200, "OK"};
constexpr HttpStatus kBadRequest{400, "Bad Request"};
constexpr HttpStatus kUnauthorized{401, "Unauthorized"};
constexpr HttpStatus kNotFound{404, "Not Found"};
constexpr HttpStatus kMethodNotAllowed{405, "Method Not Allowed"};
constexpr HttpStatus kHeadTooLarge{431, "Request Header Fields Too Large"};
constexpr HttpStatus kInternalError{500, "Internal Server Error"};

// The whole response, headers and (unless `head_only`) body.
std::string Response(HttpStatus status, absl::string_view content_type,
                     absl::string_view extra_headers, absl::string_view body,
                     bool head_only) {
  return absl::StrCat("HTTP/1.1 ", status.code, " ", status.reason,
                      "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n", extra_headers, "\r\n",
                      head_only ? "" : body);
}

std::string ErrorResponse(HttpStatus status, absl::string_view why,
                          absl::string_view extra_headers = "",
                          bool head_only = false) {
  return Response(status, "text/plain; charset=utf-8", extra_headers,
                  absl::StrCat(why, "\n"), head_only);
}

// The end of the request head in `data` (the index just past the empty line
// that ends it, CRLF or bare LF line ends), or npos. `from` is where the
// previous search stopped, so that a head arriving a byte at a time is
// scanned once.
size_t FindHeadEnd(absl::string_view data, size_t from) {
  for (size_t i = from; i < data.size(); ++i) {
    if (data[i] != '\n') continue;
    if (i + 1 < data.size() && data[i + 1] == '\n') return i + 2;
    if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') {
      return i + 3;
    }
  }
  return absl::string_view::npos;
}

// RFC 9110 token characters (methods, header names).
bool IsToken(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(c) || absl::StrContains("!#$%&'*+-.^_`|~", c);
  });
}

// Whether `value` of an Authorization header is "Bearer <token>" with one of
// `tokens`. Every token is compared, in constant time, whatever matched.
bool BearerMatches(absl::string_view value,
                   const std::vector<std::string>& tokens) {
  constexpr absl::string_view kScheme = "bearer";
  value = absl::StripAsciiWhitespace(value);
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme) ||
      value[kScheme.size()] != ' ') {
    return false;
  }
  const absl::string_view given =
      absl::StripLeadingAsciiWhitespace(value.substr(kScheme.size()));
  bool match = false;
  for (const std::string& t : tokens) {
    match = ConstantTimeEquals(given, t) || match;
  }
  return match;
}

}  // namespace

// State of the serving thread; touched by that thread only, once Run()
// started. Owns the listening socket, the epoll and wake-up descriptors and
// every connection, and closes them when destroyed.
class MetricsHttpServer::Loop {
 public:
  Loop(const MetricsHttpOptions& options,
       std::vector<std::weak_ptr<prometheus::Collectable>> collectables,
       int listen_fd, int epoll_fd, int wake_fd)
      : options_(options),
        collectables_(std::move(collectables)),
        request_timeout_(absl::ToChronoNanoseconds(options.request_timeout)),
        response_timeout_(absl::ToChronoNanoseconds(options.response_timeout)),
        linger_time_(
            std::min<SteadyClock::duration>(kLingerTime, response_timeout_)),
        listen_fd_(listen_fd),
        epoll_fd_(epoll_fd),
        wake_fd_(wake_fd) {}

  ~Loop() {
    for (auto* list : {&reading_, &writing_, &lingering_}) {
      for (Connection& c : *list) close(c.fd);
    }
    close(listen_fd_);
    close(wake_fd_);
    close(epoll_fd_);
  }

  // Registers the listening and wake-up descriptors; false (errno set) on
  // failure.
  bool Register() {
    return Watch(listen_fd_, EPOLL_CTL_ADD, EPOLLIN, &listen_fd_) &&
           Watch(wake_fd_, EPOLL_CTL_ADD, EPOLLIN, &wake_fd_);
  }

  // Serves until wake_fd becomes readable.
  void Run() {
    std::array<epoll_event, kMaxEvents> events;
    for (;;) {
      const int n = epoll_wait(epoll_fd_, events.data(), kMaxEvents,
                               TimeoutMs(SteadyClock::now()));
      if (n < 0) {
        if (errno == EINTR) continue;
        spdlog::error("/metrics: epoll_wait failed ({}); no longer serving",
                      std::strerror(errno));
        return;
      }
      bool accept_ready = false;
      for (int i = 0; i < n; ++i) {
        void* tag = events[i].data.ptr;
        if (tag == &wake_fd_) return;
        if (tag == &listen_fd_) {
          accept_ready = true;
        } else {
          Serve(static_cast<Connection*>(tag));
        }
      }
      const TimePoint now = SteadyClock::now();
      if (accept_paused_until_ && now >= *accept_paused_until_) {
        accept_paused_until_.reset();
        Watch(listen_fd_, EPOLL_CTL_MOD, EPOLLIN, &listen_fd_);
        accept_ready = true;
      }
      if (accept_ready && !accept_paused_until_) Accept(now);
      Expire(now);
    }
  }

 private:
  enum class Phase {
    kReading,    // until the request head is complete; request_timeout
    kWriting,    // until the response is sent; response_timeout
    kLingering,  // sent and shut down for writing; reading until EOF
  };
  struct Connection {
    int fd = -1;
    Phase phase = Phase::kReading;
    TimePoint deadline;
    std::string in;         // kReading: the bytes received so far
    size_t scanned = 0;     // kReading: bytes of `in` with no head end
    std::string out;        // kWriting: the response
    size_t sent = 0;        // kWriting: bytes of `out` sent
    int64_t discarded = 0;  // kLingering: bytes read and dropped
    std::list<Connection>::iterator self;  // its place in ListOf(phase)
  };

  // One list per phase, in the order connections entered it. Each phase
  // adds a fixed time to the moment of entry, so every list is also in
  // deadline order: the front is the next to expire, and the front of
  // reading_ is the oldest connection without a complete request.
  std::list<Connection>& ListOf(Phase phase) {
    switch (phase) {
      case Phase::kReading:
        return reading_;
      case Phase::kWriting:
        return writing_;
      case Phase::kLingering:
        return lingering_;
    }
    return lingering_;
  }

  size_t open() const {
    return reading_.size() + writing_.size() + lingering_.size();
  }

  bool Watch(int fd, int op, uint32_t events, void* tag) {
    epoll_event e{};
    e.events = events;
    e.data.ptr = tag;
    return epoll_ctl(epoll_fd_, op, fd, &e) == 0;
  }

  void Close(Connection* c) {
    // Out of the epoll set first: close() alone leaves it there while
    // another process holds a copy of the descriptor (a fork, until its
    // exec), and a later event would then name a freed connection.
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    ListOf(c->phase).erase(c->self);
  }

  void Enter(Connection* c, Phase phase, TimePoint deadline) {
    std::list<Connection>& to = ListOf(phase);
    to.splice(to.end(), ListOf(c->phase), c->self);
    c->phase = phase;
    c->deadline = deadline;
  }

  // Milliseconds until the earliest deadline or the end of an accept pause
  // (rounded up); -1 = none.
  int TimeoutMs(TimePoint now) const {
    std::optional<TimePoint> next = accept_paused_until_;
    for (const auto* list : {&reading_, &writing_, &lingering_}) {
      if (!list->empty() && (!next || list->front().deadline < *next)) {
        next = list->front().deadline;
      }
    }
    if (!next) return -1;
    if (*next <= now) return 0;
    const auto ms =
        std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
    return static_cast<int>(std::min<int64_t>(ms, 3600 * 1000));
  }

  void Expire(TimePoint now) {
    for (auto* list : {&reading_, &writing_, &lingering_}) {
      while (!list->empty() && list->front().deadline <= now) {
        Close(&list->front());
      }
    }
  }

  // Closes the connection that loses least by it: the oldest without a
  // complete request, else the oldest already answered, else the oldest
  // being answered. REQUIRES: open() > 0.
  void EvictOne() {
    for (auto* list : {&reading_, &lingering_, &writing_}) {
      if (!list->empty()) {
        Close(&list->front());
        return;
      }
    }
  }

  void Accept(TimePoint now) {
    for (int i = 0; i < kAcceptBatch; ++i) {
      const int fd =
          accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        // The peer gave up while queued, or a signal: try the next one.
        if (errno == ECONNABORTED || errno == EINTR || errno == EPROTO) {
          continue;
        }
        // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) or
        // worse: the connection stays queued and the listening socket stays
        // readable, so stop watching it for a while instead of spinning,
        // and give back the descriptor of a connection that has sent
        // nothing useful yet.
        PauseAccepting(now, errno);
        if (!reading_.empty()) Close(&reading_.front());
        return;
      }
      if (open() >= static_cast<size_t>(options_.max_connections)) EvictOne();
      reading_.emplace_back();
      Connection* c = &reading_.back();
      c->self = std::prev(reading_.end());
      c->fd = fd;
      c->deadline = now + request_timeout_;
      if (!Watch(fd, EPOLL_CTL_ADD, EPOLLIN, c)) Close(c);
    }
  }

  void PauseAccepting(TimePoint now, int error) {
    accept_paused_until_ = now + kAcceptPause;
    Watch(listen_fd_, EPOLL_CTL_MOD, 0, &listen_fd_);
    if (!last_accept_warning_ ||
        now - *last_accept_warning_ >= kFdWarningInterval) {
      last_accept_warning_ = now;
      spdlog::warn(
          "/metrics: accept failed ({}); pausing new connections for {} ms "
          "at a time (logged at most once a minute)",
          std::strerror(error), kAcceptPause.count());
    }
  }

  // The connection is ready for the I/O of its phase (or has failed, which
  // that I/O reports).
  void Serve(Connection* c) {
    switch (c->phase) {
      case Phase::kReading:
        return Read(c);
      case Phase::kWriting:
        return Write(c);
      case Phase::kLingering:
        return Discard(c);
    }
  }

  void Read(Connection* c) {
    // Never more than one byte past the limit, so that an oversized head
    // is seen without buffering it.
    const size_t room =
        static_cast<size_t>(options_.max_request_bytes) + 1 - c->in.size();
    const ssize_t n = recv(c->fd, buf_.data(), std::min(room, buf_.size()), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return;
    }
    if (n <= 0) return Close(c);  // gone before a complete request
    c->in.append(buf_.data(), static_cast<size_t>(n));
    const size_t end = FindHeadEnd(c->in, c->scanned);
    if (end == absl::string_view::npos) {
      // A head end may start in the last two bytes.
      c->scanned = c->in.size() < 2 ? 0 : c->in.size() - 2;
      if (c->in.size() > static_cast<size_t>(options_.max_request_bytes)) {
        Respond(c, HeadTooLarge());
      }
      return;
    }
    if (end > static_cast<size_t>(options_.max_request_bytes)) {
      return Respond(c, HeadTooLarge());
    }
    Respond(c, Answer(absl::string_view(c->in).substr(0, end)));
  }

  std::string HeadTooLarge() const {
    return ErrorResponse(kHeadTooLarge,
                         absl::StrCat("the request head is over ",
                                      options_.max_request_bytes, " bytes"));
  }

  // The response to a complete request head (its request line, headers
  // and the empty line).
  std::string Answer(absl::string_view head) const {
    std::vector<absl::string_view> lines = absl::StrSplit(head, '\n');
    for (absl::string_view& line : lines) absl::ConsumeSuffix(&line, "\r");
    while (!lines.empty() && lines.back().empty()) lines.pop_back();
    if (lines.empty()) return ErrorResponse(kBadRequest, "no request line");
    const std::vector<absl::string_view> request_line =
        absl::StrSplit(lines[0], ' ');
    if (request_line.size() != 3 || !IsToken(request_line[0]) ||
        !absl::StartsWith(request_line[1], "/") ||
        (request_line[2] != "HTTP/1.1" && request_line[2] != "HTTP/1.0")) {
      return ErrorResponse(kBadRequest,
                           "the request line is not METHOD /path HTTP/1.x");
    }
    int authorization_headers = 0;
    absl::string_view authorization;
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == absl::string_view::npos ||
          !IsToken(lines[i].substr(0, colon))) {
        return ErrorResponse(
            kBadRequest,
            absl::StrCat("header line ", i, " is not \"Name: value\""));
      }
      if (absl::EqualsIgnoreCase(lines[i].substr(0, colon), "authorization")) {
        ++authorization_headers;
        authorization = lines[i].substr(colon + 1);
      }
    }
    const absl::string_view method = request_line[0];
    const bool head_only = method == "HEAD";
    if (method != "GET" && !head_only) {
      return ErrorResponse(kMethodNotAllowed, "only GET and HEAD are served",
                           "Allow: GET, HEAD\r\n", false);
    }
    const absl::string_view path =
        request_line[1].substr(0, request_line[1].find('?'));
    if (path != "/metrics") {
      return ErrorResponse(kNotFound, "only /metrics is served", "", head_only);
    }
    if (!options_.bearer_tokens.empty() &&
        !(authorization_headers == 1 &&
          BearerMatches(authorization, options_.bearer_tokens))) {
      return ErrorResponse(
          kUnauthorized,
          "/metrics needs one \"Authorization: Bearer <token>\" header with "
          "a token of --metrics_token_file",
          "WWW-Authenticate: Bearer realm=\"maxsimd metrics\"\r\n", head_only);
    }
    std::string body;
    try {
      std::vector<prometheus::MetricFamily> families;
      for (const auto& weak : collectables_) {
        if (const auto collectable = weak.lock()) {
          std::vector<prometheus::MetricFamily> f = collectable->Collect();
          families.insert(families.end(), std::make_move_iterator(f.begin()),
                          std::make_move_iterator(f.end()));
        }
      }
      std::ostringstream text;
      prometheus::TextSerializer().Serialize(text, families);
      body = std::move(text).str();
    } catch (const std::exception& e) {
      return ErrorResponse(
          kInternalError, absl::StrCat("collecting metrics failed: ", e.what()),
          "", head_only);
    }
    return Response(kOk, kMetricsContentType, "", body, head_only);
  }

  void Respond(Connection* c, std::string response) {
    std::string().swap(c->in);
    c->out = std::move(response);
    c->sent = 0;
    Enter(c, Phase::kWriting, SteadyClock::now() + response_timeout_);
    if (!Watch(c->fd, EPOLL_CTL_MOD, EPOLLOUT, c)) return Close(c);
    Write(c);
  }

  void Write(Connection* c) {
    while (c->sent < c->out.size()) {
      const ssize_t n = send(c->fd, c->out.data() + c->sent,
                             c->out.size() - c->sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return Close(c);
      c->sent += static_cast<size_t>(n);
    }
    std::string().swap(c->out);
    shutdown(c->fd, SHUT_WR);
    Enter(c, Phase::kLingering, SteadyClock::now() + linger_time_);
    if (!Watch(c->fd, EPOLL_CTL_MOD, EPOLLIN, c)) Close(c);
  }

  void Discard(Connection* c) {
    const ssize_t n = recv(c->fd, buf_.data(), buf_.size(), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return;
    }
    if (n <= 0) return Close(c);  // the client has closed too
    c->discarded += n;
    if (c->discarded > kMaxLingerBytes) Close(c);
  }

  const MetricsHttpOptions options_;
  const std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  const SteadyClock::duration request_timeout_;
  const SteadyClock::duration response_timeout_;
  const SteadyClock::duration linger_time_;
  int listen_fd_;  // its address tags its epoll events, as wake_fd_'s does
  const int epoll_fd_;
  int wake_fd_;
  std::list<Connection> reading_;
  std::list<Connection> writing_;
  std::list<Connection> lingering_;
  std::optional<TimePoint> accept_paused_until_;
  std::optional<TimePoint> last_accept_warning_;
  std::array<char, 16384> buf_;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options,
    std::vector<std::weak_ptr<prometheus::Collectable>> collectables) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  absl::StatusOr<int> listen_fd = Listen(options.listen);
  if (!listen_fd.ok()) return listen_fd.status();
  ScopedFd listen_owner(*listen_fd);
  ScopedFd epoll_fd(epoll_create1(EPOLL_CLOEXEC));
  ScopedFd wake_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (epoll_fd.get() < 0 || wake_fd.get() < 0) {
    return absl::UnavailableError(
        absl::StrCat("could not serve ", kFlag, "=", options.listen,
                     ": epoll or eventfd: ", std::strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t bound_size = sizeof(bound);
  if (getsockname(listen_owner.get(), reinterpret_cast<sockaddr*>(&bound),
                  &bound_size) != 0) {
    return absl::UnavailableError(
        absl::StrCat("could not serve ", kFlag, "=", options.listen,
                     ": getsockname: ", std::strerror(errno)));
  }
  auto server = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer());
  server->port_ =
      ntohs(bound.ss_family == AF_INET6
                ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  server->wake_fd_ = wake_fd.get();
  server->loop_ = std::make_unique<Loop>(options, std::move(collectables),
                                         listen_owner.release(),
                                         epoll_fd.release(), wake_fd.release());
  if (!server->loop_->Register()) {
    return absl::UnavailableError(
        absl::StrCat("could not serve ", kFlag, "=", options.listen,
                     ": epoll_ctl: ", std::strerror(errno)));
  }
  server->thread_ = std::thread([loop = server->loop_.get()] { loop->Run(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    // An eventfd write of 8 bytes succeeds unless the counter would
    // overflow, which one write cannot do.
    [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
}

}  // namespace maxsimd
