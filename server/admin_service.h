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
// Thread-safety: shared by all gRPC threads; holds only pointers to
// thread-safe components.
#ifndef MAXSIMD_SERVER_ADMIN_SERVICE_H_
#define MAXSIMD_SERVER_ADMIN_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "index/registry.h"
#include "maxsimd/v1/admin.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"

namespace maxsimd {

struct AdminLimits {
  // Most bytes of converted token storage one AddDocuments stream may
  // accumulate before it commits.
  int64_t max_stream_bytes = int64_t{4} << 30;
  // Root of the server-side paths SnapshotCorpus, LoadCorpus and
  // ImportDocuments take; empty: those calls are refused.
  std::string files_dir;
};

class AdminService final : public v1::Admin::CallbackService {
 public:
  // `auth` must outlive the service; `metrics` may be null.
  AdminService(CorpusRegistry* corpora, const AdminLimits& limits,
               Metrics* metrics, const Authenticator* auth);

  grpc::ServerUnaryReactor* CreateCorpus(grpc::CallbackServerContext* ctx,
                                         const v1::CreateCorpusRequest* request,
                                         v1::CorpusInfo* response) override;
  grpc::ServerReadReactor<v1::AddDocumentsRequest>* AddDocuments(
      grpc::CallbackServerContext* ctx,
      v1::AddDocumentsResponse* response) override;
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

 private:
  // When the call of `ctx` may not call `method`, finishes it with the
  // refusal (recorded as a failed call) and returns true; else returns
  // false and does nothing.
  bool Refused(grpc::CallbackServerContext* ctx,
               grpc::ServerUnaryReactor* reactor, const char* method,
               absl::Time arrival) const;

  CorpusRegistry* const corpora_;
  const AdminLimits limits_;
  Metrics* const metrics_;
  const Authenticator* const auth_;
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
