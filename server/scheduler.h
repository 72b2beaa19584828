// The scheduler: per-corpus queues of decoded queries, the batching window,
// admission limits, and the executor threads that run batches as backend
// searches.
//
// Ownership of a request, step by step:
//   1. The transport (a gRPC reactor) validates and decodes the request, then
//      hands its QueryTasks to Submit(). If Submit() fails, nothing was
//      queued and the transport still owns the request and answers it. A
//      PLAID query without candidates arrives with only its search
//      parameters (DecodedQuery::plaid_search) and no candidates: nothing
//      is searched on the transport's thread.
//   2. Once Submit() succeeds the scheduler owns the tasks: exactly one call
//      of each task's `done` will follow, with the ranking,
//      DEADLINE_EXCEEDED (the deadline passed, or is nearer than
//      min_execution_time, while queued: the query never runs), CANCELLED,
//      or the backend's error. A task answered DEADLINE_EXCEEDED or
//      CANCELLED never runs, PLAID candidate generation included. `done`
//      runs on an executor thread, except for tasks withdrawn by Cancel(),
//      whose `done` runs on Cancel()'s caller.
//   3. The executor that takes a batch owns its tasks: it answers the
//      cancelled ones, runs PLAID candidate generation for the others that
//      need it (filling their candidates), then the backend search.
//   4. `done` hands the result back to the transport, which finishes the RPC.
//
// Queues and batching: there is one queue per corpus (by corpus name), split
// into a scan lane and a rerank lane, because scan and rerank queries never
// share a backend search. Within a lane, tasks are ordered by priority
// (higher first) and then by submission order; the tasks of one Submit() call
// (of one priority) are adjacent, so they stay together when they fit in one
// batch. A lane is ready when it holds max_batch_queries queries, or
// max_batch_tokens query tokens, or the backend's max_batch_candidates
// candidates, or its oldest task has waited max_queue_delay (0: at once),
// or the scheduler is shutting down. An executor then takes the lane's
// first task and the tasks after it that read the same corpus snapshot, and
// stops at the first one that would take the batch over any of those limits
// or the backend's.
//
// PLAID candidate generation: a PLAID query without candidates is a rerank
// whose candidates are found when its batch runs, so it waits in the rerank
// lane and counts its n_full_scores (the most candidates generation can
// give it) wherever the lane and batch limits count candidates: its batch
// stays within max_batch_candidates once generated. The executor runs one
// PlaidCandidatesBatch (index/plaid_search.h: one Q C^T product over the
// stacked tokens of all of them) for all such queries of the batch, after
// the batch's deadline and cancellation checks and without mu_, over the
// batch's snapshot (a batch reads one), then ranks them with the batch's
// other reranks. Its time is part of the batch's compute time. The product
// runs on the backend where it scores centroids (Backend::ScoreCentroids:
// the GPU backend), else on a host thread pool that starts with the first
// PLAID batch; the pool also takes the batch's queries in parallel for the
// probing and pruning that follow. A product that fails on the backend answers
// the batch's PLAID queries with its error (UNAVAILABLE after a device
// failure); the batch's other queries still run.
//
// Scan admission: with max_running_scans > 0, no scan lane is ready while
// that many scan batches are inside the backend. A scan batch fills the
// device for its whole run, so one taken early only waits there behind the
// others; held in its lane instead, it closes when a running scan returns,
// with the queries that came meanwhile. Rerank lanes are never held. With
// scan_lead > 0, one more scan batch may close scan_lead before the first
// running scan is expected to return (its start plus its queries times the
// corpus's recent backend time per scan query), so that it is staged and
// waiting when the device frees: no idle gap between batches, and still
// the queries of (nearly) the whole run in the batch. An estimate that is
// early only makes that batch wait on the device; one that is late leaves
// the gap. Until a corpus has a measured scan, its batches wait for a
// return.
//
// Fairness: executors serve ready corpora round-robin (one batch per corpus
// per turn), and within a corpus alternate between its scan and rerank
// lanes, so a ready corpus waits for at most one batch of each other ready
// corpus, however much work those hold.
//
// Back-pressure: Submit() refuses at once, with RESOURCE_EXHAUSTED naming the
// limit, work that would take the queued queries or queued query bytes
// (decoded fp32 query tensors) over their total or per-corpus limit.
//
// Time: every time the scheduler acts on comes from the injected Clock, and
// executors block only in Clock::AwaitWithDeadline, woken by new work, by
// Shutdown(), or when the earliest batching window or task expiry comes due.
// With idle_spin > 0, one idle executor at a time first polls for new work
// for that long (without the lock) before it sleeps: a query that arrives
// meanwhile starts without a thread wake-up, which on an idle host costs
// tens of microseconds. The others sleep as before.
//
// Thread-safety: thread-safe. `done` and `is_cancelled` never run with mu_
// held.
#ifndef MAXSIMD_SERVER_SCHEDULER_H_
#define MAXSIMD_SERVER_SCHEDULER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "index/corpus.h"
#include "kernels/backend.h"
#include "kernels/base/thread_pool.h"
#include "server/clock.h"
#include "server/metrics.h"
#include "server/request_decoder.h"

namespace maxsimd {

struct RankedDocument {
  std::string id;
  float score = 0.f;
};

// The answer to one query, with where its time went (nanoseconds, measured
// on the scheduler's clock).
struct QueryOutcome {
  std::vector<RankedDocument> results;
  int64_t queue_ns = 0;  // Submit() to the start of its batch
  // The batch's PLAID candidate generation (if any) and backend search.
  int64_t compute_ns = 0;
  int64_t h2d_ns = 0;
  int64_t kernel_ns = 0;
  int64_t topk_ns = 0;
  int32_t batch_queries = 0;
};

struct QueryTask {
  // The corpus state the query runs against; its config().name picks the
  // queue. Required.
  std::shared_ptr<const CorpusSnapshot> snapshot;
  DecodedQuery query;
  absl::Time deadline = absl::InfiniteFuture();  // on the scheduler's clock
  // Higher runs first within its corpus queue; FIFO within one priority.
  int32_t priority = 0;
  // Cancel(cancel_key) withdraws every queued task carrying this key; 0 = no
  // key. Keys come from Scheduler::NewCancelKey().
  uint64_t cancel_key = 0;
  // Optional; polled when the task is taken into a batch. Must be cheap and
  // must not block or call into the scheduler.
  std::function<bool()> is_cancelled;
  std::function<void(absl::StatusOr<QueryOutcome>)> done;  // required
};

struct SchedulerOptions {
  int num_executors = 1;

  // A batch of one (corpus, kind) closes at whichever comes first. A single
  // query over max_batch_tokens still runs, alone.
  int32_t max_batch_queries = 64;
  int64_t max_batch_tokens = 16384;
  absl::Duration max_queue_delay = absl::Milliseconds(1);  // 0: at once

  // Scan batches that may be inside the backend at once (0: no limit but
  // the executors), and how long before the first of them is expected to
  // return one more may close (0: not before); see "Scan admission".
  int32_t max_running_scans = 0;
  absl::Duration scan_lead = absl::ZeroDuration();

  // How long one idle executor polls for new work before it sleeps (0: it
  // sleeps at once). Costs up to one busy core while the server is idle.
  absl::Duration idle_spin = absl::ZeroDuration();

  // A queued query whose deadline is nearer than this is answered
  // DEADLINE_EXCEEDED without running: it could not finish in time.
  absl::Duration min_execution_time = absl::ZeroDuration();

  // Admission limits. Bytes are decoded fp32 query tensor bytes
  // (num_tokens * dim * 4). A per-corpus limit of 0 means only the total
  // applies.
  int64_t max_queued_queries = 4096;
  int64_t max_queued_bytes = int64_t{1} << 30;
  int64_t max_queued_queries_per_corpus = 0;
  int64_t max_queued_bytes_per_corpus = 0;
};

// INVALID_ARGUMENT naming the flag of the first option out of range.
absl::Status ValidateSchedulerOptions(const SchedulerOptions& options);

class Scheduler {
 public:
  // `backend` must outlive the scheduler; `metrics` may be null; `clock`
  // null means RealClock(), else it must outlive the scheduler. `options`
  // must pass ValidateSchedulerOptions().
  Scheduler(Backend* backend, const SchedulerOptions& options, Metrics* metrics,
            const Clock* clock = nullptr);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues every task or none. Errors: RESOURCE_EXHAUSTED when a queue limit
  // would be exceeded (the message names the limit and its value),
  // UNAVAILABLE after Shutdown() began, INTERNAL for a task without `done`
  // or `snapshot` (a transport bug).
  absl::Status Submit(std::vector<QueryTask> tasks) ABSL_LOCKS_EXCLUDED(mu_);

  // A key no other Cancel() group has, for QueryTask::cancel_key.
  uint64_t NewCancelKey() { return next_cancel_key_.fetch_add(1); }

  // Withdraws every still-queued task whose cancel_key is `key` and answers
  // it on this thread: CANCELLED, or DEADLINE_EXCEEDED if its deadline has
  // already passed. Tasks already taken into a batch are not affected.
  // Returns the number withdrawn. Walks the queued tasks (at most
  // max_queued_queries). Must not be called from a `done` callback.
  int Cancel(uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses new work, runs everything already queued (ignoring the batching
  // window; expired tasks are still answered DEADLINE_EXCEEDED), and joins
  // the executors. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Queued (not yet running) queries and their bytes, in total or for one
  // corpus.
  int64_t queued() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t queued(absl::string_view corpus) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t queued_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One queued task and the scheduler's bookkeeping for it.
  struct Entry {
    QueryTask task;
    absl::Time enqueued;
    absl::Time expires;  // deadline - min_execution_time
    int64_t bytes = 0;
  };
  // Dispatch order within a lane: higher priority first, then FIFO.
  struct Order {
    int32_t priority;
    uint64_t seq;
    bool operator<(const Order& o) const {
      return priority != o.priority ? priority > o.priority : seq < o.seq;
    }
  };
  // A batch taken from one lane.
  struct Batch {
    std::vector<Entry> entries;
    bool scan = false;
    // Scan: when it is expected to leave the backend; InfiniteFuture while
    // its corpus has no measured scan.
    absl::Time expected_end = absl::InfiniteFuture();
  };
  // The queued tasks of one corpus and kind.
  struct Lane {
    std::map<Order, Entry> tasks;
    std::multiset<absl::Time> enqueued;  // to find the oldest task
    int64_t tokens = 0;
    int64_t candidates = 0;
  };
  static constexpr int kScan = 0;
  static constexpr int kRerank = 1;
  struct CorpusQueue {
    std::array<Lane, 2> lanes;  // [kScan], [kRerank]
    int64_t queries = 0;
    int64_t bytes = 0;
    int next_lane = kScan;  // which lane this corpus serves first
  };
  using QueueMap = std::map<std::string, CorpusQueue, std::less<>>;

  void ExecutorLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // The idle executor's poll: returns once new work was submitted, Shutdown()
  // began, or `until` passed. Called without mu_.
  void Spin(uint64_t seen, absl::Time until) ABSL_LOCKS_EXCLUDED(mu_);

  // The admission check of Submit(); OK or RESOURCE_EXHAUSTED.
  // REQUIRES: mu_ held.
  absl::Status CheckLimitsLocked(const std::vector<QueryTask>& tasks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LaneReadyLocked(const Lane& lane, int kind, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When scan lanes may next close a batch ("Scan admission"):
  // InfinitePast when they are not held, InfiniteFuture when they wait for
  // a running scan to return. REQUIRES: mu_ held.
  absl::Time ScanGateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A scan batch expected to end at `expected_end` left the backend after
  // running `queries` queries of `corpus` in `own_ns` of its own (not
  // waiting for other searches): updates the corpus's cost per query and
  // reopens the scan lanes.
  void EndRunningScan(absl::Time expected_end, absl::string_view corpus,
                      int64_t queries, int64_t own_ns) ABSL_LOCKS_EXCLUDED(mu_);
  // When the executors must look again: the earliest batching window or
  // task expiry. REQUIRES: mu_ held.
  absl::Time NextWakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the next batch of the next ready corpus in round-robin order;
  // empty when no lane is ready. REQUIRES: mu_ held.
  Batch TakeBatchLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Batch TakeFromLaneLocked(QueueMap::iterator queue, int kind, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every task that can no longer finish in time to *expired.
  // REQUIRES: mu_ held.
  void SweepExpiredLocked(absl::Time now, std::vector<Entry>* expired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unlinks one task from every index and count; the caller drops the queue
  // once it is empty. REQUIRES: mu_ held.
  Entry RemoveLocked(CorpusQueue& queue, int kind,
                     std::map<Order, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishDepthLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BumpGenerationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Answers DEADLINE_EXCEEDED to tasks swept at `now`. Called without mu_.
  void AnswerExpired(std::vector<Entry> expired, absl::Time now);
  // Runs PLAID candidate generation, one PlaidCandidatesBatch over
  // `snapshot` (the batch's), for the tasks of *live that need it, and
  // fills their candidates; if it fails, answers those tasks with the
  // error and removes them from *live. Called without mu_.
  void GeneratePlaidCandidates(const CorpusSnapshot& snapshot,
                               std::vector<Entry>* live);
  void RunBatch(Batch batch, absl::Time start);

  Backend* const backend_;
  // Threads of PLAID candidate generation on the host (one per hardware
  // thread): the centroid product where the backend does not score
  // centroids, and the probing and pruning of a batch's queries. Started by
  // the first PLAID batch; one loop at a time, whichever executor asks.
  LazyThreadPool plaid_pool_;
  const SchedulerOptions options_;
  Metrics* const metrics_;
  const Clock* const clock_;
  // Effective batch limits: the options capped by the backend's limits.
  const int32_t batch_queries_;
  const int64_t batch_tokens_;
  const int64_t batch_candidates_;
  std::atomic<uint64_t> next_cancel_key_{1};

  mutable absl::Mutex mu_;
  QueueMap queues_ ABSL_GUARDED_BY(mu_);  // only corpora with queued tasks
  std::string last_served_ ABSL_GUARDED_BY(mu_);  // round-robin cursor
  std::multiset<absl::Time> expiries_ ABSL_GUARDED_BY(mu_);  // finite only
  int64_t queued_queries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t running_scans_ ABSL_GUARDED_BY(mu_) = 0;  // taken, not returned
  // The expected ends of the running scans (Batch::expected_end).
  std::multiset<absl::Time> scan_ends_ ABSL_GUARDED_BY(mu_);
  // Per corpus: a moving average of its scans' backend time per query (ns).
  std::map<std::string, double, std::less<>> scan_ns_per_query_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Bumped by every change that may make work ready sooner (Submit,
  // Shutdown); idle executors wait for it to move.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // generation_'s value, readable without mu_ (for the spinning executor).
  std::atomic<uint64_t> published_generation_{0};
  // An executor is spinning; the sleeping ones then need no wake-up for new
  // work (the spinner takes it, and wakes them when more is ready).
  bool spinning_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex shutdown_mu_;  // serialises Shutdown(); ordered before mu_
  std::vector<std::thread> executors_ ABSL_GUARDED_BY(shutdown_mu_);
};

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_SCHEDULER_H_
