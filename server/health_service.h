// grpc.health.v1.Health, the server's own (callback API), and the loading
// gate of the data calls.
//
// gRPC's default health service reports the whole server ("") SERVING from
// the moment the port opens, before the server can say otherwise, so a
// client polling health at start-up could see SERVING while the corpora were
// still loading. This one starts with every name NOT_SERVING; the server
// turns them SERVING once loading is over.
//
// Check answers the status of a known name (NOT_FOUND for another); Watch
// sends the current status at once and then each change, and ends with
// UNAVAILABLE when the server shuts down (Shutdown()), after a last
// NOT_SERVING.
//
// Thread-safety: thread-safe.
#ifndef MAXSIMD_SERVER_HEALTH_SERVICE_H_
#define MAXSIMD_SERVER_HEALTH_SERVICE_H_

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace maxsimd {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  // `services`: the names answered besides "" (the whole server); each
  // starts NOT_SERVING.
  explicit HealthService(const std::vector<std::string>& services);
  ~HealthService() override;

  // Sets the status of every name at once.
  void SetServing(bool serving) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every Watch (a last NOT_SERVING, then UNAVAILABLE) and makes later
  // ones end at once; every name stays NOT_SERVING. Call before the gRPC
  // server's Shutdown, so that watches do not hold the drain up.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* ctx,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* ctx,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class Watcher;
  friend class Watcher;

  const std::set<std::string> services_;
  absl::Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

// Whether the server has finished loading its corpora (the data directory,
// then the demo corpora). Until then the data calls answer UNAVAILABLE, safe
// to retry on another replica, rather than NOT_FOUND or an empty list that
// would be read as the truth.
//
// Thread-safety: thread-safe.
class LoadingGate {
 public:
  // `open`: whether there is nothing to load.
  explicit LoadingGate(bool open = false) : open_(open) {}

  void Open() { open_.store(true, std::memory_order_release); }
  bool open() const { return open_.load(std::memory_order_acquire); }
  // OK once open; else UNAVAILABLE naming `method` ("Admin.ListCorpora").
  absl::Status Check(absl::string_view method) const;

 private:
  std::atomic<bool> open_;
};

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_HEALTH_SERVICE_H_
