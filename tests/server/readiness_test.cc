// Readiness: health stays NOT_SERVING while the configured corpora load
// (from the first moment the port accepts calls), the data calls answer
// UNAVAILABLE meanwhile, health turns SERVING once they are in, and turns
// NOT_SERVING when the backend reports a sticky failure. Also: the
// backend's GPU memory reaches /metrics, and the demo corpus flag's parser
// names what is wrong.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "index/registry.h"
#include "index/synthetic.h"
#include "kernels/maxsim_cpu.h"
#include "maxsimd/v1/admin.grpc.pb.h"
#include "maxsimd/v1/reranker.grpc.pb.h"
#include "server/server.h"
#include "tests/support/forwarding_backend.h"
#include "tests/support/http.h"
#include "tests/support/status_matchers.h"
#include "tests/support/temp_dir.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::FreePort;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;
using HealthStatus = grpc::health::v1::HealthCheckResponse;

// A CPU backend whose uploads wait for `release` and whose health a test
// sets.
class ControlledBackend final : public testing::ForwardingBackend {
 public:
  ControlledBackend() : ForwardingBackend(CpuBackend::Create({}).value()) {}
  std::string name() const override { return "controlled"; }
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Upload(
      const void* host, size_t bytes) override {
    if (!upload_seen_.exchange(true)) uploading.Notify();
    release.WaitForNotification();
    return ForwardingBackend::Upload(host, bytes);
  }
  bool healthy() const override { return healthy_flag.load(); }
  std::vector<DeviceMemory> Memory() const override {
    DeviceMemory m;
    m.device = 3;
    m.corpus_bytes = 1000;
    m.workspace_bytes = 200;
    m.free_bytes = 7000;
    m.total_bytes = 9000;
    return {m};
  }

  absl::Notification uploading;  // an upload has started
  absl::Notification release;    // lets uploads proceed
  std::atomic<bool> healthy_flag{true};

 private:
  std::atomic<bool> upload_seen_{false};
};

class ReadinessTest : public ::testing::Test {
 protected:
  ReadinessTest() : port_(FreePort()) {
    options_.listen = absl::StrCat("127.0.0.1:", port_);
    options_.metrics_listen = "";
    options_.health_poll_interval = absl::Milliseconds(5);
    options_.backend_factory = [this](const ServerOptions&) {
      auto b = std::make_unique<ControlledBackend>();
      backend_ = b.get();
      return absl::StatusOr<std::unique_ptr<Backend>>(std::move(b));
    };
    channel_ = grpc::CreateChannel(options_.listen,
                                   grpc::InsecureChannelCredentials());
    health_ = grpc::health::v1::Health::NewStub(channel_);
  }

  // The whole server's health; -1 when the call fails.
  int Health() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    HealthStatus resp;
    if (!health_->Check(&ctx, req, &resp).ok()) return -1;
    return resp.status();
  }

  // Polls health until it reads `want` (up to 20 s).
  bool HealthBecomes(int want) {
    for (int i = 0; i < 2000; ++i) {
      if (Health() == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  int port_;
  ServerOptions options_;
  // Owned by the server; set by the factory on Start()'s thread.
  std::atomic<ControlledBackend*> backend_{nullptr};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

TEST_F(ReadinessTest, NotServingUntilTheDemoCorporaAreLoaded) {
  DemoCorpus demo;
  demo.num_docs = 50;
  demo.dim = 8;
  options_.demo_corpora = {demo};
  absl::StatusOr<std::unique_ptr<MaxsimServer>> server;
  std::thread start([&] { server = MaxsimServer::Start(options_); });
  // Start() is inside the load, held at its first upload; the port is open.
  while (backend_.load() == nullptr) std::this_thread::yield();
  backend_.load()->uploading.WaitForNotification();
  EXPECT_EQ(Health(), HealthStatus::NOT_SERVING);
  backend_.load()->release.Notify();
  start.join();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(Health(), HealthStatus::SERVING);
  EXPECT_EQ((*server)->corpora()->Get("demo").value()->Snapshot()->live_docs(),
            50);
}

// A free port below the kernel's ephemeral range: a client that connects
// while nothing listens there can never be given it as its own port (a TCP
// self-connection would then hold the port the server is about to bind).
int PortBelowEphemeralRange() {
  int low = 32768, high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low >> high;
  for (int port = low - 1; port > 1024 && port > low - 2000; --port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free =
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (free) return port;
  }
  return FreePort();
}

// Three corpora under a data directory and an alias "prod" of one; while
// they load again, health reads NOT_SERVING from the first answer on, and
// every data call is UNAVAILABLE (never NOT_FOUND or an empty list); once
// loaded, they all serve.
TEST_F(ReadinessTest, DataCallsAreUnavailableWhileTheDataDirectoryLoads) {
  ::maxsimd::testing::TempDir dir("maxsimd-readiness-");
  ASSERT_FALSE(dir.path().empty());
  options_.data_dir = dir.path();
  options_.listen = absl::StrCat("127.0.0.1:", PortBelowEphemeralRange());
  channel_ =
      grpc::CreateChannel(options_.listen, grpc::InsecureChannelCredentials());
  health_ = grpc::health::v1::Health::NewStub(channel_);
  SyntheticCorpusOptions so;
  so.num_docs = 20;
  so.dim = 8;
  so.min_tokens = 2;
  so.max_tokens = 4;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(so);
  {
    auto first = MaxsimServer::Start(options_);
    ASSERT_TRUE(first.ok()) << first.status();
    backend_.load()->release.Notify();
    for (const char* name : {"a", "b", "c"}) {
      CorpusConfig config;
      config.name = name;
      config.dim = 8;
      auto corpus = (*first)->corpora()->Create(config);
      ASSERT_TRUE(corpus.ok()) << corpus.status();
      DocumentBuilder builder(config, (*first)->corpora()->limits());
      std::vector<int32_t> counts;
      for (int i = 0; i < so.num_docs; ++i) {
        counts.push_back(static_cast<int32_t>(synth.cu_seqlens[i + 1] -
                                              synth.cu_seqlens[i]));
      }
      ASSERT_TRUE(builder
                      .Add(synth.ids, counts, synth.tokens.data(),
                           synth.cu_seqlens.back(), DType::kFloat32, "test")
                      .ok());
      ASSERT_TRUE((*corpus)->Append(builder.Take()).ok());
    }
    ASSERT_TRUE((*first)->corpora()->SetAlias("prod", "b").ok());
    (*first)->Shutdown();
  }
  backend_.store(nullptr);

  // Many Rerank queues: Start() has more to do after the port opens.
  options_.rerank_queues = 64;
  // Health as pollers read it from before the port opens: each answer's
  // arrival and status. One that arrived before the load was released was
  // decided before it too.
  std::atomic<bool> started{false};
  std::vector<std::vector<std::pair<absl::Time, int>>> polled(4);
  std::atomic<int> pollers_answered{0};  // pollers with an answer so far
  std::vector<std::thread> pollers;
  for (int t = 0; t < 4; ++t) {
    pollers.emplace_back([&, t] {
      // Reconnects at once while the port is closed.
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 1);
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5);
      auto health = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(
          options_.listen, grpc::InsecureChannelCredentials(), args));
      while (!started.load()) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(200));
        HealthStatus resp;
        if (health->Check(&ctx, {}, &resp).ok()) {
          polled[t].emplace_back(absl::Now(), resp.status());
          if (polled[t].size() == 1) ++pollers_answered;
        }
      }
    });
  }
  absl::StatusOr<std::unique_ptr<MaxsimServer>> server;
  std::thread start([&] { server = MaxsimServer::Start(options_); });
  while (backend_.load() == nullptr) std::this_thread::yield();
  backend_.load()->uploading.WaitForNotification();

  EXPECT_EQ(Health(), HealthStatus::NOT_SERVING);
  {
    grpc::ClientContext ctx;
    auto watch = health_->Watch(&ctx, {});
    HealthStatus first;
    ASSERT_TRUE(watch->Read(&first));
    EXPECT_EQ(first.status(), HealthStatus::NOT_SERVING);
    ctx.TryCancel();
  }
  auto admin = v1::Admin::NewStub(channel_);
  auto reranker = v1::Reranker::NewStub(channel_);
  auto unavailable = [](const grpc::Status& s, const std::string& method) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << method << ": " << s.error_message();
    EXPECT_THAT(s.error_message(),
                HasSubstr(method + ": the server is still loading"));
  };
  {
    grpc::ClientContext ctx;
    v1::ListCorporaResponse resp;
    unavailable(admin->ListCorpora(&ctx, {}, &resp), "Admin.ListCorpora");
  }
  {
    grpc::ClientContext ctx;
    v1::ListAliasesResponse resp;
    unavailable(admin->ListAliases(&ctx, {}, &resp), "Admin.ListAliases");
  }
  {
    grpc::ClientContext ctx;
    v1::GetCorpusRequest req;
    req.set_name("a");
    v1::CorpusInfo resp;
    unavailable(admin->GetCorpus(&ctx, req, &resp), "Admin.GetCorpus");
  }
  v1::RerankRequest query;
  query.set_corpus("prod");
  query.mutable_query()->set_dtype(v1::DTYPE_FLOAT32);
  query.mutable_query()->add_shape(1);
  query.mutable_query()->add_shape(8);
  query.mutable_query()->set_data(std::string(8 * sizeof(float), '\0'));
  {
    grpc::ClientContext ctx;
    v1::RerankResponse resp;
    unavailable(reranker->Rerank(&ctx, query, &resp), "Reranker.Rerank");
  }
  {
    grpc::ClientContext ctx;
    v1::RerankBatchRequest req;
    *req.add_queries() = query;
    v1::RerankBatchResponse resp;
    unavailable(reranker->RerankBatch(&ctx, req, &resp),
                "Reranker.RerankBatch");
  }
  {
    grpc::ClientContext ctx;
    auto stream = reranker->RerankStream(&ctx);
    stream->Write(query);
    stream->WritesDone();
    v1::RerankResponse resp;
    while (stream->Read(&resp)) {
    }
    unavailable(stream->Finish(), "Reranker.RerankStream");
  }
  {
    grpc::ClientContext ctx;
    v1::AddDocumentsResponse resp;
    auto writer = admin->AddDocuments(&ctx, &resp);
    v1::AddDocumentsRequest m;
    m.set_corpus("a");
    writer->Write(m);
    writer->WritesDone();
    unavailable(writer->Finish(), "Admin.AddDocuments");
  }
  {
    grpc::ClientContext ctx;
    v1::GetLogLevelResponse resp;
    EXPECT_TRUE(admin->GetLogLevel(&ctx, {}, &resp).ok());
  }

  // Every poller has read health while loading (their first answers
  // aside, those since the port opened have been read too).
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (pollers_answered.load() < 4 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const absl::Time released = absl::Now();
  backend_.load()->release.Notify();
  start.join();
  started = true;
  for (std::thread& t : pollers) t.join();
  ASSERT_TRUE(server.ok()) << server.status();
  int answers = 0, serving_early = 0;
  for (const auto& answered : polled) {
    for (const auto& [when, status] : answered) {
      if (when >= released) continue;
      ++answers;
      if (status == HealthStatus::SERVING) ++serving_early;
    }
  }
  EXPECT_GE(answers, 4);
  EXPECT_EQ(serving_early, 0)
      << "health read SERVING before the corpora were loaded";
  EXPECT_EQ(Health(), HealthStatus::SERVING);
  grpc::ClientContext ctx;
  v1::ListCorporaResponse corpora;
  ASSERT_TRUE(admin->ListCorpora(&ctx, {}, &corpora).ok());
  EXPECT_EQ(corpora.corpora_size(), 3);
  grpc::ClientContext rerank_ctx;
  v1::RerankResponse ranked;
  ASSERT_TRUE(reranker->Rerank(&rerank_ctx, query, &ranked).ok());
  EXPECT_GT(ranked.results_size(), 0);
}

// The maxsimd_serving sample of /metrics: "1", "0", or "" when absent.
std::string ServingGauge(int metrics_port) {
  auto text = ::maxsimd::testing::HttpGet(metrics_port, "/metrics");
  if (!text.ok()) return "unreachable: " + text.status().ToString();
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::ConsumePrefix(&line, "maxsimd_serving "))
      return std::string(line);
  }
  return "";
}

TEST_F(ReadinessTest, StickyBackendFailureTurnsNotServing) {
  options_.metrics_listen = "127.0.0.1:0";
  auto server = MaxsimServer::Start(options_);
  ASSERT_TRUE(server.ok()) << server.status();
  backend_.load()->release.Notify();
  EXPECT_EQ(Health(), HealthStatus::SERVING);
  EXPECT_TRUE((*server)->serving());
  EXPECT_EQ(ServingGauge((*server)->metrics_port()), "1");
  backend_.load()->healthy_flag.store(false);
  EXPECT_TRUE(HealthBecomes(HealthStatus::NOT_SERVING));
  EXPECT_FALSE((*server)->serving());
  EXPECT_EQ(ServingGauge((*server)->metrics_port()), "0");
}

TEST_F(ReadinessTest, ShutdownTurnsNotServingForGood) {
  auto server = MaxsimServer::Start(options_);
  ASSERT_TRUE(server.ok()) << server.status();
  backend_.load()->release.Notify();
  ASSERT_TRUE((*server)->serving());
  (*server)->Shutdown();
  EXPECT_FALSE((*server)->serving());
}

TEST_F(ReadinessTest, MetricsCarryTheBackendsGpuMemory) {
  options_.metrics_listen = "127.0.0.1:0";
  auto server = MaxsimServer::Start(options_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto text =
      ::maxsimd::testing::HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(::maxsimd::testing::CheckPrometheusText(*text), "");
  for (const char* line :
       {"maxsimd_gpu_memory_bytes{device=\"3\",kind=\"corpus\"} 1000",
        "maxsimd_gpu_memory_bytes{device=\"3\",kind=\"workspace\"} 200",
        "maxsimd_gpu_memory_bytes{device=\"3\",kind=\"free\"} 7000",
        "maxsimd_gpu_memory_bytes{device=\"3\",kind=\"total\"} 9000"}) {
    EXPECT_NE(text->find(line), std::string::npos) << line;
  }
}

TEST(DemoCorpusFlagTest, ParsesAndNamesTheFlagOnError) {
  auto d = ParseDemoCorpus("big:500000:300", "demo_corpus");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->name, "big");
  EXPECT_EQ(d->num_docs, 500000);
  EXPECT_EQ(d->doc_tokens, 300);
  EXPECT_EQ(d->dim, 128);
  d = ParseDemoCorpus("s:10:0:64", "demo_corpus");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->dim, 64);
  for (const char* bad :
       {"x", "x:0", ":5", "x:5:-1", "x:5:1:0", "x:5:1:2:3", "x:five"}) {
    EXPECT_THAT(ParseDemoCorpus(bad, "demo_corpus"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("--demo_corpus")))
        << bad;
  }
}

}  // namespace
}  // namespace maxsimd
