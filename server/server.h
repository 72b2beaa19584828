// The maxsimd server: picks a compute backend, builds the corpus registry,
// scheduler, gRPC services (Reranker, Admin, grpc.health.v1, reflection) and
// the Prometheus endpoint, and shuts them down in order.
//
// Readiness: health (grpc.health.v1, for the whole server and each service;
// the server's own HealthService, which starts NOT_SERVING) is NOT_SERVING
// from the moment the port opens until every corpus and alias under
// data_dir has loaded (or failed to, as DATA_LOSS) and the demo corpora are
// made, again whenever the backend reports a sticky device failure, and
// from the start of a drain. Until loading ends the data calls answer
// UNAVAILABLE (LoadingGate), never NOT_FOUND or an empty list.
//
// Connections: the gRPC port closes a connection that has not finished its
// HTTP/2 handshake within grpc_handshake_timeout, one idle (no call) for
// grpc_max_connection_idle, and, after a grace, one older than
// grpc_max_connection_age; it pings an idle client every grpc_keepalive_time
// and drops it when no answer comes within grpc_keepalive_timeout.
//
// Shutdown order: health turns NOT_SERVING; for drain_grace the server still
// accepts connections and answers every call, so that a load balancer
// polling health takes the replica out before anything is refused; then
// gRPC stops accepting calls and waits up to the drain deadline for calls in
// flight (the scheduler keeps executing meanwhile, so queued queries
// finish), then the scheduler stops and the backend is released.
//
// Security: the gRPC port serves TLS or mutual TLS per ServerOptions::tls,
// and Admin (and, if asked, Reranker) calls are authenticated per
// ServerOptions::auth (auth.h); health and reflection stay open. /metrics
// is plain HTTP on its own address (--metrics_listen), optionally behind a
// bearer token (--metrics_token_file), served by MetricsHttpServer, which
// idle or slow connections cannot block.
//
// Thread-safety: Start() and Shutdown() are called from one thread (main or
// a test); accessors are safe from any thread once Start() returned.
#ifndef MAXSIMD_SERVER_SERVER_H_
#define MAXSIMD_SERVER_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "index/corpus.h"
#include "server/admin_service.h"
#include "server/auth.h"
#include "server/reflection_v1.h"
#include "server/request_decoder.h"
#include "server/scheduler.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Collectable;
class Registry;
}  // namespace prometheus

namespace maxsimd {

class Backend;
class CorpusRegistry;
class HealthService;
class LoadingGate;
class Metrics;
class MetricsHttpServer;
class RerankerService;

enum class BackendChoice { kAuto, kCpu, kGpu };

// A synthetic corpus created at start-up (the demo, load tests).
struct DemoCorpus {
  std::string name = "demo";
  int64_t num_docs = 0;
  int32_t doc_tokens = 0;  // tokens per document; 0 = random in [32, 300]
  int32_t dim = 128;
};

// Parses "NAME:DOCS[:TOKENS[:DIM]]"; INVALID_ARGUMENT naming `flag`.
absl::StatusOr<DemoCorpus> ParseDemoCorpus(absl::string_view spec,
                                           absl::string_view flag);

struct ServerOptions {
  std::string listen = "0.0.0.0:50051";         // port 0 picks a free port
  std::string metrics_listen = "0.0.0.0:9464";  // empty: no /metrics
  // /metrics (metrics_http.h): bearer tokens (empty: open), connections open
  // at once, and the time from accept to a complete request head.
  std::string metrics_token_file;
  int metrics_max_connections = 256;
  absl::Duration metrics_request_timeout = absl::Seconds(5);
  BackendChoice backend = BackendChoice::kAuto;
  // CUDA ordinals to serve on; empty = every usable GPU.
  std::vector<int> devices;
  // Shards per device (GPU, or the host for the CPU backend): corpora are
  // split by document range over devices x shards_per_device backends.
  // More than 1 runs the sharded path on one device (tests, benchmarks).
  int shards_per_device = 1;
  int gpu_workers = 4;  // concurrent searches per GPU backend (streams)
  // Scans of concurrent batches run their kernels one batch after another
  // (GpuBackendOptions::serialize_scans).
  bool gpu_serialize_scans = true;
  // PLAID kernel choices (GpuBackendOptions::plaid_int8_mma,
  // plaid_warp_scan): on by default, off to fall back to the older kernel.
  bool gpu_plaid_int8_mma = true;
  bool gpu_plaid_warp_scan = true;
  int cpu_threads = 0;  // CPU backend threads; 0 = one per core
  // Most corpus bytes each backend shard keeps (0: as much as fits).
  int64_t corpus_budget_bytes = 0;
  // Most bytes of host-placed corpus data each shard page-locks (0: no
  // limit).
  int64_t pinned_budget_bytes = 0;
  // Per GPU worker: two device and two pinned buffers of this size that
  // host-placed corpora stream through (0: host placement refused).
  int64_t stream_buffer_bytes = int64_t{64} << 20;
  int64_t max_message_bytes = 64 << 20;
  // TLS of the gRPC port (empty: plaintext) and who may call what. Start()
  // reads every file before anything else and fails, naming the flag, when
  // one cannot be used.
  TlsOptions tls;
  AuthOptions auth;
  int grpc_max_threads = 0;  // gRPC resource quota; 0 = default
  // Completion queues serving Rerank, each drained by a thread of its own
  // (RerankerService); at least 1.
  int rerank_queues = 4;
  int64_t grpc_memory_quota_bytes = 0;  // 0 = gRPC's default
  // Connection limits of the gRPC port (see the top of this file);
  // InfiniteDuration: none.
  absl::Duration grpc_handshake_timeout = absl::Seconds(10);
  absl::Duration grpc_max_connection_idle = absl::Minutes(5);
  absl::Duration grpc_max_connection_age = absl::InfiniteDuration();
  absl::Duration grpc_max_connection_age_grace = absl::Minutes(1);
  absl::Duration grpc_keepalive_time = absl::Minutes(2);
  absl::Duration grpc_keepalive_timeout = absl::Seconds(20);
  // After health turns NOT_SERVING, how long new calls are still accepted
  // and answered before the drain begins: at least the time a load balancer
  // takes to see NOT_SERVING (its check interval times its fall count, plus
  // one check). 0 = the drain begins at once (Kubernetes takes a pod out of
  // its endpoints during the preStop hook, before the signal).
  absl::Duration drain_grace = absl::ZeroDuration();
  // How long calls in flight when the drain begins may take to finish.
  absl::Duration drain_timeout = absl::Seconds(30);
  // How often a sticky backend failure is looked for (health turns
  // NOT_SERVING).
  absl::Duration health_poll_interval = absl::Milliseconds(200);
  // How often every corpus is compacted (Corpus::Compact); 0: never.
  absl::Duration compaction_interval = absl::Seconds(10);
  CompactionOptions compaction;
  RequestLimits request_limits;
  CorpusLimits corpus_limits;
  AdminLimits admin_limits;
  SchedulerOptions scheduler;
  // Where corpora persist (index/FORMAT.md); empty: in memory only. Every
  // corpus found there is loaded before health is SERVING.
  std::string data_dir;
  // Created before health is SERVING; one already loaded from data_dir is
  // kept as it is.
  std::vector<DemoCorpus> demo_corpora;
  // Makes the backend; null = CreateBackend(). Lets tests wrap a backend.
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(const ServerOptions&)>
      backend_factory;
};

class MaxsimServer {
 public:
  static absl::StatusOr<std::unique_ptr<MaxsimServer>> Start(
      const ServerOptions& options);
  ~MaxsimServer();

  // Health NOT_SERVING, keep answering for options.drain_grace, drain for up
  // to options.drain_timeout, then stop. Blocks for up to the two together.
  // Idempotent.
  void Shutdown();

  int port() const { return port_; }
  // Whether health reports SERVING: corpora loaded, backend healthy, not
  // draining.
  bool serving() const { return serving_.load(); }
  int metrics_port() const { return metrics_port_; }
  CorpusRegistry* corpora() const { return corpora_.get(); }
  AdminService* admin() const { return admin_.get(); }
  Backend* backend() const { return backend_.get(); }

 private:
  MaxsimServer();
  // Sets the health of the whole server and of each service.
  void SetServing(bool serving);

  ServerOptions options_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<prometheus::Registry> prom_registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<CorpusRegistry> corpora_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<RerankerService> reranker_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<LoadingGate> loading_;
  std::unique_ptr<ReflectionV1Service> reflection_v1_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  // The endpoint holds collectables by weak_ptr; these keep them alive.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  int port_ = 0;
  int metrics_port_ = 0;
  bool shut_down_ = false;
  std::atomic<bool> serving_{false};
  // Watches backend health until Shutdown(); stops when `stop_` is notified.
  absl::Notification stop_;
  std::thread health_thread_;
  std::thread compaction_thread_;  // also stops on `stop_`
};

// Creates the backend the options ask for; kAuto takes the GPU when one is
// usable and falls back to the CPU.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const ServerOptions& options);

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_SERVER_H_
