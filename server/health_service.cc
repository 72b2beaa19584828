#include "server/health_service.h"

#include "absl/strings/str_cat.h"

namespace maxsimd {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch call: writes the status of its name whenever it differs from
// the last one written, one write at a time (a change during a write is
// written after it, and only the latest). Registered with the service from
// construction until OnDone, which unregisters it under the service's lock
// and deletes it.
class HealthService::Watcher final
    : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  // `known`: whether the name is served (else its status never changes
  // from SERVICE_UNKNOWN).
  Watcher(HealthService* service, bool known,
          HealthCheckResponse::ServingStatus status)
      : service_(service), known_(known) {
    absl::MutexLock lock(&mu_);
    WriteLocked(status);
  }

  // Writes `status` if it is news. REQUIRES: service_->mu_ held.
  void Update(HealthCheckResponse::ServingStatus status)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (!ending_ && known_) WriteLocked(status);
  }

  // A last NOT_SERVING, then UNAVAILABLE. REQUIRES: service_->mu_ held.
  void End() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (ending_) return;
    WriteLocked(HealthCheckResponse::NOT_SERVING);
    ending_ = true;
    MaybeFinishLocked();
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      ending_ = true;  // the call broke; OnCancel follows or has run
    } else if (next_ != sent_.status()) {
      WriteLocked(next_);
    }
    MaybeFinishLocked();
  }

  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ending_ = true;
    MaybeFinishLocked();
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&service_->mu_);
      service_->watchers_.erase(this);
    }
    delete this;
  }

 private:
  // REQUIRES: mu_ held.
  void WriteLocked(HealthCheckResponse::ServingStatus status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    next_ = status;
    if (writing_ || (written_ && status == sent_.status())) return;
    sent_.set_status(status);
    written_ = true;
    writing_ = true;
    StartWrite(&sent_);
  }

  // REQUIRES: mu_ held.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ending_ || writing_ || finished_) return;
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the server is shutting down"));
  }

  HealthService* const service_;
  const bool known_;
  absl::Mutex mu_;
  HealthCheckResponse sent_ ABSL_GUARDED_BY(mu_);  // the last write
  HealthCheckResponse::ServingStatus next_ ABSL_GUARDED_BY(mu_) =
      HealthCheckResponse::UNKNOWN;
  bool written_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

HealthService::HealthService(const std::vector<std::string>& services)
    : services_(services.begin(), services.end()) {}

HealthService::~HealthService() = default;

void HealthService::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  serving_ = serving;
  for (Watcher* w : watchers_) {
    w->Update(serving ? HealthCheckResponse::SERVING
                      : HealthCheckResponse::NOT_SERVING);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  serving_ = false;
  for (Watcher* w : watchers_) w->End();
}

grpc::ServerUnaryReactor* HealthService::Check(
    grpc::CallbackServerContext* ctx, const HealthCheckRequest* request,
    HealthCheckResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  if (!request->service().empty() && services_.count(request->service()) == 0) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("service: \"", request->service().substr(0, 160),
                     "\" is not served here")));
    return reactor;
  }
  bool serving;
  {
    absl::MutexLock lock(&mu_);
    serving = serving_;
  }
  response->set_status(serving ? HealthCheckResponse::SERVING
                               : HealthCheckResponse::NOT_SERVING);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext*, const HealthCheckRequest* request) {
  absl::MutexLock lock(&mu_);
  const bool known =
      request->service().empty() || services_.count(request->service()) > 0;
  auto* watcher = new Watcher(this, known,
                              !known     ? HealthCheckResponse::SERVICE_UNKNOWN
                              : serving_ ? HealthCheckResponse::SERVING
                                         : HealthCheckResponse::NOT_SERVING);
  watchers_.insert(watcher);
  if (shut_down_) watcher->End();
  return watcher;
}

absl::Status LoadingGate::Check(absl::string_view method) const {
  if (open()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      method,
      ": the server is still loading its corpora (health is NOT_SERVING); "
      "retry later or on another replica"));
}

}  // namespace maxsimd
