// End to end, the server's observability: --log_format=json lines that
// carry the x-request-id of the call they were written for (echoed in the
// trailing metadata), the log level changed at run time through
// `maxsimctl log-level` (Admin.SetLogLevel), and `maxsimctl top` against
// the server's /metrics.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "maxsimd/v1/admin.grpc.pb.h"
#include "maxsimd/v1/reranker.grpc.pb.h"
#include "tests/e2e/e2e_support.h"
#include "tests/support/http.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::ServerProcess;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kDim = 32;
// 64 synthetic documents of 16 tokens at dim 32.
constexpr char kDemoCorpus[] = "--demo_corpus=demo:64:16:32";

using ::maxsimd::testing::RunCommand;

// A maxsimctl command line against `server`.
std::string Ctl(const ServerProcess& server, const std::string& args) {
  const char* ctl = std::getenv("MAXSIMD_E2E_CTL_BIN");
  return absl::StrCat(ctl != nullptr ? ctl : MAXSIMCTL_BIN,
                      " --target=", server.target(), " ", args);
}

v1::RerankRequest Query(const std::string& corpus) {
  v1::RerankRequest r;
  r.set_corpus(corpus);
  r.set_top_k(5);
  const std::vector<float> q(4 * kDim, 0.125f);
  r.mutable_query()->set_dtype(v1::DTYPE_FLOAT32);
  r.mutable_query()->add_shape(4);
  r.mutable_query()->add_shape(kDim);
  r.mutable_query()->set_data(q.data(), q.size() * sizeof(float));
  return r;
}

// One Rerank on `stub` with x-request-id `id` (none when empty) and, when
// positive, a deadline; returns (code, the x-request-id trailing metadata
// or "<absent>").
std::pair<grpc::StatusCode, std::string> Rerank(
    v1::Reranker::Stub* stub, const std::string& corpus, const std::string& id,
    absl::Duration deadline = absl::ZeroDuration()) {
  grpc::ClientContext ctx;
  if (!id.empty()) ctx.AddMetadata("x-request-id", id);
  if (deadline > absl::ZeroDuration()) {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  }
  v1::RerankResponse response;
  const grpc::Status status = stub->Rerank(&ctx, Query(corpus), &response);
  const auto& trailing = ctx.GetServerTrailingMetadata();
  auto it = trailing.find("x-request-id");
  return {status.error_code(),
          it == trailing.end()
              ? std::string("<absent>")
              : std::string(it->second.data(), it->second.size())};
}

struct LogLine {
  std::string text;
  google::protobuf::Struct json;
  bool parsed = false;

  std::string Get(const std::string& key) const {
    auto it = json.fields().find(key);
    return it == json.fields().end() ? std::string("<absent>")
                                     : it->second.string_value();
  }
};

std::vector<LogLine> ReadLog(const std::string& path) {
  std::vector<LogLine> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    LogLine line;
    line.text = text;
    line.parsed =
        google::protobuf::util::JsonStringToMessage(text, &line.json).ok();
    lines.push_back(std::move(line));
  }
  return lines;
}

// Polls the log until a line satisfies `match` (10 s at most).
bool WaitForLine(const std::string& path,
                 const std::function<bool(const LogLine&)>& match) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    for (const LogLine& line : ReadLog(path)) {
      if (line.parsed && match(line)) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (absl::Now() < deadline);
  return false;
}

TEST(ObservabilityTest, JsonLogLinesCarryRequestIdsAndTheLevelChangesLive) {
  const std::string log_path =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("maxsimd_observability_", getpid(), ".log"))
          .string();
  auto started = ServerProcess::Start(
      {"--log_format=json", "--log_level=info", kDemoCorpus}, absl::Seconds(30),
      log_path);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ServerProcess> server = *std::move(started);
  auto stub = v1::Reranker::NewStub(grpc::CreateChannel(
      server->target(), grpc::InsecureChannelCredentials()));

  // A rejected request: NOT_FOUND is logged at info with its id, which
  // needs escaping in JSON, and the id comes back in the trailers.
  const std::string rejected_id = "e2e \"quoted\" \\ id-1";
  EXPECT_EQ(Rerank(stub.get(), "missing", rejected_id),
            std::make_pair(grpc::StatusCode::NOT_FOUND, rejected_id));
  EXPECT_TRUE(WaitForLine(
      log_path,
      [&](const LogLine& l) { return l.Get("request_id") == rejected_id; }))
      << "no line with request_id " << rejected_id;
  bool found = false;
  for (const LogLine& l : ReadLog(log_path)) {
    if (l.Get("request_id") != rejected_id) continue;
    found = true;
    EXPECT_EQ(l.Get("level"), "info");
    EXPECT_EQ(l.Get("logger"), "maxsimd");
    EXPECT_THAT(l.Get("message"), HasSubstr("Rerank NOT_FOUND"));
    EXPECT_THAT(l.Get("message"), HasSubstr("missing"));
    EXPECT_TRUE(std::regex_match(
        l.Get("time"),
        std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")));
  }
  EXPECT_TRUE(found);

  // A call without the metadata gets no id back.
  EXPECT_EQ(Rerank(stub.get(), "demo", ""),
            std::make_pair(grpc::StatusCode::OK, std::string("<absent>")));

  // At info a successful call writes no line; after log-level debug it
  // writes its debug line.
  EXPECT_EQ(Rerank(stub.get(), "demo", "ok-at-info").first,
            grpc::StatusCode::OK);
  auto [rc, out] = RunCommand(Ctl(*server, "log-level"));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "info\n");
  std::tie(rc, out) = RunCommand(Ctl(*server, "log-level debug"));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "log level debug (was info)\n");
  EXPECT_EQ(Rerank(stub.get(), "demo", "ok-at-debug").first,
            grpc::StatusCode::OK);
  EXPECT_TRUE(WaitForLine(log_path, [](const LogLine& l) {
    return l.Get("request_id") == "ok-at-debug" && l.Get("level") == "debug" &&
           l.Get("message").rfind("Rerank OK ", 0) == 0;
  }));
  for (const LogLine& l : ReadLog(log_path)) {
    EXPECT_EQ(l.text.find("ok-at-info"), std::string::npos) << l.text;
  }

  // An unknown level is refused by name and changes nothing.
  std::tie(rc, out) = RunCommand(Ctl(*server, "log-level loud 2>&1"));
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(out, HasSubstr("level is \"loud\""));
  EXPECT_THAT(out, HasSubstr("trace, debug, info, warn, error, critical or "
                             "off"));
  std::tie(rc, out) = RunCommand(Ctl(*server, "--json log-level --level=warn"));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "{\"level\":\"warn\",\"previous_level\":\"debug\"}\n");

  stub.reset();  // an open connection would hold up the drain
  EXPECT_EQ(server->TerminateAndWait(), 0);
  // Every line the server wrote, start-up to exit, is one JSON object.
  const std::vector<LogLine> lines = ReadLog(log_path);
  EXPECT_GE(lines.size(), 5u);
  for (const LogLine& l : lines) {
    EXPECT_TRUE(l.parsed) << l.text;
    EXPECT_NE(l.Get("time"), "<absent>") << l.text;
    EXPECT_NE(l.Get("level"), "<absent>") << l.text;
    EXPECT_NE(l.Get("message"), "<absent>") << l.text;
  }
  std::filesystem::remove(log_path);
}

// The cumulative buckets (le -> count) of one histogram series in
// Prometheus text, `selector` being its labels before `le`, e.g.
// `maxsimd_stage_duration_seconds_bucket{stage="total",`.
std::map<double, double> Buckets(const std::string& text,
                                 const std::string& selector) {
  std::map<double, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(selector + "le=\"", 0) != 0) continue;
    const size_t start = selector.size() + 4;
    const size_t end = line.find('"', start);
    const std::string le = line.substr(start, end - start);
    out[le == "+Inf" ? std::numeric_limits<double>::infinity()
                     : std::stod(le)] =
        std::stod(line.substr(line.rfind(' ') + 1));
  }
  return out;
}

// The bounds [lower, upper] of the bucket that holds quantile q.
std::pair<double, double> QuantileBucket(const std::map<double, double>& b,
                                         double q) {
  const double rank = q * b.rbegin()->second;
  double lower = 0;
  for (const auto& [le, count] : b) {
    if (count >= rank) return {lower, le};
    lower = le;
  }
  return {lower, lower};
}

double Number(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  EXPECT_NE(it, s.fields().end()) << key;
  return it == s.fields().end() ? -1 : it->second.number_value();
}

TEST(ObservabilityTest, TopShowsWhatTheMetricsEndpointHolds) {
  // Every query given a deadline under 30 s is refused before it runs.
  auto started =
      ServerProcess::Start({kDemoCorpus, "--min_execution_time=30s"});
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ServerProcess> server = *std::move(started);
  auto stub = v1::Reranker::NewStub(grpc::CreateChannel(
      server->target(), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(Rerank(stub.get(), "demo", "").first, grpc::StatusCode::OK);
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Rerank(stub.get(), "demo", "", absl::Seconds(5)).first,
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(Rerank(stub.get(), "missing", "").first,
              grpc::StatusCode::NOT_FOUND);
  }
  const std::string metrics =
      absl::StrCat(" --metrics=127.0.0.1:", server->metrics_port());

  auto [rc, out] = RunCommand(Ctl(*server, "--json top --once" + metrics));
  ASSERT_EQ(rc, 0) << out;
  google::protobuf::Struct top;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &top).ok())
      << out;
  // Nothing has run since: a scrape now holds the same counts.
  absl::StatusOr<std::string> text =
      ::maxsimd::testing::HttpGet(server->metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  auto sample = [&](const std::string& series) {
    return ::maxsimd::testing::SampleValue(*text, series);
  };

  EXPECT_TRUE(top.fields().at("since_start").bool_value());
  EXPECT_EQ(Number(top, "requests"), 13);
  EXPECT_EQ(Number(top, "requests"),
            sample("maxsimd_requests_total{code=\"OK\",method=\"Rerank\"}") +
                sample("maxsimd_requests_total{code=\"DEADLINE_EXCEEDED\","
                       "method=\"Rerank\"}") +
                sample("maxsimd_requests_total{code=\"NOT_FOUND\","
                       "method=\"Rerank\"}"));
  EXPECT_EQ(Number(top, "errors"), 5);
  const double window = Number(top, "window_seconds");
  EXPECT_GT(window, 0);
  EXPECT_LT(window, 300);
  EXPECT_NEAR(Number(top, "qps"), 13 / window, 1e-6 * 13 / window);
  EXPECT_EQ(Number(top, "queue_depth"), sample("maxsimd_queue_depth"));
  EXPECT_EQ(Number(top, "queue_bytes"), sample("maxsimd_queue_bytes"));
  EXPECT_EQ(Number(top, "rejected"), 3);
  EXPECT_EQ(Number(top, "rejected"),
            sample("maxsimd_rejected_total{reason=\"deadline\"}"));
  EXPECT_EQ(top.fields()
                .at("rejected_by_reason")
                .struct_value()
                .fields()
                .at("deadline")
                .number_value(),
            3);

  // Latency quantiles lie in the buckets /metrics says hold them.
  const double queries = Number(top, "queries");
  EXPECT_EQ(queries,
            sample("maxsimd_stage_duration_seconds_count{stage=\"total\"}"));
  EXPECT_GE(queries, 8);
  const auto total_buckets =
      Buckets(*text, "maxsimd_stage_duration_seconds_bucket{stage=\"total\",");
  ASSERT_FALSE(total_buckets.empty());
  for (const auto& [key, q] : {std::make_pair("latency_p50_ms", 0.5),
                               std::make_pair("latency_p99_ms", 0.99)}) {
    const auto [lower, upper] = QuantileBucket(total_buckets, q);
    EXPECT_GE(Number(top, key) / 1e3, lower * (1 - 1e-9)) << key;
    EXPECT_LE(Number(top, key) / 1e3, upper * (1 + 1e-9)) << key;
  }
  bool saw_rerank = false;
  for (const auto& m : top.fields().at("methods").list_value().values()) {
    const google::protobuf::Struct& row = m.struct_value();
    if (row.fields().at("method").string_value() != "Rerank") continue;
    saw_rerank = true;
    EXPECT_EQ(Number(row, "requests"), 13);
    EXPECT_EQ(Number(row, "errors"), 5);
    const auto buckets = Buckets(
        *text, "maxsimd_request_duration_seconds_bucket{method=\"Rerank\",");
    ASSERT_FALSE(buckets.empty());
    const auto [lower, upper] = QuantileBucket(buckets, 0.99);
    EXPECT_GE(Number(row, "p99_ms") / 1e3, lower * (1 - 1e-9));
    EXPECT_LE(Number(row, "p99_ms") / 1e3, upper * (1 + 1e-9));
  }
  EXPECT_TRUE(saw_rerank) << out;

  // Two text frames: since start, then the last interval.
  std::tie(rc, out) =
      RunCommand(Ctl(*server, "top --iterations=2 --interval=300ms" + metrics));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("averages since start"));
  EXPECT_THAT(out, ::testing::ContainsRegex("last [0-9]+\\.[0-9]s"));
  EXPECT_THAT(out, HasSubstr("METHOD"));
  EXPECT_THAT(out, HasSubstr("Rerank"));
  EXPECT_THAT(out, HasSubstr("STAGE"));
  EXPECT_THAT(out, HasSubstr("rejected 0.0/s (0)"));  // none in the interval
  EXPECT_EQ(out.find("\x1b["), std::string::npos);    // no ANSI off a tty

  // No endpoint: an error, not a hang; a bad interval is a usage error.
  std::tie(rc, out) = RunCommand(
      Ctl(*server, absl::StrCat("top --once --metrics=127.0.0.1:",
                                ::maxsimd::testing::FreePort(), " 2>&1")));
  EXPECT_EQ(rc, 1) << out;
  std::tie(rc, out) =
      RunCommand(Ctl(*server, "top --once --interval=0s" + metrics + " 2>&1"));
  EXPECT_EQ(rc, 2) << out;
}

// With --metrics_token_file, /metrics answers 401 without the token, and
// top sends it from --metrics-token-file.
TEST(ObservabilityTest, TopSendsTheMetricsToken) {
  const std::string token_file =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("maxsimd-metrics-token-", getpid()))
          .string();
  {
    std::ofstream out(token_file, std::ios::trunc);
    out << "# scrapers\nmetrics-token-0123456789abcdef\n";
  }
  std::filesystem::permissions(
      token_file,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto started = ServerProcess::Start(
      {kDemoCorpus, absl::StrCat("--metrics_token_file=", token_file)});
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ServerProcess> server = *std::move(started);
  const std::string metrics =
      absl::StrCat(" --metrics=127.0.0.1:", server->metrics_port());
  EXPECT_FALSE(
      ::maxsimd::testing::HttpGet(server->metrics_port(), "/metrics").ok());
  auto [rc, out] = RunCommand(Ctl(*server, "top --once" + metrics + " 2>&1"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("401"));
  std::tie(rc, out) = RunCommand(
      Ctl(*server, absl::StrCat("--json top --once", metrics,
                                " --metrics-token-file=", token_file)));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("\"version\""));
  EXPECT_THAT(out, Not(HasSubstr("metrics-token-0123456789abcdef")));
  std::filesystem::remove(token_file);
}

}  // namespace
}  // namespace maxsimd
