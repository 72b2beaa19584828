#include "server/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace maxsimd {

Scheduler::Scheduler(Backend* backend, const SchedulerOptions& options,
                     Metrics* metrics)
    : backend_(backend), options_(options), metrics_(metrics) {
  for (int i = 0; i < std::max(1, options_.num_executors); ++i) {
    executors_.emplace_back([this] { ExecutorLoop(); });
  }
}

Scheduler::~Scheduler() { Shutdown(); }

absl::Status Scheduler::Submit(std::vector<QueryTask> tasks) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    if (metrics_) metrics_->CountRejected("draining");
    return absl::UnavailableError("the server is shutting down");
  }
  const int64_t depth = static_cast<int64_t>(queue_.size());
  if (depth + static_cast<int64_t>(tasks.size()) >
      options_.max_queued_queries) {
    if (metrics_) metrics_->CountRejected("queue_full");
    return absl::ResourceExhaustedError(absl::StrCat(
        "the query queue holds ", depth, " queries; --max_queued_queries is ",
        options_.max_queued_queries));
  }
  for (QueryTask& t : tasks) queue_.push_back(std::move(t));
  if (metrics_) metrics_->SetQueueDepth(static_cast<int64_t>(queue_.size()));
  return absl::OkStatus();
}

void Scheduler::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && executors_.empty()) return;
    stopping_ = true;
  }
  for (std::thread& t : executors_) {
    if (t.joinable()) t.join();
  }
  executors_.clear();
}

int64_t Scheduler::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

std::vector<QueryTask> Scheduler::TakeBatch() {
  std::vector<QueryTask> batch;
  const CorpusSnapshot* snapshot = queue_.front().snapshot.get();
  const bool scan = queue_.front().query.scan;
  const BackendLimits& limits = backend_->limits();
  const int32_t max_queries =
      std::min(options_.max_batch_queries, limits.max_batch_queries);
  int64_t tokens = 0;
  int64_t candidates = 0;
  for (auto it = queue_.begin();
       it != queue_.end() &&
       static_cast<int32_t>(batch.size()) < max_queries;) {
    const DecodedQuery& q = it->query;
    const bool fits = tokens + q.num_tokens <= limits.max_batch_query_tokens &&
                      candidates + static_cast<int64_t>(q.candidates.size()) <=
                          limits.max_batch_candidates;
    if (it->snapshot.get() != snapshot || q.scan != scan ||
        (!batch.empty() && !fits)) {
      ++it;
      continue;
    }
    tokens += q.num_tokens;
    candidates += static_cast<int64_t>(q.candidates.size());
    batch.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  return batch;
}

void Scheduler::ExecutorLoop() {
  for (;;) {
    std::vector<QueryTask> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Scheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stopping_ || !s->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      batch = TakeBatch();
      if (metrics_)
        metrics_->SetQueueDepth(static_cast<int64_t>(queue_.size()));
    }
    RunBatch(std::move(batch));
  }
}

void Scheduler::RunBatch(std::vector<QueryTask> batch) {
  const absl::Time start = absl::Now();
  // Expired and cancelled queries leave without running.
  std::vector<QueryTask> live;
  for (QueryTask& t : batch) {
    if (start > t.deadline) {
      if (metrics_) metrics_->CountRejected("deadline");
      t.done(absl::DeadlineExceededError(
          "the deadline passed while the query was queued"));
    } else if (t.is_cancelled && t.is_cancelled()) {
      if (metrics_) metrics_->CountRejected("cancelled");
      t.done(absl::CancelledError("the client cancelled the request"));
    } else {
      live.push_back(std::move(t));
    }
  }
  if (live.empty()) return;

  const CorpusSnapshot& snapshot = *live.front().snapshot;
  SearchBatch search;
  search.dim = snapshot.config().dim;
  search.refs = snapshot.SegmentRefs();
  const bool rerank = !live.front().query.scan;
  if (rerank) search.cand_offsets = {0};
  for (const QueryTask& t : live) {
    search.AddQuery(t.query.tokens, t.query.top_k);
    if (rerank) {
      search.candidates.insert(search.candidates.end(),
                               t.query.candidates.begin(),
                               t.query.candidates.end());
      search.cand_offsets.push_back(
          static_cast<int64_t>(search.candidates.size()));
    }
  }
  const SearchParams params = search.Params();
  std::vector<std::vector<ScoredDoc>> results(live.size());
  SearchTiming timing;
  const absl::Status status =
      backend_->Search(params, absl::MakeSpan(results), &timing);
  const absl::Time end = absl::Now();
  if (metrics_) metrics_->ObserveBatch(static_cast<int>(live.size()));
  for (size_t i = 0; i < live.size(); ++i) {
    QueryTask& t = live[i];
    if (!status.ok()) {
      t.done(status);
      continue;
    }
    QueryOutcome out;
    out.results.reserve(results[i].size());
    for (const ScoredDoc& d : results[i]) {
      out.results.push_back({snapshot.IdOf(d.index), d.score});
    }
    out.queue_ns = absl::ToInt64Nanoseconds(start - t.arrival);
    out.compute_ns = absl::ToInt64Nanoseconds(end - start);
    out.h2d_ns = timing.h2d_ns;
    out.kernel_ns = timing.kernel_ns;
    out.topk_ns = timing.topk_ns;
    out.batch_queries = static_cast<int32_t>(live.size());
    if (metrics_) {
      metrics_->ObserveStage("queue", out.queue_ns * 1e-9);
      metrics_->ObserveStage("compute", out.compute_ns * 1e-9);
      metrics_->ObserveStage("kernel", out.kernel_ns * 1e-9);
    }
    t.done(std::move(out));
  }
}

}  // namespace maxsimd
