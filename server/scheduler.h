// The scheduler: a bounded queue of decoded queries and the executor threads
// that batch them into backend searches.
//
// Ownership of a request, step by step:
//   1. The transport (a gRPC reactor) validates and decodes the request, then
//      hands its QueryTasks to Submit(). If Submit() fails, nothing was
//      queued and the transport still owns the request and answers it.
//   2. Once Submit() succeeds the scheduler owns the tasks: exactly one call
//      of each task's `done` will follow, from an executor thread, with the
//      ranking, DEADLINE_EXCEEDED (the deadline passed while queued: the
//      query never runs), CANCELLED, or the backend's error.
//   3. `done` hands the result back to the transport, which finishes the RPC.
//
// Batching: an executor takes the oldest task and every other queued task
// that reads the same corpus snapshot and is of the same kind (scan or
// rerank), up to max_batch_queries and the backend's limits, and runs them
// as one Search(). Tasks of one Submit() call stay together when they fit.
//
// Thread-safety: thread-safe. `done` runs without mu_ held.
#ifndef MAXSIMD_SERVER_SCHEDULER_H_
#define MAXSIMD_SERVER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "index/corpus.h"
#include "kernels/backend.h"
#include "server/metrics.h"
#include "server/request_decoder.h"

namespace maxsimd {

struct RankedDocument {
  std::string id;
  float score = 0.f;
};

// The answer to one query, with where its time went (nanoseconds).
struct QueryOutcome {
  std::vector<RankedDocument> results;
  int64_t queue_ns = 0;
  int64_t compute_ns = 0;
  int64_t h2d_ns = 0;
  int64_t kernel_ns = 0;
  int64_t topk_ns = 0;
  int32_t batch_queries = 0;
};

struct QueryTask {
  std::shared_ptr<const CorpusSnapshot> snapshot;
  DecodedQuery query;
  absl::Time arrival = absl::Now();
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> is_cancelled;  // optional; polled before running
  std::function<void(absl::StatusOr<QueryOutcome>)> done;  // required
};

struct SchedulerOptions {
  int num_executors = 1;
  int64_t max_queued_queries = 4096;
  int32_t max_batch_queries = 64;
};

class Scheduler {
 public:
  // `backend` must outlive the scheduler; `metrics` may be null.
  Scheduler(Backend* backend, const SchedulerOptions& options,
            Metrics* metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues every task or none. Errors: RESOURCE_EXHAUSTED when the queue
  // would exceed max_queued_queries, UNAVAILABLE after Shutdown() began.
  absl::Status Submit(std::vector<QueryTask> tasks) ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses new work, runs everything already queued, and joins the
  // executors. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  int64_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void ExecutorLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Removes and returns the next batch. REQUIRES: mu_ held, queue_ not empty.
  std::vector<QueryTask> TakeBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunBatch(std::vector<QueryTask> batch);

  Backend* const backend_;
  const SchedulerOptions options_;
  Metrics* const metrics_;
  mutable absl::Mutex mu_;
  std::deque<QueryTask> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> executors_;
};

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_SCHEDULER_H_
