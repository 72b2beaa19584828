// server/metrics_http.cc over loopback sockets: scrapes stay fast under idle
// and slow connections, eviction at max_connections, the request deadline,
// bearer tokens, the error answers, option checks, and running out of file
// descriptors. Every client socket has a receive timeout, so a server that
// stalls fails a test instead of hanging it.
#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/support/captured_log.h"
#include "tests/support/http.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::CheckPrometheusText;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

constexpr char kCounterLine[] = "maxsimd_test_events_total 3";
constexpr char kToken[] = "metrics-token-0123456789abcdef";
constexpr char kOtherToken[] = "other-token-fedcba9876543210";
constexpr auto kScrapeBudget = std::chrono::seconds(1);

// A client socket connected to 127.0.0.1:port whose reads and writes give up
// after `timeout`; -1 when the connection fails.
int Connect(int port, std::chrono::milliseconds timeout = kScrapeBudget) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` on a new connection and reads until the server closes it.
// DEADLINE_EXCEEDED when the whole exchange takes longer than kScrapeBudget.
absl::StatusOr<std::string> Exchange(int port, const std::string& request) {
  const Clock::time_point start = Clock::now();
  const int fd = Connect(port);
  if (fd < 0) return absl::UnavailableError("connect failed");
  std::string response;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::DeadlineExceededError("send did not complete");
  }
  char buf[16384];
  ssize_t n = 0;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    response.append(buf, static_cast<size_t>(n));
    if (Clock::now() - start > kScrapeBudget) break;
  }
  const int error = errno;
  close(fd);
  const auto took = Clock::now() - start;
  if (n < 0 && error != EAGAIN && error != EWOULDBLOCK) {
    return absl::UnavailableError(absl::StrCat(
        "recv: ", std::strerror(error), " after ", response.size(), " bytes"));
  }
  if (n < 0 || took > kScrapeBudget) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no complete answer after ",
        std::chrono::duration_cast<std::chrono::milliseconds>(took).count(),
        " ms; got ", response.size(), " bytes"));
  }
  return response;
}

std::string Get(absl::string_view path, absl::string_view extra_headers = "") {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                      extra_headers, "\r\n");
}

std::string BodyOf(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

// Whether the server closed `fd` (a read returns 0) within `within`.
bool ClosedWithin(int fd, std::chrono::milliseconds within) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(within.count())) != 1) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

// A registry holding maxsimd_test_events_total = 3.
std::shared_ptr<prometheus::Registry> TestRegistry() {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("maxsimd_test_events_total")
      .Help("Events counted by the test")
      .Register(*registry)
      .Add({})
      .Increment(3);
  return registry;
}

// Sends one more byte of a request head every 100 ms on each of `fds`,
// from a thread of its own, until destroyed. The head never ends: after the
// request line, one header's value grows until the server gives up.
class SlowClients {
 public:
  explicit SlowClients(std::vector<int> fds)
      : fds_(std::move(fds)), thread_([this] { Run(); }) {}
  ~SlowClients() {
    stop_.Notify();
    thread_.join();
  }
  // Bytes sent on each connection so far.
  int ticks() const { return ticks_.load(); }

 private:
  void Run() {
    const std::string prefix = "GET /metrics HTTP/1.1\r\nX-Slow: ";
    for (size_t i = 0;; ++i) {
      const char c = i < prefix.size() ? prefix[i] : 'a';
      for (int fd : fds_) send(fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      ++ticks_;
      if (stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
        return;
      }
    }
  }

  const std::vector<int> fds_;
  absl::Notification stop_;
  std::atomic<int> ticks_{0};
  std::thread thread_;  // last: it starts once the members above exist
};

class MetricsHttpTest : public ::testing::Test {
 protected:
  // Starts a server on 127.0.0.1 (a free port) serving registry_.
  std::unique_ptr<MetricsHttpServer> StartServer(
      MetricsHttpOptions options = {}) {
    options.listen = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(options, {registry_});
    EXPECT_THAT(server, ::maxsimd::testing::IsOk());
    return server.ok() ? std::move(server).value() : nullptr;
  }

  void TearDown() override {
    for (int fd : fds_) close(fd);
  }

  // Connections closed at the end of the test.
  int Track(int fd) {
    fds_.push_back(fd);
    return fd;
  }

  std::shared_ptr<prometheus::Registry> registry_ = TestRegistry();
  std::vector<int> fds_;
};

// A child process (a fork that has not yet exec'd, as a test's popen or
// a server's helper makes) holds copies of the server's descriptors: the
// connections the server closes meanwhile must not stay in its epoll set,
// whose next events would name freed connections.
TEST_F(MetricsHttpTest, ConnectionsClosedWhileAForkHoldsThemAreForgotten) {
  const auto server = StartServer();
  ASSERT_NE(server, nullptr);
  // Connections the server has accepted (a scrape answers after accepts)
  // before the fork, so that the child holds their descriptors.
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(Track(Connect(server->port())));
    ASSERT_GE(held.back(), 0);
  }
  ASSERT_THAT(Exchange(server->port(), Get("/metrics")),
              ::maxsimd::testing::IsOk());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    usleep(1500 * 1000);
    _exit(0);
  }
  // Each held connection gets its answer, then both ends close it.
  for (int fd : held) {
    const std::string request = Get("/metrics");
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    char buf[16384];
    std::string response;
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) {
      response.append(buf, static_cast<size_t>(n));
    }
    EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
    shutdown(fd, SHUT_RDWR);
  }
  // The server keeps serving while the child still holds the copies.
  for (int i = 0; i < 20; ++i) {
    const absl::StatusOr<std::string> response =
        Exchange(server->port(), Get("/metrics"));
    ASSERT_THAT(response, ::maxsimd::testing::IsOk()) << "scrape " << i;
    EXPECT_THAT(BodyOf(*response), HasSubstr(kCounterLine));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
}

TEST_F(MetricsHttpTest, ScrapesStayFastUnderIdleAndSlowConnections) {
  const auto server = StartServer();
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < 60; ++i) ASSERT_GE(Track(Connect(server->port())), 0);
  std::vector<int> slow;
  for (int i = 0; i < 10; ++i) {
    slow.push_back(Track(Connect(server->port())));
    ASSERT_GE(slow.back(), 0);
  }
  const SlowClients slow_clients(slow);
  while (slow_clients.ticks() < 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Scrapes 25 ms apart, so that they interleave with the slow bytes.
  for (int i = 0; i < 20; ++i) {
    const absl::StatusOr<std::string> response =
        Exchange(server->port(), Get("/metrics"));
    ASSERT_THAT(response, ::maxsimd::testing::IsOk()) << "scrape " << i;
    EXPECT_THAT(*response, StartsWith("HTTP/1.1 200 OK\r\n"));
    EXPECT_THAT(BodyOf(*response), HasSubstr(kCounterLine));
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
}

TEST_F(MetricsHttpTest, ResponseHeadersAndFormat) {
  const auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const absl::StatusOr<std::string> get =
      Exchange(server->port(), Get("/metrics?x=1"));
  ASSERT_THAT(get, ::maxsimd::testing::IsOk());
  EXPECT_THAT(*get, HasSubstr("\r\nContent-Type: text/plain; version=0.0.4; "
                              "charset=utf-8\r\n"));
  EXPECT_THAT(*get, HasSubstr("\r\nConnection: close\r\n"));
  const std::string body = BodyOf(*get);
  EXPECT_THAT(*get, HasSubstr(absl::StrCat("\r\nContent-Length: ", body.size(),
                                           "\r\n")));
  EXPECT_EQ(CheckPrometheusText(body), "");

  const absl::StatusOr<std::string> head = Exchange(
      server->port(), "HEAD /metrics HTTP/1.0\r\n\r\n");  // bare HTTP/1.0
  ASSERT_THAT(head, ::maxsimd::testing::IsOk());
  EXPECT_THAT(*head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(*head, HasSubstr(absl::StrCat("\r\nContent-Length: ", body.size(),
                                            "\r\n")));
  EXPECT_EQ(BodyOf(*head), "");

  // Bare LF line ends are accepted.
  const absl::StatusOr<std::string> lf =
      Exchange(server->port(), "GET /metrics HTTP/1.1\nHost: x\n\n");
  ASSERT_THAT(lf, ::maxsimd::testing::IsOk());
  EXPECT_THAT(BodyOf(*lf), HasSubstr(kCounterLine));
}

TEST_F(MetricsHttpTest, ExpiredCollectablesAreLeftOut) {
  auto other = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("maxsimd_test_gone_total")
      .Help("Expires before the scrape")
      .Register(*other)
      .Add({});
  MetricsHttpOptions options;
  options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options, {registry_, other});
  ASSERT_THAT(server, ::maxsimd::testing::IsOk());
  other.reset();
  const absl::StatusOr<std::string> response =
      Exchange((*server)->port(), Get("/metrics"));
  ASSERT_THAT(response, ::maxsimd::testing::IsOk());
  EXPECT_THAT(*response, HasSubstr(kCounterLine));
  EXPECT_THAT(*response, Not(HasSubstr("maxsimd_test_gone_total")));
}

TEST_F(MetricsHttpTest, NewConnectionsEvictTheOldestIdleOne) {
  MetricsHttpOptions options;
  options.max_connections = 8;
  const auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(Track(Connect(server->port())));
    ASSERT_GE(idle.back(), 0);
  }
  const absl::StatusOr<std::string> response =
      Exchange(server->port(), Get("/metrics"));
  ASSERT_THAT(response, ::maxsimd::testing::IsOk());
  EXPECT_THAT(BodyOf(*response), HasSubstr(kCounterLine));
  // 21 connections for 8 places: the oldest idle ones made room.
  EXPECT_TRUE(ClosedWithin(idle.front(), std::chrono::milliseconds(500)));
  EXPECT_FALSE(ClosedWithin(idle.back(), std::chrono::milliseconds(0)));
}

TEST_F(MetricsHttpTest, RequestTimeoutClosesIdleAndSlowConnections) {
  MetricsHttpOptions options;
  options.request_timeout = absl::Milliseconds(200);
  const auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  const Clock::time_point start = Clock::now();
  const int idle = Track(Connect(server->port()));
  const int slow = Track(Connect(server->port()));
  ASSERT_GE(idle, 0);
  ASSERT_GE(slow, 0);
  // The deadline counts from accept: bytes arriving do not extend it. The
  // slow client keeps sending, a byte every 40 ms for 1.2 s (a request head
  // never completes), and must be closed while it still does, near 200 ms.
  const std::string partial = "GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaa";
  Clock::duration slow_closed_at = Clock::duration::max();
  for (char c : partial.substr(0, 30)) {
    char got;
    const ssize_t n = recv(slow, &got, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      slow_closed_at = Clock::now() - start;
      break;
    }
    send(slow, &c, 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  EXPECT_GE(slow_closed_at, std::chrono::milliseconds(180));
  EXPECT_LT(slow_closed_at, std::chrono::milliseconds(800))
      << "the slow connection was still open after its bytes";
  EXPECT_TRUE(ClosedWithin(idle, std::chrono::milliseconds(2000)));
}

using ::maxsimd::testing::CapturedLog;

TEST_F(MetricsHttpTest, BearerTokens) {
  CapturedLog log;
  MetricsHttpOptions options;
  options.bearer_tokens = {kOtherToken, kToken};
  const auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  const auto bearer = [](absl::string_view token) {
    return absl::StrCat("Authorization: Bearer ", token, "\r\n");
  };
  const std::vector<std::string> refused = {
      Get("/metrics"),
      Get("/metrics", bearer("wrong-token-aaaaaaaaaaaaaaaa")),
      Get("/metrics", bearer(absl::StrCat(kToken, "x"))),
      Get("/metrics", absl::StrCat("Authorization: Basic ", kToken, "\r\n")),
      Get("/metrics", absl::StrCat(bearer(kToken), bearer(kToken))),
      Get("/metrics", "Authorization: Bearer \r\n"),
  };
  for (const std::string& request : refused) {
    const absl::StatusOr<std::string> response =
        Exchange(server->port(), request);
    ASSERT_THAT(response, ::maxsimd::testing::IsOk()) << request;
    EXPECT_THAT(*response, StartsWith("HTTP/1.1 401 Unauthorized\r\n"))
        << request;
    EXPECT_THAT(*response, HasSubstr("\r\nWWW-Authenticate: Bearer "
                                     "realm=\"maxsimd metrics\"\r\n"));
    EXPECT_THAT(*response, Not(HasSubstr("maxsimd_test_events_total")));
  }
  for (const char* token : {kToken, kOtherToken}) {
    const absl::StatusOr<std::string> response = Exchange(
        server->port(), Get("/metrics", absl::StrCat("authorization:  bearer ",
                                                     token, " \r\n")));
    ASSERT_THAT(response, ::maxsimd::testing::IsOk());
    EXPECT_THAT(*response, StartsWith("HTTP/1.1 200 OK\r\n"));
    EXPECT_THAT(BodyOf(*response), HasSubstr(kCounterLine));
  }
  EXPECT_THAT(log.Text(), Not(HasSubstr(kToken)));
  EXPECT_THAT(log.Text(), Not(HasSubstr(kOtherToken)));
}

TEST_F(MetricsHttpTest, ErrorAnswers) {
  MetricsHttpOptions options;
  options.max_request_bytes = 1024;
  const auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  struct Case {
    std::string request;
    std::string status_line;
  };
  const std::vector<Case> cases = {
      {Get("/"), "HTTP/1.1 404 Not Found\r\n"},
      {Get("/metricsx"), "HTTP/1.1 404 Not Found\r\n"},
      {"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
       "HTTP/1.1 405 Method Not Allowed\r\n"},
      {"DELETE /metrics HTTP/1.1\r\n\r\n",
       "HTTP/1.1 405 Method Not Allowed\r\n"},
      {"GET /metrics\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
      {"GET metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
      {"GET /metrics HTTP/2.0\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
      {"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
       "HTTP/1.1 400 Bad Request\r\n"},
      {"GET /metrics HTTP/1.1\r\n folded: header\r\n\r\n",
       "HTTP/1.1 400 Bad Request\r\n"},
      // Over the limit with the head still open, and with it complete.
      {absl::StrCat("GET /metrics HTTP/1.1\r\nX-Big: ", std::string(2000, 'a')),
       "HTTP/1.1 431 Request Header Fields Too Large\r\n"},
      {Get("/metrics", absl::StrCat("X-Big: ", std::string(1010, 'a'), "\r\n")),
       "HTTP/1.1 431 Request Header Fields Too Large\r\n"},
  };
  for (const Case& c : cases) {
    const absl::StatusOr<std::string> response =
        Exchange(server->port(), c.request);
    ASSERT_THAT(response, ::maxsimd::testing::IsOk()) << c.request;
    EXPECT_THAT(*response, StartsWith(c.status_line)) << c.request;
    EXPECT_THAT(*response, HasSubstr("\r\nConnection: close\r\n"));
    EXPECT_THAT(*response, Not(HasSubstr("maxsimd_test_events_total")));
    if (absl::StrContains(c.status_line, "405")) {
      EXPECT_THAT(*response, HasSubstr("\r\nAllow: GET, HEAD\r\n"));
    }
  }
}

TEST(MetricsHttpStartTest, ChecksOptions) {
  const auto start = [](MetricsHttpOptions o) {
    return MetricsHttpServer::Start(o, {}).status();
  };
  MetricsHttpOptions o;
  for (const char* bad : {"127.0.0.1", ":9464", "::1:9464", "[::1]9464",
                          "127.0.0.1:65536", "127.0.0.1:x", "127.0.0.1:-1"}) {
    o.listen = bad;
    EXPECT_THAT(start(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("--metrics_listen")))
        << bad;
  }
  o.listen = "127.0.0.1:0";
  o.max_connections = 0;
  EXPECT_THAT(start(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("--metrics_max_connections")));
  o.max_connections = 8;
  o.request_timeout = absl::ZeroDuration();
  EXPECT_THAT(start(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("--metrics_request_timeout")));
  o.request_timeout = absl::Seconds(1);
  o.max_request_bytes = 10;
  EXPECT_THAT(start(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("max_request_bytes")));
  o.max_request_bytes = 8192;
  o.bearer_tokens = {""};
  EXPECT_THAT(start(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("--metrics_token_file")));

  // A port already taken.
  MetricsHttpOptions first;
  first.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> taken =
      MetricsHttpServer::Start(first, {});
  ASSERT_THAT(taken, ::maxsimd::testing::IsOk());
  first.listen = absl::StrCat("127.0.0.1:", (*taken)->port());
  EXPECT_THAT(start(first), StatusIs(absl::StatusCode::kUnavailable,
                                     HasSubstr("--metrics_listen")));
}

TEST_F(MetricsHttpTest, ListensOnIPv6) {
  MetricsHttpOptions options;
  options.listen = "[::1]:0";
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options, {registry_});
  if (server.status().code() == absl::StatusCode::kUnavailable) {
    GTEST_SKIP() << "no IPv6 loopback: " << server.status();
  }
  ASSERT_THAT(server, ::maxsimd::testing::IsOk());
  const int fd = Track(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_GE(fd, 0);
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  addr.sin6_port = htons(static_cast<uint16_t>((*server)->port()));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string request = Get("/metrics");
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) {
    response.append(buf, static_cast<size_t>(n));
  }
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr(kCounterLine));
}

// Open descriptors of this process, and the highest of them.
void OpenFds(int* count, int* highest) {
  *count = 0;
  *highest = -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == own) continue;
    ++*count;
    *highest = std::max(*highest, fd);
  }
  closedir(dir);
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Accept failing with EMFILE leaves the connection queued and the listening
// socket readable; the loop must neither spin on it nor stop accepting.
TEST_F(MetricsHttpTest, RunningOutOfDescriptorsDoesNotSpin) {
  const auto server = StartServer();
  ASSERT_NE(server, nullptr);
  // Client sockets, created first so that they fill every free descriptor
  // number below the limit set next: the server cannot accept at all, and
  // has no connection of its own to close for room.
  int count = 0;
  int highest = 0;
  OpenFds(&count, &highest);
  std::vector<int> clients;
  while (clients.size() < 40 || clients.back() <= highest) {
    clients.push_back(Track(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)));
    ASSERT_GE(clients.back(), 0);
  }
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(clients.back()) + 1;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(server->port()));
  int connected = 0;
  for (int fd : clients) {
    connected +=
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double cpu_before = CpuSeconds();
  const Clock::time_point wall_before = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const double cpu = CpuSeconds() - cpu_before;
  const double wall =
      std::chrono::duration<double>(Clock::now() - wall_before).count();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(connected, static_cast<int>(clients.size()));
  EXPECT_LT(cpu, wall / 4) << "the serving thread spins: " << cpu
                           << " s of CPU in " << wall << " s";
  for (int& fd : fds_) {
    close(fd);
    fd = -1;
  }
  fds_.clear();
  // Accepting resumes once descriptors are back.
  const absl::StatusOr<std::string> response =
      Exchange(server->port(), Get("/metrics"));
  ASSERT_THAT(response, ::maxsimd::testing::IsOk());
  EXPECT_THAT(BodyOf(*response), HasSubstr(kCounterLine));
}

}  // namespace
}  // namespace maxsimd
