#include "server/reranker_service.h"

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "kernels/base/status_macros.h"
#include "proto/call_arena.h"
#include "server/grpc_status.h"
#include "server/logging.h"
#include "server/raw_message.h"

namespace maxsimd {

void FillResponse(const QueryOutcome& outcome, absl::Time arrival,
                  v1::RerankResponse* response) {
  response->mutable_results()->Reserve(
      static_cast<int>(outcome.results.size()));
  for (const RankedDocument& d : outcome.results) {
    v1::ScoredDocument* out = response->add_results();
    out->set_id(d.id);
    out->set_score(d.score);
  }
  v1::Timing* t = response->mutable_timing();
  t->set_queue_ns(outcome.queue_ns);
  t->set_compute_ns(outcome.compute_ns);
  t->set_h2d_ns(outcome.h2d_ns);
  t->set_kernel_ns(outcome.kernel_ns);
  t->set_topk_ns(outcome.topk_ns);
  t->set_batch_queries(outcome.batch_queries);
  t->set_total_ns(absl::ToInt64Nanoseconds(absl::Now() - arrival));
}

void ObserveCall(Metrics* metrics, const char* method, absl::Time arrival,
                 const absl::Status& status, absl::string_view request_id) {
  const double seconds = absl::ToDoubleSeconds(absl::Now() - arrival);
  if (metrics != nullptr) {
    metrics->ObserveRequest(method, absl::StatusCodeToString(status.code()),
                            seconds);
  }
  LogCall(method, request_id, seconds, status);
}

RerankerService::RerankerService(CorpusRegistry* corpora, Scheduler* scheduler,
                                 const RequestLimits& limits, Metrics* metrics,
                                 const Authenticator* auth,
                                 const LoadingGate* loading)
    : corpora_(corpora),
      scheduler_(scheduler),
      limits_(limits),
      metrics_(metrics),
      auth_(auth),
      loading_(loading) {}

RerankerService::~RerankerService() { StopRerankQueues(); }

absl::StatusOr<QueryTask> RerankerService::Prepare(
    const v1::RerankRequest& request, absl::string_view field,
    const grpc::ServerContextBase& ctx, std::function<bool()> is_cancelled,
    uint64_t cancel_key) const {
  auto corpus = corpora_->Get(request.corpus());
  if (!corpus.ok()) {
    return absl::Status(
        corpus.status().code(),
        absl::StrCat(field.empty() ? "" : absl::StrCat(field, "."),
                     corpus.status().message()));
  }
  QueryTask task;
  task.snapshot = (*corpus)->Snapshot();
  MAXSIMD_ASSIGN_OR_RETURN(
      task.query, DecodeQuery(request, *task.snapshot, limits_, field));
  task.priority = task.query.priority;
  task.deadline = DeadlineOf(ctx);
  task.cancel_key = cancel_key;
  task.is_cancelled = std::move(is_cancelled);
  return task;
}

namespace {

// The reactor of one unary call. When the client cancels the call or its
// deadline passes, gRPC calls OnCancel, which withdraws the call's queries
// that are still queued; their `done` then answers the call at once. Deletes
// itself in OnDone, which gRPC calls after Finish and after any OnCancel.
class UnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  UnaryReactor(Scheduler* scheduler, grpc::CallbackServerContext* ctx)
      : scheduler_(scheduler),
        cancel_key_(scheduler->NewCancelKey()),
        request_id_(TakeRequestId(ctx)) {}

  uint64_t cancel_key() const { return cancel_key_; }
  const std::string& request_id() const { return request_id_; }

  void OnCancel() override { scheduler_->Cancel(cancel_key_); }
  void OnDone() override { delete this; }

 private:
  Scheduler* const scheduler_;
  const uint64_t cancel_key_;
  const std::string request_id_;  // x-request-id metadata; "" when absent
};

}  // namespace

// One Rerank call on the completion-queue API. Three events of the call
// arrive on its queue, each with its own tag: the request (the call has
// started, or with ok == false the queue is shutting down and it never
// will), the finish (the response or status went out, or could not), and
// done (AsyncNotifyWhenDone: the call is over, finished or cancelled;
// delivered only for a call that started). A started call deletes itself
// after both finish and done, so the `done` of its task, which calls
// Finish(), never outlives it. Each queue has one thread, so the events of
// one call never run at once; `done` runs on an executor thread and touches
// the call only up to its Finish(). (Outside the anonymous namespace: the
// service befriends it for queue_mu_.)
class AsyncRerankCall {
 public:
  enum class Event { kRequest, kFinish, kDone };
  struct Tag {
    AsyncRerankCall* call;
    Event event;
  };

  // Asks for the next Rerank call on `queue`.
  AsyncRerankCall(RerankerService* service, grpc::ServerCompletionQueue* queue)
      : service_(service), queue_(queue), responder_(&ctx_) {
    ctx_.AsyncNotifyWhenDone(&done_tag_);
    service_->RequestRerank(&ctx_, &request_buffer_, &responder_, queue_,
                            queue_, &request_tag_);
  }

  void OnEvent(Event event, bool ok) {
    switch (event) {
      case Event::kRequest: {
        if (!ok) {  // shutting down: no call, and no done event to come
          delete this;
          return;
        }
        // No new work on a queue that StopRerankQueues is shutting down.
        absl::ReaderMutexLock lock(&service_->queue_mu_);
        if (service_->queues_stopping_) {
          // A call that started as the server's drain ran out: the server
          // has cancelled it, and its done event is all that is left.
          events_left_ = 1;
          return;
        }
        new AsyncRerankCall(service_, queue_);  // the next call's slot
        Start();
        return;
      }
      case Event::kDone:
        if (ctx_.IsCancelled()) {
          cancelled_.store(true);
          service_->scheduler()->Cancel(cancel_key_);
        }
        break;
      case Event::kFinish:
        break;
    }
    if (--events_left_ == 0) delete this;
  }

 private:
  void Start() {
    arrival_ = absl::Now();
    cancel_key_ = service_->scheduler()->NewCancelKey();
    request_id_ = TakeRequestId(&ctx_);
    if (absl::Status refused =
            service_->auth().Check(ctx_, Scope::kQuery, "Reranker.Rerank");
        !refused.ok()) {
      Finish(refused);
      return;
    }
    if (absl::Status s = service_->loading().Check("Reranker.Rerank");
        !s.ok()) {
      Finish(s);
      return;
    }
    if (absl::Status s =
            ParseRawMessage(&request_buffer_, request_, "Reranker.Rerank");
        !s.ok()) {
      Finish(s);
      return;
    }
    absl::StatusOr<QueryTask> task = service_->Prepare(
        *request_, "", ctx_, [this] { return cancelled_.load(); }, cancel_key_);
    if (!task.ok()) {
      Finish(task.status());
      return;
    }
    response_->set_request_id(request_->request_id());
    task->done = [this](absl::StatusOr<QueryOutcome> out) {
      if (out.ok()) FillResponse(*out, arrival_, response_);
      Finish(out.status());
    };
    std::vector<QueryTask> tasks;
    tasks.push_back(*std::move(task));
    const absl::Status submitted =
        service_->scheduler()->Submit(std::move(tasks));
    if (!submitted.ok()) Finish(submitted);
  }

  // Answers the call; the last use of `this` outside the queue's thread.
  void Finish(const absl::Status& s) {
    ObserveCall(service_->metrics(), "Rerank", arrival_, s, request_id_);
    if (s.ok()) {
      response_buffer_ = SerializeRawMessage(*response_);
      responder_.Finish(response_buffer_, grpc::Status::OK, &finish_tag_);
    } else {
      responder_.FinishWithError(ToGrpcStatus(s), &finish_tag_);
    }
  }

  RerankerService* const service_;
  grpc::ServerCompletionQueue* const queue_;
  grpc::ServerContext ctx_;
  // The request and response live on an arena of the call, so that parsing
  // a request of a thousand candidate ids takes its strings from a block or
  // two instead of one heap allocation (and one free) per id.
  google::protobuf::Arena arena_{CallArenaOptions()};
  v1::RerankRequest* const request_ =
      google::protobuf::Arena::CreateMessage<v1::RerankRequest>(&arena_);
  v1::RerankResponse* const response_ =
      google::protobuf::Arena::CreateMessage<v1::RerankResponse>(&arena_);
  // Rerank is served raw: the request as received, parsed into request_ by
  // Start(), and the response as sent.
  grpc::ByteBuffer request_buffer_;
  grpc::ByteBuffer response_buffer_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  Tag request_tag_{this, Event::kRequest};
  Tag finish_tag_{this, Event::kFinish};
  Tag done_tag_{this, Event::kDone};
  std::atomic<int> events_left_{2};  // finish and done
  std::atomic<bool> cancelled_{false};
  absl::Time arrival_;
  uint64_t cancel_key_ = 0;
  std::string request_id_;  // x-request-id metadata; "" when absent
};

void RerankerService::StartRerankQueues(
    std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues,
    int calls_per_queue) {
  queues_ = std::move(queues);
  for (const auto& queue : queues_) {
    for (int i = 0; i < calls_per_queue; ++i) {
      new AsyncRerankCall(this, queue.get());
    }
    queue_threads_.emplace_back([q = queue.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (q->Next(&tag, &ok)) {
        auto* t = static_cast<AsyncRerankCall::Tag*>(tag);
        t->call->OnEvent(t->event, ok);
      }
    });
  }
}

void RerankerService::StopRerankQueues() {
  {
    absl::MutexLock lock(&queue_mu_);
    if (queues_stopping_) return;
    queues_stopping_ = true;
  }
  for (const auto& queue : queues_) queue->Shutdown();
  for (std::thread& t : queue_threads_) t.join();
  queue_threads_.clear();
}

grpc::ServerUnaryReactor* RerankerService::RerankBatch(
    grpc::CallbackServerContext* ctx, const v1::RerankBatchRequest* request,
    v1::RerankBatchResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = new UnaryReactor(scheduler_, ctx);
  auto finish = [reactor, arrival, metrics = metrics_](const absl::Status& s) {
    ObserveCall(metrics, "RerankBatch", arrival, s, reactor->request_id());
    reactor->Finish(ToGrpcStatus(s));
  };
  if (absl::Status refused =
          auth_->Check(*ctx, Scope::kQuery, "Reranker.RerankBatch");
      !refused.ok()) {
    finish(refused);
    return reactor;
  }
  if (absl::Status s = loading_->Check("Reranker.RerankBatch"); !s.ok()) {
    finish(s);
    return reactor;
  }
  const int n = request->queries_size();
  if (n < 1 || n > limits_.max_batch_queries) {
    finish(absl::InvalidArgumentError(
        absl::StrCat("queries has ", n, " entries; must be in [1, ",
                     limits_.max_batch_queries, "]")));
    return reactor;
  }
  // Shared by the n task callbacks; the last one to finish answers the RPC.
  struct State {
    std::atomic<int> remaining;
    absl::Mutex mu;
    absl::Status first_error ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  state->remaining = n;
  std::vector<QueryTask> tasks;
  tasks.reserve(n);
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<QueryTask> task = Prepare(
        request->queries(i), absl::StrCat("queries[", i, "]"), *ctx,
        [ctx] { return ctx->IsCancelled(); }, reactor->cancel_key());
    if (!task.ok()) {
      finish(task.status());
      return reactor;
    }
    v1::RerankResponse* slot = response->add_results();
    slot->set_request_id(request->queries(i).request_id());
    task->done = [state, slot, arrival,
                  finish](absl::StatusOr<QueryOutcome> out) {
      if (out.ok()) {
        FillResponse(*out, arrival, slot);
      } else {
        absl::MutexLock lock(&state->mu);
        if (state->first_error.ok()) state->first_error = out.status();
      }
      if (state->remaining.fetch_sub(1) == 1) {
        absl::Status s;
        {
          absl::MutexLock lock(&state->mu);
          s = state->first_error;
        }
        finish(s);
      }
    };
    tasks.push_back(*std::move(task));
  }
  const absl::Status submitted = scheduler_->Submit(std::move(tasks));
  if (!submitted.ok()) finish(submitted);
  return reactor;
}

namespace {

// One RerankStream call. Reads requests one after another, submits each to
// the scheduler, and writes each response when its query finishes (one
// write in flight at a time, others queued). With limits.max_stream_in_flight
// requests read and not yet written, it stops reading until a write
// completes. Finishes once the client has half-closed (or the call broke),
// every submitted query has answered and every response is written. Deletes
// itself in OnDone. Messages travel raw: a request that does not parse is
// answered with its own INVALID_ARGUMENT response naming its index in the
// stream, and reading goes on.
class StreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(RerankerService* service, grpc::CallbackServerContext* ctx)
      : service_(service),
        ctx_(ctx),
        start_(absl::Now()),
        cancel_key_(service->scheduler()->NewCancelKey()),
        request_id_(TakeRequestId(ctx)) {
    StartRead(&read_buffer_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    const absl::Time arrival = absl::Now();
    request_.Clear();
    const absl::Status parsed =
        ParseRawMessage(&read_buffer_, &request_,
                        absl::StrCat("RerankStream message ", messages_++));
    const std::string request_id = request_.request_id();
    absl::StatusOr<QueryTask> task =
        parsed.ok()
            ? service_->Prepare(
                  request_, "", *ctx_,
                  [ctx = ctx_] { return ctx->IsCancelled(); }, cancel_key_)
            : absl::StatusOr<QueryTask>(parsed);
    if (task.ok()) {
      {
        absl::MutexLock lock(&mu_);
        ++pending_;
      }
      task->done = [this, request_id,
                    arrival](absl::StatusOr<QueryOutcome> out) {
        auto response = std::make_unique<v1::RerankResponse>();
        response->set_request_id(request_id);
        if (out.ok()) FillResponse(*out, arrival, response.get());
        Answer(std::move(response), out.status(), arrival,
               /*was_pending=*/true);
      };
      std::vector<QueryTask> tasks;
      tasks.push_back(*std::move(task));
      absl::Status submitted = service_->scheduler()->Submit(std::move(tasks));
      if (!submitted.ok()) {
        auto response = std::make_unique<v1::RerankResponse>();
        response->set_request_id(request_id);
        Answer(std::move(response), submitted, arrival,
               /*was_pending=*/true);
      }
    } else {
      auto response = std::make_unique<v1::RerankResponse>();
      response->set_request_id(request_id);
      Answer(std::move(response), task.status(), arrival,
             /*was_pending=*/false);
    }
    absl::MutexLock lock(&mu_);
    if (InFlightLocked() >= service_->limits().max_stream_in_flight) {
      read_paused_ = true;  // OnWriteDone resumes
      MaybeFinishLocked();
      return;
    }
    StartRead(&read_buffer_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    outbox_.pop_front();
    if (!ok) broken_ = true;
    if (!broken_ && !outbox_.empty()) WriteFrontLocked();
    if (read_paused_ && !broken_ &&
        InFlightLocked() < service_->limits().max_stream_in_flight) {
      read_paused_ = false;
      StartRead(&read_buffer_);
    }
    MaybeFinishLocked();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      MaybeFinishLocked();  // a paused stream may have nothing else coming
    }
    // Without mu_: the withdrawn queries' `done` calls Answer().
    service_->scheduler()->Cancel(cancel_key_);
  }

  void OnDone() override {
    ObserveCall(service_->metrics(), "RerankStream", start_, absl::OkStatus(),
                request_id_);
    delete this;
  }

 private:
  // Queues one response for writing. Responses carry their status in the
  // message so one bad request does not end the stream; a failed one is
  // logged. `arrival`: when its request was read.
  void Answer(std::unique_ptr<v1::RerankResponse> response,
              const absl::Status& status, absl::Time arrival,
              bool was_pending) {
    response->set_status_code(static_cast<int32_t>(status.code()));
    if (!status.ok()) {
      response->set_status_message(std::string(status.message()));
      LogCall("RerankStream", request_id_,
              absl::ToDoubleSeconds(absl::Now() - arrival), status,
              response->request_id());
    }
    absl::MutexLock lock(&mu_);
    if (was_pending) --pending_;
    if (!broken_) {
      outbox_.push_back(std::move(response));
      if (!writing_) WriteFrontLocked();
    }
    MaybeFinishLocked();
  }

  // Starts writing the first queued response. REQUIRES: mu_ held, no write
  // in flight.
  void WriteFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    write_buffer_ = SerializeRawMessage(*outbox_.front());
    StartWrite(&write_buffer_);
  }

  // Requests read and not yet written to the client.
  // REQUIRES: mu_ held.
  int64_t InFlightLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending_ + static_cast<int64_t>(outbox_.size());
  }

  // REQUIRES: mu_ held.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || pending_ > 0 || writing_) return;
    if (!reads_done_ && !broken_) return;
    // After a break, a read in flight still ends with OnReadDone(false);
    // wait for it so no read is in flight when the call completes. A paused
    // stream has none.
    if (!reads_done_ && !read_paused_) return;
    finished_ = true;
    Finish(broken_ ? grpc::Status(grpc::StatusCode::CANCELLED,
                                  "the stream was cancelled")
                   : grpc::Status::OK);
  }

  RerankerService* const service_;
  grpc::CallbackServerContext* const ctx_;
  const absl::Time start_;
  const uint64_t cancel_key_;     // for every query this stream submits
  const std::string request_id_;  // x-request-id metadata; "" when absent
  // The read in flight (reads are sequential) and its parsed request.
  grpc::ByteBuffer read_buffer_;
  v1::RerankRequest request_;
  int64_t messages_ = 0;  // read so far
  absl::Mutex mu_;
  grpc::ByteBuffer write_buffer_ ABSL_GUARDED_BY(mu_);  // the write in flight
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;  // at the in-flight limit
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::unique_ptr<v1::RerankResponse>> outbox_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
RerankerService::RerankStream(grpc::CallbackServerContext* ctx) {
  absl::Status refused =
      auth_->Check(*ctx, Scope::kQuery, "Reranker.RerankStream");
  if (refused.ok()) refused = loading_->Check("Reranker.RerankStream");
  if (!refused.ok()) {
    ObserveCall(metrics_, "RerankStream", absl::Now(), refused,
                TakeRequestId(ctx));
    // Finished before the first read: no query is decoded or queued.
    return new FinishedReactor<
        grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>(
        ToGrpcStatus(refused));
  }
  return new StreamReactor(this, ctx);
}

}  // namespace maxsimd
