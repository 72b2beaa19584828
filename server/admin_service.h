// The maxsimd.v1.Admin gRPC service (callback API): corpus creation,
// streaming appends, deletes, drops and inspection, and the server's log
// level (spdlog's process-wide level, logging.h). A call's x-request-id
// metadata is echoed in its trailing metadata and tags its log lines.
//
// Every method, the read-only ones included, first asks the Authenticator
// (auth.h, Scope::kAdmin); a refused call is finished with its
// UNAUTHENTICATED or PERMISSION_DENIED status before anything is read or
// changed.
//
// Writes are applied through Corpus, which publishes a new snapshot
// atomically, so a failed call leaves the corpus unchanged and queries in
// flight are never affected. AddDocuments converts each message as it
// arrives and commits the whole stream when the client half-closes.
//
// Open AddDocuments streams are bounded (AdminLimits): how many may be open
// at once, how many converted bytes they may hold together, and how long
// one may wait for its next message; past any of them the stream ends with
// nothing added. AddDocuments takes its messages raw (raw_message.h), so
// that a message that does not parse ends the stream with INVALID_ARGUMENT
// naming it instead of passing for the client's half-close.
//
// Until the server has loaded its corpora (LoadingGate) every call but
// GetLogLevel and SetLogLevel is UNAVAILABLE.
//
// Thread-safety: shared by all gRPC threads; holds only pointers to
// thread-safe components, and a thread that ends idle streams.
#ifndef MAXSIMD_SERVER_ADMIN_SERVICE_H_
#define MAXSIMD_SERVER_ADMIN_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "index/registry.h"
#include "kernels/base/thread_pool.h"
#include "maxsimd/v1/admin.grpc.pb.h"
#include "server/auth.h"
#include "server/health_service.h"
#include "server/metrics.h"

namespace maxsimd {

struct AdminLimits {
  // Most bytes of converted token storage one AddDocuments stream may
  // accumulate before it commits.
  int64_t max_stream_bytes = int64_t{4} << 30;
  // Most AddDocuments streams open at once (--max_write_streams).
  int max_write_streams = 16;
  // Most bytes all open AddDocuments streams hold together, converted
  // tokens and ids (--max_write_bytes).
  int64_t max_write_bytes = int64_t{4} << 30;
  // How long an open AddDocuments stream may go without a message that adds
  // documents (--write_idle_timeout).
  absl::Duration write_idle_timeout = absl::Seconds(30);
  // Root of the server-side paths SnapshotCorpus, LoadCorpus and
  // ImportDocuments take; empty: those calls are refused.
  std::string files_dir;
};

class AddReactor;

class AdminService final : public v1::Admin::WithRawCallbackMethod_AddDocuments<
                               v1::Admin::CallbackService> {
 public:
  // `auth` and `loading` must outlive the service; `metrics` may be null.
  AdminService(CorpusRegistry* corpora, const AdminLimits& limits,
               Metrics* metrics, const Authenticator* auth,
               const LoadingGate* loading);
  // Stops the thread that ends idle streams. Destroy after the gRPC server.
  ~AdminService() override;

  grpc::ServerUnaryReactor* CreateCorpus(grpc::CallbackServerContext* ctx,
                                         const v1::CreateCorpusRequest* request,
                                         v1::CorpusInfo* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* AddDocuments(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteDocuments(
      grpc::CallbackServerContext* ctx,
      const v1::DeleteDocumentsRequest* request,
      v1::DeleteDocumentsResponse* response) override;
  grpc::ServerUnaryReactor* DropCorpus(
      grpc::CallbackServerContext* ctx, const v1::DropCorpusRequest* request,
      v1::DropCorpusResponse* response) override;
  grpc::ServerUnaryReactor* ListCorpora(
      grpc::CallbackServerContext* ctx, const v1::ListCorporaRequest* request,
      v1::ListCorporaResponse* response) override;
  grpc::ServerUnaryReactor* GetCorpus(grpc::CallbackServerContext* ctx,
                                      const v1::GetCorpusRequest* request,
                                      v1::CorpusInfo* response) override;
  grpc::ServerUnaryReactor* SetAlias(grpc::CallbackServerContext* ctx,
                                     const v1::SetAliasRequest* request,
                                     v1::SetAliasResponse* response) override;
  grpc::ServerUnaryReactor* DeleteAlias(
      grpc::CallbackServerContext* ctx, const v1::DeleteAliasRequest* request,
      v1::DeleteAliasResponse* response) override;
  grpc::ServerUnaryReactor* ListAliases(
      grpc::CallbackServerContext* ctx, const v1::ListAliasesRequest* request,
      v1::ListAliasesResponse* response) override;
  grpc::ServerUnaryReactor* SnapshotCorpus(
      grpc::CallbackServerContext* ctx,
      const v1::SnapshotCorpusRequest* request,
      v1::SnapshotCorpusResponse* response) override;
  grpc::ServerUnaryReactor* LoadCorpus(grpc::CallbackServerContext* ctx,
                                       const v1::LoadCorpusRequest* request,
                                       v1::CorpusInfo* response) override;
  grpc::ServerUnaryReactor* ImportDocuments(
      grpc::CallbackServerContext* ctx,
      const v1::ImportDocumentsRequest* request,
      v1::AddDocumentsResponse* response) override;
  grpc::ServerUnaryReactor* GetLogLevel(
      grpc::CallbackServerContext* ctx, const v1::GetLogLevelRequest* request,
      v1::GetLogLevelResponse* response) override;
  grpc::ServerUnaryReactor* SetLogLevel(
      grpc::CallbackServerContext* ctx, const v1::SetLogLevelRequest* request,
      v1::SetLogLevelResponse* response) override;

  CorpusRegistry* corpora() const { return corpora_; }
  const AdminLimits& limits() const { return limits_; }
  Metrics* metrics() const { return metrics_; }
  // Bytes the open AddDocuments streams hold, and how many are open.
  int64_t write_bytes() const { return write_bytes_.load(); }
  int write_streams() const { return write_streams_.load(); }

 private:
  friend class AddReactor;

  // When the call of `ctx` may not call `method`, finishes it with the
  // refusal (recorded as a failed call) and returns true; else returns
  // false and does nothing. `needs_corpora`: refused while loading.
  bool Refused(grpc::CallbackServerContext* ctx,
               grpc::ServerUnaryReactor* reactor, const char* method,
               absl::Time arrival, bool needs_corpora = true) const;
  // Takes `bytes` of --max_write_bytes for a stream; RESOURCE_EXHAUSTED
  // naming `where` and the flag when they do not fit.
  absl::Status ReserveWriteBytes(int64_t bytes, absl::string_view where);
  void ReleaseWriteBytes(int64_t bytes) { write_bytes_.fetch_sub(bytes); }
  // Ends the streams idle past limits_.write_idle_timeout; runs on
  // idle_thread_ until stop_.
  void EndIdleStreams();
  // The threads that pool a corpus's documents at ingest (started by the
  // first corpus with pool_factor > 1); null for a corpus without pooling.
  ThreadPool* IngestPool(const CorpusConfig& config) {
    return config.pool_factor > 1 ? ingest_pool_.Get() : nullptr;
  }

  CorpusRegistry* const corpora_;
  const AdminLimits limits_;
  Metrics* const metrics_;
  const Authenticator* const auth_;
  const LoadingGate* const loading_;
  std::atomic<int64_t> write_bytes_{0};
  std::atomic<int> write_streams_{0};
  // The open AddDocuments streams; an AddReactor leaves it in OnDone, under
  // streams_mu_, before it deletes itself.
  absl::Mutex streams_mu_;
  std::set<AddReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  absl::Notification stop_;
  std::thread idle_thread_;
  // One loop at a time: concurrent streams' pooling takes turns.
  LazyThreadPool ingest_pool_;
};

// The absolute path of a request's `path` under `root`: INVALID_ARGUMENT
// naming `field` for an empty, absolute or escaping path or a character
// outside [A-Za-z0-9_.-/]; FAILED_PRECONDITION when `root` is empty.
absl::StatusOr<std::string> ResolveFilesPath(const std::string& root,
                                             const std::string& path,
                                             absl::string_view field);

// Describes a corpus as the API reports it.
void DescribeCorpus(const Corpus& corpus, const std::string& resident_on,
                    v1::CorpusInfo* info);

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_ADMIN_SERVICE_H_
