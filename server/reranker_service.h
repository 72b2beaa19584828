// The maxsimd.v1.Reranker gRPC service (callback API).
//
// A reaction never blocks: it validates and decodes the request against the
// corpus snapshot current at arrival, submits QueryTasks to the scheduler
// and returns. The scheduler's executor calls each task's `done`, which fills
// the response and Finish()es the RPC (see scheduler.h for who owns a
// request at each step). A request that fails validation or is refused by
// the scheduler is finished at once and nothing is queued. When the client
// cancels a call (or its deadline passes), the reactor's OnCancel withdraws
// the call's still-queued queries from the scheduler (Scheduler::Cancel).
// A call's x-request-id metadata is echoed in its trailing metadata and
// tags the log lines written for it (logging.h); in RerankStream the
// failure of one message is logged with the stream's id and the message's
// own request_id.
//
// Each method first asks the Authenticator (auth.h, Scope::kQuery); a
// refused call is finished with its status before anything is decoded or
// queued.
//
// Thread-safety: the service object is shared by all gRPC threads; it holds
// only pointers to thread-safe components.
#ifndef MAXSIMD_SERVER_RERANKER_SERVICE_H_
#define MAXSIMD_SERVER_RERANKER_SERVICE_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "index/registry.h"
#include "maxsimd/v1/reranker.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/request_decoder.h"
#include "server/scheduler.h"

namespace maxsimd {

class RerankerService final : public v1::Reranker::CallbackService {
 public:
  // All pointers must outlive the service; `metrics` may be null.
  RerankerService(CorpusRegistry* corpora, Scheduler* scheduler,
                  const RequestLimits& limits, Metrics* metrics,
                  const Authenticator* auth);

  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* ctx,
                                   const v1::RerankRequest* request,
                                   v1::RerankResponse* response) override;
  grpc::ServerUnaryReactor* RerankBatch(
      grpc::CallbackServerContext* ctx, const v1::RerankBatchRequest* request,
      v1::RerankBatchResponse* response) override;
  grpc::ServerBidiReactor<v1::RerankRequest, v1::RerankResponse>* RerankStream(
      grpc::CallbackServerContext* ctx) override;

  // Decodes one request into a task (without `done`). `field` prefixes
  // error messages; `cancel_key` is the call's Scheduler cancel key.
  absl::StatusOr<QueryTask> Prepare(const v1::RerankRequest& request,
                                    absl::string_view field,
                                    grpc::CallbackServerContext* ctx,
                                    uint64_t cancel_key) const;

  Scheduler* scheduler() const { return scheduler_; }
  Metrics* metrics() const { return metrics_; }
  const RequestLimits& limits() const { return limits_; }

 private:
  CorpusRegistry* const corpora_;
  Scheduler* const scheduler_;
  const RequestLimits limits_;
  Metrics* const metrics_;
  const Authenticator* const auth_;
};

// Copies a finished query into its response message.
void FillResponse(const QueryOutcome& outcome, absl::Time arrival,
                  v1::RerankResponse* response);

// Records the metrics and the log line (LogCall) of one finished RPC;
// `request_id` is the call's (TakeRequestId), "" when it has none.
void ObserveCall(Metrics* metrics, const char* method, absl::Time arrival,
                 const absl::Status& status, absl::string_view request_id);

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_RERANKER_SERVICE_H_
