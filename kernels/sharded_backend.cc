#include "kernels/sharded_backend.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "kernels/base/status_macros.h"
#include "kernels/topk_cpu.h"

namespace maxsimd {

// A fixed set of threads running one shard's parts of searches, in order of
// arrival.
class ShardedBackend::Executor {
 public:
  explicit Executor(int threads) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] { Loop(); });
    }
  }
  ~Executor() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

  void Run(std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    work_.push_back(std::move(fn));
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> fn;
      {
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || !work_.empty();
        };
        absl::MutexLock lock(&mu_, absl::Condition(&ready));
        if (work_.empty()) return;  // stopping, nothing left
        fn = std::move(work_.front());
        work_.pop_front();
      }
      fn();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

namespace {

// One shard's part of a search: its segments (renumbered from 0) and, for a
// rerank, the candidates that live there.
struct Part {
  std::vector<SegmentRef> refs;
  std::vector<int64_t> cand_offsets;
  std::vector<DocRef> candidates;
  std::vector<std::vector<ScoredDoc>> results;
  SearchTiming timing;
  absl::Status status;
};

// The shard's top-k lists of one query, merged into `out`.
void MergeQuery(std::vector<Part>& parts, const std::vector<int>& active,
                int query, int32_t top_k, std::vector<ScoredDoc>* out) {
  for (int s : active) {
    MergeRanked(out, std::move(parts[s].results[query]), top_k);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> ShardedBackend::Create(
    std::vector<std::unique_ptr<Backend>> shards, int threads_per_shard) {
  if (shards.empty()) {
    return absl::InvalidArgumentError("ShardedBackend: no shards");
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShardedBackend: shards[", i, "] is null"));
    }
  }
  if (threads_per_shard < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardedBackend: threads_per_shard is ", threads_per_shard,
                     "; it must be at least 1"));
  }
  std::unique_ptr<ShardedBackend> b(new ShardedBackend);
  b->shards_ = std::move(shards);
  for (size_t i = 0; i < b->shards_.size(); ++i) {
    b->executors_.push_back(std::make_unique<Executor>(threads_per_shard));
  }
  return std::unique_ptr<Backend>(std::move(b));
}

ShardedBackend::~ShardedBackend() = default;

std::string ShardedBackend::name() const {
  std::vector<std::string> names;
  for (const auto& s : shards_) names.push_back(s->name());
  return absl::StrJoin(names, "+");
}

std::string ShardedBackend::description() const {
  std::vector<std::string> parts;
  for (const auto& s : shards_) parts.push_back(s->description());
  return absl::StrJoin(parts, " + ");
}

const BackendLimits& ShardedBackend::limits() const {
  return shards_[0]->limits();
}

absl::StatusOr<std::unique_ptr<ResidentBuffer>> ShardedBackend::Upload(
    const void* host, size_t bytes) {
  return shards_[0]->Upload(host, bytes);
}

absl::StatusOr<std::unique_ptr<ResidentBuffer>> ShardedBackend::Pin(
    const void* host, size_t bytes) {
  return shards_[0]->Pin(host, bytes);
}

bool ShardedBackend::healthy() const {
  return std::all_of(shards_.begin(), shards_.end(),
                     [](const auto& s) { return s->healthy(); });
}

bool ShardedBackend::StreamsDType(DType dtype) const {
  return std::all_of(shards_.begin(), shards_.end(),
                     [dtype](const auto& s) { return s->StreamsDType(dtype); });
}

bool ShardedBackend::PrefersQuantizedQueries(int32_t dim) const {
  return std::all_of(shards_.begin(), shards_.end(), [dim](const auto& s) {
    return s->PrefersQuantizedQueries(dim);
  });
}

bool ShardedBackend::SupportsDType(DType dtype, int32_t dim) const {
  return std::all_of(
      shards_.begin(), shards_.end(),
      [dtype, dim](const auto& s) { return s->SupportsDType(dtype, dim); });
}

int ShardedBackend::num_shards() const {
  return static_cast<int>(shards_.size());
}

Backend* ShardedBackend::shard(int i) { return shards_[i].get(); }

absl::Status ShardedBackend::AssignNearestCentroids(
    absl::Span<const float> tokens, absl::Span<const float> centroids,
    int32_t dim, absl::Span<int64_t> codes) {
  return shards_[0]->AssignNearestCentroids(tokens, centroids, dim, codes);
}

bool ShardedBackend::AssignsNearestCentroids() const {
  return shards_[0]->AssignsNearestCentroids();
}

absl::Status ShardedBackend::ScoreCentroids(int shard,
                                            const PlaidTablesView& tables,
                                            int32_t dim,
                                            absl::Span<const float> tokens,
                                            absl::Span<float> scores) {
  MAXSIMD_RETURN_IF_ERROR(ValidateScoreCentroids(
      shard, num_shards(), tables, dim, tokens, scores, limits()));
  // The child is a backend of one shard: its own memory is shard 0.
  return shards_[shard]->ScoreCentroids(0, tables, dim, tokens, scores);
}

bool ShardedBackend::ScoresCentroids() const {
  return std::all_of(shards_.begin(), shards_.end(),
                     [](const auto& s) { return s->ScoresCentroids(); });
}

std::vector<DeviceMemory> ShardedBackend::Memory() const {
  std::map<int, DeviceMemory> by_device;
  for (const auto& s : shards_) {
    for (const DeviceMemory& m : s->Memory()) {
      DeviceMemory& d = by_device[m.device];
      d.device = m.device;
      d.corpus_bytes += m.corpus_bytes;
      d.pinned_bytes += m.pinned_bytes;
      d.workspace_bytes += m.workspace_bytes;
      d.free_bytes = m.free_bytes;
      d.total_bytes = m.total_bytes;
    }
  }
  std::vector<DeviceMemory> out;
  for (const auto& [device, m] : by_device) out.push_back(m);
  return out;
}

absl::Status ShardedBackend::Search(const SearchParams& params,
                                    absl::Span<std::vector<ScoredDoc>> results,
                                    SearchTiming* timing) {
  MAXSIMD_RETURN_IF_ERROR(
      ValidateSearchParams(params, limits(), results.size()));
  for (auto& r : results) r.clear();
  const int n = num_shards();
  std::vector<Part> parts(n);
  std::vector<int64_t> local(params.segments.size());
  for (size_t i = 0; i < params.segments.size(); ++i) {
    const SegmentRef& ref = params.segments[i];
    if (ref.shard < 0 || ref.shard >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShardedBackend::Search: segments[", i, "].shard is ",
                       ref.shard, "; the backend has ", n, " shards"));
    }
    if (!shards_[ref.shard]->SupportsDType(ref.resident.dtype, params.dim)) {
      return absl::UnimplementedError(absl::StrCat(
          "ShardedBackend::Search: segments[", i, "] is ",
          DTypeName(ref.resident.dtype), " (layout ",
          LayoutOfDType(ref.resident.dtype), "): shard ", ref.shard, ", ",
          shards_[ref.shard]->description(), ", has no kernel for it"));
    }
    local[i] = static_cast<int64_t>(parts[ref.shard].refs.size());
    parts[ref.shard].refs.push_back(ref);
  }
  const bool rerank = params.candidate_offsets != nullptr;
  if (rerank) {
    for (Part& p : parts) p.cand_offsets.push_back(0);
    for (int q = 0; q < params.num_queries; ++q) {
      for (int64_t c = params.candidate_offsets[q];
           c < params.candidate_offsets[q + 1]; ++c) {
        const DocRef& r = params.candidates[c];
        parts[params.segments[r.segment].shard].candidates.push_back(
            {static_cast<int32_t>(local[r.segment]), r.doc});
      }
      for (Part& p : parts) {
        p.cand_offsets.push_back(static_cast<int64_t>(p.candidates.size()));
      }
    }
  }
  std::vector<int> active;
  for (int s = 0; s < n; ++s) {
    if (!parts[s].refs.empty() && (!rerank || !parts[s].candidates.empty())) {
      active.push_back(s);
    }
  }
  if (active.empty()) return absl::OkStatus();

  auto run = [this, &params, &parts, rerank](int s) {
    Part& p = parts[s];
    SearchParams sub = params;
    sub.segments = p.refs;
    if (rerank) {
      sub.candidate_offsets = p.cand_offsets.data();
      sub.candidates = p.candidates.data();
    }
    p.results.resize(params.num_queries);
    p.status = shards_[s]->Search(sub, absl::MakeSpan(p.results), &p.timing);
  };
  // The caller runs the last part; the executors run the others.
  absl::BlockingCounter pending(static_cast<int>(active.size()) - 1);
  for (size_t i = 0; i + 1 < active.size(); ++i) {
    executors_[active[i]]->Run([&run, &pending, s = active[i]] {
      run(s);
      pending.DecrementCount();
    });
  }
  run(active.back());
  pending.Wait();

  SearchTiming t;
  for (int s : active) {
    MAXSIMD_RETURN_IF_ERROR(parts[s].status);
    t.h2d_ns = std::max(t.h2d_ns, parts[s].timing.h2d_ns);
    t.kernel_ns = std::max(t.kernel_ns, parts[s].timing.kernel_ns);
    t.topk_ns = std::max(t.topk_ns, parts[s].timing.topk_ns);
    t.d2h_ns = std::max(t.d2h_ns, parts[s].timing.d2h_ns);
    t.device_wait_ns =
        std::max(t.device_wait_ns, parts[s].timing.device_wait_ns);
  }
  const absl::Time merge_start = absl::Now();
  for (int q = 0; q < params.num_queries; ++q) {
    MergeQuery(parts, active, q, params.top_k[q], &results[q]);
  }
  t.topk_ns += absl::ToInt64Nanoseconds(absl::Now() - merge_start);
  if (timing != nullptr) *timing = t;
  return absl::OkStatus();
}

}  // namespace maxsimd
