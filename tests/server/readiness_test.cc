// Readiness: health stays NOT_SERVING while the configured corpora load,
// turns SERVING once they are in, and turns NOT_SERVING when the backend
// reports a sticky failure. Also: the backend's GPU memory reaches /metrics,
// and the demo corpus flag's parser names what is wrong.

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "index/registry.h"
#include "kernels/maxsim_cpu.h"
#include "server/server.h"
#include "tests/support/forwarding_backend.h"
#include "tests/support/http.h"
#include "tests/support/status_matchers.h"

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
