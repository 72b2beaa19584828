#include "server/scheduler.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "index/plaid_search.h"

namespace maxsimd {
namespace {

// Bytes a queued task holds: its decoded fp32 query tensor.
int64_t TaskBytes(const QueryTask& t) {
  return static_cast<int64_t>(t.query.tokens.size() * sizeof(float));
}

// Candidates a task brings to a batch: a PLAID query waiting for candidate
// generation counts the most it can be given.
int64_t TaskCandidates(const QueryTask& t) {
  if (t.query.plaid_search.has_value()) {
    return t.query.plaid_search->n_full_scores;
  }
  return static_cast<int64_t>(t.query.candidates.size());
}

const std::string& CorpusOf(const QueryTask& t) {
  return t.snapshot->config().name;
}

absl::Status OutOfRange(absl::string_view flag, absl::string_view rule,
                        absl::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be ", rule, "; got ", value));
}

bool IsNonNegativeFinite(absl::Duration d) {
  return d >= absl::ZeroDuration() && d != absl::InfiniteDuration();
}

// Tells the core this thread is in a polling loop.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

absl::Status ValidateSchedulerOptions(const SchedulerOptions& o) {
  if (o.num_executors < 1) {
    return OutOfRange("executors", "at least 1", absl::StrCat(o.num_executors));
  }
  if (o.max_batch_queries < 1) {
    return OutOfRange("batch_max_queries", "at least 1",
                      absl::StrCat(o.max_batch_queries));
  }
  if (o.max_batch_tokens < 1) {
    return OutOfRange("batch_max_tokens", "at least 1",
                      absl::StrCat(o.max_batch_tokens));
  }
  if (!IsNonNegativeFinite(o.max_queue_delay)) {
    return OutOfRange("max_queue_delay", "finite and not negative",
                      absl::FormatDuration(o.max_queue_delay));
  }
  if (!IsNonNegativeFinite(o.idle_spin)) {
    return OutOfRange("executor_spin", "finite and not negative",
                      absl::FormatDuration(o.idle_spin));
  }
  if (!IsNonNegativeFinite(o.min_execution_time)) {
    return OutOfRange("min_execution_time", "finite and not negative",
                      absl::FormatDuration(o.min_execution_time));
  }
  if (o.max_running_scans < 0) {
    return OutOfRange("max_running_scans", "0 (no limit) or more",
                      absl::StrCat(o.max_running_scans));
  }
  if (!IsNonNegativeFinite(o.scan_lead)) {
    return OutOfRange("scan_lead", "finite and not negative",
                      absl::FormatDuration(o.scan_lead));
  }
  if (o.max_queued_queries < 1) {
    return OutOfRange("max_queued_queries", "at least 1",
                      absl::StrCat(o.max_queued_queries));
  }
  if (o.max_queued_bytes < 1) {
    return OutOfRange("max_queued_bytes", "at least 1",
                      absl::StrCat(o.max_queued_bytes));
  }
  if (o.max_queued_queries_per_corpus < 0) {
    return OutOfRange("max_queued_queries_per_corpus", "0 (no limit) or more",
                      absl::StrCat(o.max_queued_queries_per_corpus));
  }
  if (o.max_queued_bytes_per_corpus < 0) {
    return OutOfRange("max_queued_bytes_per_corpus", "0 (no limit) or more",
                      absl::StrCat(o.max_queued_bytes_per_corpus));
  }
  return absl::OkStatus();
}

Scheduler::Scheduler(Backend* backend, const SchedulerOptions& options,
                     Metrics* metrics, const Clock* clock)
    : backend_(backend),
      options_(options),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : RealClock()),
      batch_queries_(
          std::max(1, std::min(options.max_batch_queries,
                               backend->limits().max_batch_queries))),
      batch_tokens_(std::max<int64_t>(
          1, std::min(options.max_batch_tokens,
                      backend->limits().max_batch_query_tokens))),
      batch_candidates_(
          std::max<int64_t>(1, backend->limits().max_batch_candidates)) {
  absl::MutexLock lock(&shutdown_mu_);
  for (int i = 0; i < std::max(1, options_.num_executors); ++i) {
    executors_.emplace_back([this] { ExecutorLoop(); });
  }
}

Scheduler::~Scheduler() { Shutdown(); }

absl::Status Scheduler::Submit(std::vector<QueryTask> tasks) {
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].snapshot == nullptr || !tasks[i].done) {
      return absl::InternalError(
          absl::StrCat("Scheduler::Submit: tasks[", i, "] has no ",
                       tasks[i].snapshot == nullptr ? "snapshot" : "done"));
    }
  }
  if (tasks.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    if (metrics_) metrics_->CountRejected("draining");
    return absl::UnavailableError("the server is shutting down");
  }
  const absl::Status admitted = CheckLimitsLocked(tasks);
  if (!admitted.ok()) return admitted;
  const absl::Time now = clock_->Now();
  for (QueryTask& t : tasks) {
    CorpusQueue& queue = queues_[CorpusOf(t)];
    const int kind = t.query.scan ? kScan : kRerank;
    Lane& lane = queue.lanes[kind];
    Entry e;
    e.enqueued = now;
    e.expires = t.deadline - options_.min_execution_time;
    e.bytes = TaskBytes(t);
    lane.tokens += t.query.num_tokens;
    lane.candidates += TaskCandidates(t);
    lane.enqueued.insert(now);
    if (e.expires != absl::InfiniteFuture()) expiries_.insert(e.expires);
    queue.queries += 1;
    queue.bytes += e.bytes;
    queued_queries_ += 1;
    queued_bytes_ += e.bytes;
    const Order order{t.priority, next_seq_++};
    e.task = std::move(t);
    lane.tasks.emplace(order, std::move(e));
  }
  BumpGenerationLocked();
  PublishDepthLocked();
  return absl::OkStatus();
}

absl::Status Scheduler::CheckLimitsLocked(
    const std::vector<QueryTask>& tasks) const {
  // What this call adds, in total and per corpus.
  const int64_t queries = static_cast<int64_t>(tasks.size());
  int64_t bytes = 0;
  std::map<absl::string_view, std::pair<int64_t, int64_t>> per_corpus;
  for (const QueryTask& t : tasks) {
    bytes += TaskBytes(t);
    auto& [q, b] = per_corpus[CorpusOf(t)];
    q += 1;
    b += TaskBytes(t);
  }
  auto refuse = [this](absl::string_view limit, int64_t value,
                       absl::string_view what) {
    if (metrics_) metrics_->CountRejected(std::string(limit));
    return absl::ResourceExhaustedError(
        absl::StrCat(what, "; --", limit, " is ", value));
  };
  if (queued_queries_ + queries > options_.max_queued_queries) {
    return refuse(
        "max_queued_queries", options_.max_queued_queries,
        absl::StrCat(queued_queries_,
                     " queries are queued and the request adds ", queries));
  }
  if (queued_bytes_ + bytes > options_.max_queued_bytes) {
    return refuse(
        "max_queued_bytes", options_.max_queued_bytes,
        absl::StrCat(queued_bytes_,
                     " query bytes are queued and the request adds ", bytes));
  }
  for (const auto& [corpus, demand] : per_corpus) {
    const auto it = queues_.find(corpus);
    const int64_t have_queries = it == queues_.end() ? 0 : it->second.queries;
    const int64_t have_bytes = it == queues_.end() ? 0 : it->second.bytes;
    if (options_.max_queued_queries_per_corpus > 0 &&
        have_queries + demand.first > options_.max_queued_queries_per_corpus) {
      return refuse(
          "max_queued_queries_per_corpus",
          options_.max_queued_queries_per_corpus,
          absl::StrCat("corpus \"", corpus, "\" has ", have_queries,
                       " queries queued and the request adds ", demand.first));
    }
    if (options_.max_queued_bytes_per_corpus > 0 &&
        have_bytes + demand.second > options_.max_queued_bytes_per_corpus) {
      return refuse("max_queued_bytes_per_corpus",
                    options_.max_queued_bytes_per_corpus,
                    absl::StrCat("corpus \"", corpus, "\" has ", have_bytes,
                                 " query bytes queued and the request adds ",
                                 demand.second));
    }
  }
  return absl::OkStatus();
}

int Scheduler::Cancel(uint64_t key) {
  if (key == 0) return 0;
  std::vector<Entry> removed;
  absl::Time now;
  {
    absl::MutexLock lock(&mu_);
    now = clock_->Now();
    for (auto queue = queues_.begin(); queue != queues_.end();) {
      for (int kind : {kScan, kRerank}) {
        auto& tasks = queue->second.lanes[kind].tasks;
        for (auto it = tasks.begin(); it != tasks.end();) {
          const auto next = std::next(it);
          if (it->second.task.cancel_key == key) {
            removed.push_back(RemoveLocked(queue->second, kind, it));
          }
          it = next;
        }
      }
      queue =
          queue->second.queries == 0 ? queues_.erase(queue) : std::next(queue);
    }
    if (!removed.empty()) PublishDepthLocked();
  }
  for (Entry& e : removed) {
    if (now >= e.task.deadline) {
      if (metrics_) metrics_->CountRejected("deadline");
      e.task.done(absl::DeadlineExceededError(
          "the deadline passed while the query was queued"));
    } else {
      if (metrics_) metrics_->CountRejected("cancelled");
      e.task.done(absl::CancelledError("the client cancelled the request"));
    }
  }
  return static_cast<int>(removed.size());
}

void Scheduler::Shutdown() {
  absl::MutexLock shutdown(&shutdown_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    BumpGenerationLocked();
  }
  for (std::thread& t : executors_) {
    if (t.joinable()) t.join();
  }
  executors_.clear();
}

int64_t Scheduler::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_queries_;
}

int64_t Scheduler::queued(absl::string_view corpus) const {
  absl::MutexLock lock(&mu_);
  const auto it = queues_.find(corpus);
  return it == queues_.end() ? 0 : it->second.queries;
}

int64_t Scheduler::queued_bytes() const {
  absl::MutexLock lock(&mu_);
  return queued_bytes_;
}

Scheduler::Entry Scheduler::RemoveLocked(CorpusQueue& queue, int kind,
                                         std::map<Order, Entry>::iterator it) {
  Lane& lane = queue.lanes[kind];
  Entry e = std::move(it->second);
  lane.tasks.erase(it);
  lane.tokens -= e.task.query.num_tokens;
  lane.candidates -= TaskCandidates(e.task);
  lane.enqueued.erase(lane.enqueued.find(e.enqueued));
  if (e.expires != absl::InfiniteFuture()) {
    expiries_.erase(expiries_.find(e.expires));
  }
  queue.queries -= 1;
  queue.bytes -= e.bytes;
  queued_queries_ -= 1;
  queued_bytes_ -= e.bytes;
  return e;
}

absl::Time Scheduler::ScanGateLocked() const {
  if (stopping_ || options_.max_running_scans == 0 ||
      running_scans_ < options_.max_running_scans) {
    return absl::InfinitePast();
  }
  if (running_scans_ == options_.max_running_scans &&
      options_.scan_lead > absl::ZeroDuration()) {
    // InfiniteFuture (no estimate) minus the lead stays InfiniteFuture.
    return *scan_ends_.begin() - options_.scan_lead;
  }
  return absl::InfiniteFuture();
}

bool Scheduler::LaneReadyLocked(const Lane& lane, int kind,
                                absl::Time now) const {
  if (lane.tasks.empty()) return false;
  if (kind == kScan && now < ScanGateLocked()) return false;
  return stopping_ ||
         static_cast<int64_t>(lane.tasks.size()) >= batch_queries_ ||
         lane.tokens >= batch_tokens_ || lane.candidates >= batch_candidates_ ||
         now >= *lane.enqueued.begin() + options_.max_queue_delay;
}

absl::Time Scheduler::NextWakeLocked() const {
  absl::Time next =
      expiries_.empty() ? absl::InfiniteFuture() : *expiries_.begin();
  for (const auto& [name, queue] : queues_) {
    for (int kind : {kScan, kRerank}) {
      const Lane& lane = queue.lanes[kind];
      if (lane.tasks.empty()) continue;
      absl::Time due = *lane.enqueued.begin() + options_.max_queue_delay;
      // A held scan lane is due when its gate opens: at a known time, or
      // at a return (EndRunningScan bumps the generation).
      if (kind == kScan) due = std::max(due, ScanGateLocked());
      next = std::min(next, due);
    }
  }
  return next;
}

Scheduler::Batch Scheduler::TakeBatchLocked(absl::Time now) {
  // Round-robin: start after the corpus served last, wrap around once.
  auto queue = queues_.upper_bound(last_served_);
  for (size_t i = 0; i < queues_.size(); ++i, ++queue) {
    if (queue == queues_.end()) queue = queues_.begin();
    CorpusQueue& q = queue->second;
    for (int k = 0; k < 2; ++k) {
      const int kind = (q.next_lane + k) % 2;
      if (!LaneReadyLocked(q.lanes[kind], kind, now)) continue;
      last_served_ = queue->first;
      q.next_lane = 1 - kind;
      return TakeFromLaneLocked(queue, kind, now);
    }
  }
  return {};
}

Scheduler::Batch Scheduler::TakeFromLaneLocked(QueueMap::iterator queue,
                                               int kind, absl::Time now) {
  CorpusQueue& q = queue->second;
  auto& tasks = q.lanes[kind].tasks;
  const CorpusSnapshot* snapshot = tasks.begin()->second.task.snapshot.get();
  Batch out;
  std::vector<Entry>& batch = out.entries;
  int64_t tokens = 0;
  int64_t candidates = 0;
  for (auto it = tasks.begin();
       it != tasks.end() &&
       static_cast<int64_t>(batch.size()) < batch_queries_;) {
    const QueryTask& t = it->second.task;
    // A task of another snapshot of this corpus runs in a batch of its own.
    if (t.snapshot.get() != snapshot) {
      ++it;
      continue;
    }
    // The first task always goes; after it, the batch closes at the first
    // task that does not fit, which keeps FIFO order within a priority.
    if (!batch.empty() &&
        (tokens + t.query.num_tokens > batch_tokens_ ||
         candidates + TaskCandidates(t) > batch_candidates_)) {
      break;
    }
    tokens += t.query.num_tokens;
    candidates += TaskCandidates(t);
    const auto next = std::next(it);
    batch.push_back(RemoveLocked(q, kind, it));
    it = next;
  }
  if (kind == kScan) {
    out.scan = true;
    ++running_scans_;
    const auto cost = scan_ns_per_query_.find(queue->first);
    if (cost != scan_ns_per_query_.end()) {
      // The device runs scans in order: this one starts when those
      // before it end.
      absl::Time start = now;
      if (!scan_ends_.empty()) start = std::max(start, *scan_ends_.rbegin());
      out.expected_end =
          start +
          absl::Nanoseconds(cost->second * static_cast<double>(batch.size()));
    }
    scan_ends_.insert(out.expected_end);
  }
  if (q.queries == 0) queues_.erase(queue);
  return out;
}

void Scheduler::SweepExpiredLocked(absl::Time now,
                                   std::vector<Entry>* expired) {
  if (expiries_.empty() || now < *expiries_.begin()) return;
  for (auto queue = queues_.begin(); queue != queues_.end();) {
    for (int kind : {kScan, kRerank}) {
      auto& tasks = queue->second.lanes[kind].tasks;
      for (auto it = tasks.begin(); it != tasks.end();) {
        const auto next = std::next(it);
        if (now >= it->second.expires) {
          expired->push_back(RemoveLocked(queue->second, kind, it));
        }
        it = next;
      }
    }
    queue =
        queue->second.queries == 0 ? queues_.erase(queue) : std::next(queue);
  }
}

void Scheduler::PublishDepthLocked() const {
  if (metrics_) metrics_->SetQueueDepth(queued_queries_, queued_bytes_);
}

void Scheduler::BumpGenerationLocked() {
  ++generation_;
  published_generation_.store(generation_, std::memory_order_release);
}

void Scheduler::Spin(uint64_t seen, absl::Time until) {
  while (published_generation_.load(std::memory_order_acquire) == seen &&
         clock_->Now() < until) {
    CpuRelax();
  }
}

void Scheduler::ExecutorLoop() {
  for (;;) {
    std::vector<Entry> expired;
    Batch batch;
    absl::Time now;
    bool exit = false;
    bool spun = false;  // once per idle period, then sleep
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        now = clock_->Now();
        SweepExpiredLocked(now, &expired);
        batch = TakeBatchLocked(now);
        if (!expired.empty() || !batch.entries.empty()) break;
        if (stopping_ && queued_queries_ == 0) {
          exit = true;
          break;
        }
        const absl::Time wake = NextWakeLocked();
        if (options_.idle_spin > absl::ZeroDuration() && !spun && !spinning_ &&
            !stopping_) {
          spun = true;
          spinning_ = true;
          const uint64_t seen = generation_;
          mu_.Unlock();
          Spin(seen, std::min(now + options_.idle_spin, wake));
          mu_.Lock();
          spinning_ = false;
          continue;
        }
        // Nothing is ready: sleep until new work (unless another executor
        // is spinning for it), Shutdown(), or the next window or expiry
        // comes due.
        struct Seen {
          const Scheduler* scheduler;
          uint64_t generation;
        } seen{this, generation_};
        clock_->AwaitWithDeadline(
            &mu_,
            absl::Condition(
                +[](Seen* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->scheduler->mu_) {
                  return s->scheduler->generation_ != s->generation &&
                         (!s->scheduler->spinning_ || s->scheduler->stopping_);
                },
                &seen),
            wake);
      }
      PublishDepthLocked();
    }
    AnswerExpired(std::move(expired), now);
    if (!batch.entries.empty()) RunBatch(std::move(batch), now);
    if (exit) return;
  }
}

void Scheduler::AnswerExpired(std::vector<Entry> expired, absl::Time now) {
  for (Entry& e : expired) {
    if (metrics_) metrics_->CountRejected("deadline");
    e.task.done(absl::DeadlineExceededError(
        now >= e.task.deadline
            ? std::string("the deadline passed while the query was queued")
            : absl::StrCat("the deadline is less than --min_execution_time (",
                           absl::FormatDuration(options_.min_execution_time),
                           ") away; the query could not finish in time")));
  }
}

void Scheduler::EndRunningScan(absl::Time expected_end,
                               absl::string_view corpus, int64_t queries,
                               int64_t own_ns) {
  absl::MutexLock lock(&mu_);
  --running_scans_;
  scan_ends_.erase(scan_ends_.find(expected_end));
  if (queries > 0 && own_ns > 0) {
    const double sample =
        static_cast<double>(own_ns) / static_cast<double>(queries);
    auto it = scan_ns_per_query_.find(corpus);
    if (it == scan_ns_per_query_.end()) {
      scan_ns_per_query_.emplace(std::string(corpus), sample);
    } else {
      it->second += (sample - it->second) / 8;  // about the last 8 batches
    }
  }
  // A held scan lane may be ready now: wake the idle executors.
  if (options_.max_running_scans > 0) BumpGenerationLocked();
}

void Scheduler::GeneratePlaidCandidates(const CorpusSnapshot& snapshot,
                                        std::vector<Entry>* live) {
  std::vector<PlaidQuery> queries;
  std::vector<DecodedQuery*> targets;
  for (Entry& e : *live) {
    DecodedQuery& q = e.task.query;
    if (!q.plaid_search.has_value()) continue;
    queries.push_back({q.tokens.data(), q.num_tokens, *q.plaid_search});
    targets.push_back(&q);
  }
  if (queries.empty()) return;
  const absl::Time begin = clock_->Now();
  PlaidBatchStats stats;
  PlaidProduct product;
  product.backend = backend_;
  product.host_pool = [this] { return plaid_pool_.Get(); };
  absl::StatusOr<std::vector<std::vector<DocRef>>> found =
      PlaidCandidatesBatch(snapshot, queries, product, &stats);
  const double seconds = absl::ToDoubleSeconds(clock_->Now() - begin);
  if (!found.ok()) {
    // The queries that needed candidates get the error; the others run.
    std::vector<Entry> kept;
    kept.reserve(live->size());
    for (Entry& e : *live) {
      if (e.task.query.plaid_search.has_value()) {
        e.task.done(found.status());
      } else {
        kept.push_back(std::move(e));
      }
    }
    *live = std::move(kept);
    return;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i]->candidates = std::move((*found)[i]);
    targets[i]->plaid_search.reset();
  }
  if (metrics_) {
    metrics_->CountPlaidGeneration(stats.centroid_products,
                                   stats.device_products,
                                   static_cast<int64_t>(queries.size()));
    for (size_t i = 0; i < queries.size(); ++i) {
      metrics_->ObserveStage("generate", seconds);
    }
  }
}

void Scheduler::RunBatch(Batch batch, absl::Time start) {
  // A scan batch counts as running until the backend returns (or until
  // it turns out to have nothing to run): each path below ends it once.
  const std::string corpus =
      batch.scan ? batch.entries.front().task.snapshot->config().name : "";
  int64_t ran = 0, own_ns = 0;
  auto end_running_scan = [&] {
    if (batch.scan) EndRunningScan(batch.expected_end, corpus, ran, own_ns);
  };
  // Cancelled queries leave without running.
  std::vector<Entry> live;
  live.reserve(batch.entries.size());
  for (Entry& e : batch.entries) {
    if (e.task.is_cancelled && e.task.is_cancelled()) {
      if (metrics_) metrics_->CountRejected("cancelled");
      e.task.done(absl::CancelledError("the client cancelled the request"));
    } else {
      live.push_back(std::move(e));
    }
  }
  if (live.empty()) {
    end_running_scan();
    return;
  }

  // The snapshot outlives `live`'s entries: a failed generation drops its
  // queries, the first maybe among them.
  const std::shared_ptr<const CorpusSnapshot> snapshot_ref =
      live.front().task.snapshot;
  const CorpusSnapshot& snapshot = *snapshot_ref;
  GeneratePlaidCandidates(snapshot, &live);
  if (live.empty()) {
    end_running_scan();
    return;
  }
  SearchBatch search;
  search.dim = snapshot.config().dim;
  search.quantize_queries = snapshot.config().quantize_queries;
  search.refs = snapshot.SegmentRefs();
  const bool rerank = !live.front().task.query.scan;
  if (rerank) search.cand_offsets = {0};
  for (const Entry& e : live) {
    const DecodedQuery& q = e.task.query;
    search.AddQuery(q.tokens, q.top_k);
    if (rerank) {
      search.candidates.insert(search.candidates.end(), q.candidates.begin(),
                               q.candidates.end());
      search.cand_offsets.push_back(
          static_cast<int64_t>(search.candidates.size()));
    }
  }
  const SearchParams params = search.Params();
  std::vector<std::vector<ScoredDoc>> results(live.size());
  SearchTiming timing;
  // A rerank batch without a single candidate (PLAID candidate generation
  // can find none, e.g. before a corpus has documents) ranks nothing: no
  // launch.
  const bool nothing = rerank && search.candidates.empty();
  const absl::Status status =
      nothing ? absl::OkStatus()
              : backend_->Search(params, absl::MakeSpan(results), &timing);
  const absl::Time end = clock_->Now();
  if (status.ok() && !nothing) {
    ran = static_cast<int64_t>(live.size());
    own_ns = absl::ToInt64Nanoseconds(end - start) - timing.device_wait_ns;
  }
  end_running_scan();
  if (metrics_) metrics_->ObserveBatch(static_cast<int>(live.size()));
  for (size_t i = 0; i < live.size(); ++i) {
    Entry& e = live[i];
    if (!status.ok()) {
      e.task.done(status);
      continue;
    }
    QueryOutcome out;
    out.results.reserve(results[i].size());
    for (const ScoredDoc& d : results[i]) {
      out.results.push_back({snapshot.IdOf(d.index), d.score});
    }
    out.queue_ns = absl::ToInt64Nanoseconds(start - e.enqueued);
    out.compute_ns = absl::ToInt64Nanoseconds(end - start);
    out.h2d_ns = timing.h2d_ns;
    out.kernel_ns = timing.kernel_ns;
    out.topk_ns = timing.topk_ns;
    out.batch_queries = static_cast<int32_t>(live.size());
    if (metrics_) {
      metrics_->ObserveStage("queue", out.queue_ns * 1e-9);
      metrics_->ObserveStage("compute", out.compute_ns * 1e-9);
      metrics_->ObserveStage("h2d", out.h2d_ns * 1e-9);
      metrics_->ObserveStage("kernel", out.kernel_ns * 1e-9);
      metrics_->ObserveStage("topk", out.topk_ns * 1e-9);
      metrics_->ObserveStage("d2h", timing.d2h_ns * 1e-9);
      metrics_->ObserveStage("device_wait", timing.device_wait_ns * 1e-9);
      metrics_->ObserveStage("total", absl::ToDoubleSeconds(end - e.enqueued));
    }
    e.task.done(std::move(out));
  }
}

}  // namespace maxsimd
