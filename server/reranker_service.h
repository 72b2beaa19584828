// The maxsimd.v1.Reranker gRPC service. Rerank, the hot unary method, runs
// on gRPC's completion-queue API over several completion queues, each
// drained by a thread of its own; RerankBatch and RerankStream run on the
// callback API. (In the gRPC this builds against, the callback API's events
// all pass through one queue that its threads drain together, which capped
// a 16-core host at 15-18k reranks/s with cores idle: bench/NOTES.md s5.)
//
// A handler never blocks: it validates and decodes the request against the
// corpus snapshot current at arrival, submits QueryTasks to the scheduler
// and returns. It searches nothing: a PLAID query without candidates is
// submitted with its search parameters only (DecodedQuery::plaid_search),
// and the executor that takes it generates the candidates of its whole
// batch at once. The scheduler's executor calls each task's `done`, which
// fills the response and Finish()es the RPC (see scheduler.h for who owns a
// request at each step). A request that fails validation or is refused by
// the scheduler is finished at once and nothing is queued. When the client
// cancels a call (or its deadline passes), the reactor's OnCancel (for
// Rerank, the call's done notification) withdraws the call's still-queued
// queries from the scheduler (Scheduler::Cancel).
// A call's x-request-id metadata is echoed in its trailing metadata and
// tags the log lines written for it (logging.h); in RerankStream the
// failure of one message is logged with the stream's id and the message's
// own request_id.
//
// Each method first asks the Authenticator (auth.h, Scope::kQuery); a
// refused call is finished with its status before anything is decoded or
// queued. Until the server has loaded its corpora (LoadingGate), every call
// is UNAVAILABLE.
//
// Rerank and RerankStream take their messages raw and parse them here
// (raw_message.h): a request that is not a valid RerankRequest is
// INVALID_ARGUMENT naming the method, and in a stream it gets its own error
// response (status_code 3, "RerankStream message N: ...") while the
// stream's other requests are answered as usual.
//
// Thread-safety: the service object is shared by all gRPC threads; it holds
// only pointers to thread-safe components.
#ifndef MAXSIMD_SERVER_RERANKER_SERVICE_H_
#define MAXSIMD_SERVER_RERANKER_SERVICE_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "index/registry.h"
#include "maxsimd/v1/reranker.grpc.pb.h"
#include "server/auth.h"
#include "server/health_service.h"
#include "server/metrics.h"
#include "server/request_decoder.h"
#include "server/scheduler.h"

namespace maxsimd {

class AsyncRerankCall;

class RerankerService final
    : public v1::Reranker::WithRawMethod_Rerank<
          v1::Reranker::WithCallbackMethod_RerankBatch<
              v1::Reranker::WithRawCallbackMethod_RerankStream<
                  v1::Reranker::Service>>> {
 public:
  // All pointers must outlive the service; `metrics` may be null.
  RerankerService(CorpusRegistry* corpora, Scheduler* scheduler,
                  const RequestLimits& limits, Metrics* metrics,
                  const Authenticator* auth, const LoadingGate* loading);
  ~RerankerService() override;

  // Serves Rerank on `queues` (made by ServerBuilder::AddCompletionQueue
  // before BuildAndStart), one thread each, with `calls_per_queue` calls
  // waiting for a request on each. Call once, right after BuildAndStart.
  void StartRerankQueues(
      std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues,
      int calls_per_queue);
  // Shuts the queues down and joins their threads; the queues themselves
  // live until the service is destroyed (after the grpc::Server). Call
  // after grpc::Server::Shutdown has returned (every call is over then);
  // later calls, and the destructor's, do nothing.
  void StopRerankQueues();

  grpc::ServerUnaryReactor* RerankBatch(
      grpc::CallbackServerContext* ctx, const v1::RerankBatchRequest* request,
      v1::RerankBatchResponse* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* RerankStream(
      grpc::CallbackServerContext* ctx) override;

  // Decodes one request into a task (without `done`); cheap enough for a
  // handler thread (DecodeQuery generates no PLAID candidates). `field`
  // prefixes error messages; `ctx` gives the deadline; `cancel_key` is the
  // call's Scheduler cancel key and `is_cancelled` tells whether the call is
  // cancelled.
  absl::StatusOr<QueryTask> Prepare(const v1::RerankRequest& request,
                                    absl::string_view field,
                                    const grpc::ServerContextBase& ctx,
                                    std::function<bool()> is_cancelled,
                                    uint64_t cancel_key) const;
  const Authenticator& auth() const { return *auth_; }
  const LoadingGate& loading() const { return *loading_; }

  Scheduler* scheduler() const { return scheduler_; }
  Metrics* metrics() const { return metrics_; }
  const RequestLimits& limits() const { return limits_; }

 private:
  CorpusRegistry* const corpora_;
  Scheduler* const scheduler_;
  const RequestLimits limits_;
  Metrics* const metrics_;
  const Authenticator* const auth_;
  const LoadingGate* const loading_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> queue_threads_;
  // A Rerank call holds queue_mu_ shared while it starts operations on its
  // queue; StopRerankQueues sets queues_stopping_ under it before it shuts
  // the queues down, so nothing starts on a queue after its shutdown.
  absl::Mutex queue_mu_;
  bool queues_stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  friend class AsyncRerankCall;
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
