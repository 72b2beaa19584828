#include "kernels/maxsim_cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/element.h"
#include "kernels/status_macros.h"
#include "kernels/topk_cpu.h"

namespace maxsimd {
namespace {

// A view of host memory; `held` counts the bytes of its backend's live
// buffers.
class HostBuffer final : public ResidentBuffer {
 public:
  HostBuffer(const void* data, size_t bytes,
             std::shared_ptr<std::atomic<int64_t>> held)
      : data_(data), bytes_(bytes), held_(std::move(held)) {
    held_->fetch_add(static_cast<int64_t>(bytes_));
  }
  ~HostBuffer() override { held_->fetch_sub(static_cast<int64_t>(bytes_)); }
  const void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  const void* data_;
  size_t bytes_;
  std::shared_ptr<std::atomic<int64_t>> held_;
};

// Dot product of two fp32 rows with 16 independent partial sums, which the
// compiler turns into SIMD lanes without reassociating a single sum.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=haswell", "default")))
#endif
float MaxSimAgainstDoc(const float* query, int64_t lq, const float* doc,
                       int64_t ld, int32_t dim, float* row_max) {
  constexpr int kLanes = 16;
  for (int64_t s = 0; s < lq; ++s) {
    row_max[s] = -std::numeric_limits<float>::infinity();
  }
  const int32_t main = dim - dim % kLanes;
  for (int64_t t = 0; t < ld; ++t) {
    const float* d = doc + t * dim;
    for (int64_t s = 0; s < lq; ++s) {
      const float* q = query + s * dim;
      float acc[kLanes] = {};
      for (int32_t j = 0; j < main; j += kLanes) {
        for (int l = 0; l < kLanes; ++l) acc[l] += q[j + l] * d[j + l];
      }
      float dot = 0.f;
      for (int l = 0; l < kLanes; ++l) dot += acc[l];
      for (int32_t j = main; j < dim; ++j) dot += q[j] * d[j];
      row_max[s] = std::fmax(row_max[s], dot);
    }
  }
  float total = 0.f;
  for (int64_t s = 0; s < lq; ++s) total += row_max[s];
  return total;
}

// Per-worker scratch: one document decoded to fp32, and the running maxima.
struct Scratch {
  std::vector<float> doc;
  std::vector<float> row_max;
};

// Decodes document `d` of `seg` into scratch and returns its token count.
int64_t DecodeDoc(const SegmentView& seg, int64_t d, Scratch* scratch) {
  const int64_t begin = seg.cu_seqlens[d];
  const int64_t ld = seg.cu_seqlens[d + 1] - begin;
  const size_t need = static_cast<size_t>(ld * seg.dim);
  if (scratch->doc.size() < need) scratch->doc.resize(need);
  ConvertToFloat(seg.tokens, seg.dtype, begin * seg.dim, ld * seg.dim,
                 scratch->doc.data());
  return ld;
}

float ScoreDecoded(const SearchParams& p, int32_t q, const Scratch& scratch,
                   int64_t ld, std::vector<float>* row_max) {
  const int64_t q0 = p.query_offsets[q];
  const int64_t lq = p.query_offsets[q + 1] - q0;
  if (row_max->size() < static_cast<size_t>(lq)) row_max->resize(lq);
  return MaxSimAgainstDoc(p.query_tokens + q0 * p.dim, lq, scratch.doc.data(),
                          ld, p.dim, row_max->data());
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    const CpuBackendOptions& options) {
  return std::unique_ptr<CpuBackend>(new CpuBackend(options));
}

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options), pool_(options.num_threads) {}

absl::StatusOr<std::unique_ptr<ResidentBuffer>> CpuBackend::Upload(
    const void* host, size_t bytes) {
  absl::MutexLock lock(&upload_mu_);
  MAXSIMD_RETURN_IF_ERROR(CheckCorpusBudget(name(), corpus_bytes_->load(),
                                            static_cast<int64_t>(bytes),
                                            options_.corpus_budget_bytes));
  return std::unique_ptr<ResidentBuffer>(
      new HostBuffer(host, bytes, corpus_bytes_));
}

absl::StatusOr<std::unique_ptr<ResidentBuffer>> CpuBackend::Pin(
    const void* host, size_t bytes) {
  absl::MutexLock lock(&upload_mu_);
  MAXSIMD_RETURN_IF_ERROR(
      CheckBudget("Pin", "--pinned_budget_bytes", name(), pinned_bytes_->load(),
                  static_cast<int64_t>(bytes), options_.pinned_budget_bytes));
  return std::unique_ptr<ResidentBuffer>(
      new HostBuffer(host, bytes, pinned_bytes_));
}

absl::Status CpuBackend::Search(const SearchParams& params,
                                absl::Span<std::vector<ScoredDoc>> results,
                                SearchTiming* timing) {
  MAXSIMD_RETURN_IF_ERROR(
      ValidateSearchParams(params, options_.limits, results.size()));
  const int64_t start = NowNs();
  absl::Status status = params.candidate_offsets == nullptr
                            ? Scan(params, results)
                            : Gather(params, results);
  if (timing != nullptr) timing->kernel_ns = NowNs() - start;
  return status;
}

absl::Status CpuBackend::Scan(const SearchParams& p,
                              absl::Span<std::vector<ScoredDoc>> results) {
  const int workers = pool_.size();
  // heaps[w * num_queries + q]: worker w's running top-k for query q.
  std::vector<TopKAccumulator> heaps(static_cast<size_t>(workers) *
                                     p.num_queries);
  for (int w = 0; w < workers; ++w) {
    for (int32_t q = 0; q < p.num_queries; ++q) {
      heaps[w * p.num_queries + q].Reset(p.top_k[q]);
    }
  }
  std::vector<Scratch> scratch(workers);
  // One flat range over the documents of every segment.
  std::vector<int64_t> seg_start(p.segments.size() + 1, 0);
  for (size_t s = 0; s < p.segments.size(); ++s) {
    seg_start[s + 1] = seg_start[s] + p.segments[s].resident.num_docs;
  }
  pool_.ParallelFor(
      seg_start.back(), 16, [&](int w, int64_t begin, int64_t end) {
        size_t s = std::upper_bound(seg_start.begin(), seg_start.end(), begin) -
                   seg_start.begin() - 1;
        for (int64_t i = begin; i < end; ++i) {
          while (i >= seg_start[s + 1]) ++s;
          const SegmentView& seg = p.segments[s].resident;
          const int64_t d = i - seg_start[s];
          if (IsTombstoned(seg.tombstones, d)) continue;
          const int64_t ld = DecodeDoc(seg, d, &scratch[w]);
          for (int32_t q = 0; q < p.num_queries; ++q) {
            const float score =
                ScoreDecoded(p, q, scratch[w], ld, &scratch[w].row_max);
            heaps[w * p.num_queries + q].Push({score, seg.base_index + d});
          }
        }
      });
  for (int32_t q = 0; q < p.num_queries; ++q) {
    TopKAccumulator& merged = heaps[q];
    for (int w = 1; w < workers; ++w)
      merged.Merge(heaps[w * p.num_queries + q]);
    results[q] = merged.TakeSorted();
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Gather(const SearchParams& p,
                                absl::Span<std::vector<ScoredDoc>> results) {
  const int64_t total = p.candidate_offsets[p.num_queries];
  // Scores of every (query, candidate) pair; bounded by
  // limits.max_batch_candidates, never by corpus size.
  std::vector<float> scores(static_cast<size_t>(total));
  std::vector<int32_t> owner(static_cast<size_t>(total));
  for (int32_t q = 0; q < p.num_queries; ++q) {
    std::fill(owner.begin() + p.candidate_offsets[q],
              owner.begin() + p.candidate_offsets[q + 1], q);
  }
  std::vector<Scratch> scratch(pool_.size());
  pool_.ParallelFor(total, 8, [&](int w, int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const DocRef& r = p.candidates[c];
      const SegmentView& seg = p.segments[r.segment].resident;
      if (IsTombstoned(seg.tombstones, r.doc)) continue;
      const int64_t ld = DecodeDoc(seg, r.doc, &scratch[w]);
      scores[c] =
          ScoreDecoded(p, owner[c], scratch[w], ld, &scratch[w].row_max);
    }
  });
  for (int32_t q = 0; q < p.num_queries; ++q) {
    TopKAccumulator heap(p.top_k[q]);
    for (int64_t c = p.candidate_offsets[q]; c < p.candidate_offsets[q + 1];
         ++c) {
      const DocRef& r = p.candidates[c];
      const SegmentView& seg = p.segments[r.segment].resident;
      if (IsTombstoned(seg.tombstones, r.doc)) continue;
      heap.Push({scores[c], seg.base_index + r.doc});
    }
    results[q] = heap.TakeSorted();
  }
  return absl::OkStatus();
}

}  // namespace maxsimd
