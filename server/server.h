// The maxsimd server: picks a compute backend, builds the corpus registry,
// scheduler, gRPC services (Reranker, Admin, grpc.health.v1, reflection) and
// the Prometheus endpoint, and shuts them down in order.
//
// Shutdown order: health turns NOT_SERVING, gRPC stops accepting calls and
// waits up to the drain deadline for calls in flight (the scheduler keeps
// executing meanwhile, so queued queries finish), then the scheduler stops
// and the backend is released.
//
// Thread-safety: Start() and Shutdown() are called from one thread (main or
// a test); accessors are safe from any thread once Start() returned.
#ifndef MAXSIMD_SERVER_SERVER_H_
#define MAXSIMD_SERVER_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "index/corpus.h"
#include "server/admin_service.h"
#include "server/request_decoder.h"
#include "server/scheduler.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Collectable;
class Exposer;
class Registry;
}  // namespace prometheus

namespace maxsimd {

class Backend;
class CorpusRegistry;
class Metrics;
class RerankerService;

enum class BackendChoice { kAuto, kCpu, kGpu };

struct ServerOptions {
  std::string listen = "0.0.0.0:50051";         // port 0 picks a free port
  std::string metrics_listen = "0.0.0.0:9464";  // empty: no /metrics
  BackendChoice backend = BackendChoice::kAuto;
  int device = 0;       // CUDA ordinal for the GPU backend
  int cpu_threads = 0;  // CPU backend threads; 0 = one per core
  int64_t max_message_bytes = 64 << 20;
  absl::Duration drain_timeout = absl::Seconds(30);
  RequestLimits request_limits;
  CorpusLimits corpus_limits;
  AdminLimits admin_limits;
  SchedulerOptions scheduler;
  int64_t demo_docs = 0;  // > 0: create corpus "demo" with synthetic docs
};

class MaxsimServer {
 public:
  static absl::StatusOr<std::unique_ptr<MaxsimServer>> Start(
      const ServerOptions& options);
  ~MaxsimServer();

  // Health NOT_SERVING, drain for up to options.drain_timeout, then stop.
  // Idempotent.
  void Shutdown();

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  CorpusRegistry* corpora() const { return corpora_.get(); }
  Backend* backend() const { return backend_.get(); }

 private:
  MaxsimServer();

  ServerOptions options_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<prometheus::Registry> prom_registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<CorpusRegistry> corpora_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<RerankerService> reranker_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  // The exposer holds collectables by weak_ptr; these keep them alive.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  int port_ = 0;
  int metrics_port_ = 0;
  bool shut_down_ = false;
};

// Creates the backend the options ask for; kAuto takes the GPU when one is
// usable and falls back to the CPU.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const ServerOptions& options);

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_SERVER_H_
