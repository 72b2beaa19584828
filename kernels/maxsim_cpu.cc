#include "kernels/maxsim_cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base/fault_injection.h"
#include "kernels/base/half.h"
#include "kernels/base/status_macros.h"
#include "kernels/base/target_clones.h"
#include "kernels/element.h"
#include "kernels/plaid_bits.h"
#include "kernels/quantize.h"
#include "kernels/topk_cpu.h"

namespace maxsimd {

// What one search prepares once and its workers share read-only: the query
// rows in the forms int8 segments score against (SearchParams: fp16-rounded,
// or quantised; empty when no segment is int8), and a row decoder per PLAID
// segment.
struct SearchPrep {
  std::vector<float> fp16;    // [rows, dim], each value rounded to fp16
  std::vector<int8_t> codes;  // [rows, dim]
  std::vector<float> scales;  // [rows]
  // Parallel to params.segments; null for a segment that is not PLAID.
  std::vector<std::unique_ptr<PlaidRowDecoder>> plaid;
};

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

// MaxSim of `lq` fp32 query rows against `ld` fp32 document rows. Each dot
// product runs over 16 independent partial sums, which the compiler turns
// into SIMD lanes without reassociating a single sum. With `doc_scales`
// (int8 documents decoded to their codes) cell (s, t) is
// doc_scales[t] * dot, else the dot itself.
MAXSIMD_TARGET_CLONES
float MaxSimAgainstDoc(const float* query, int64_t lq, const float* doc,
                       const float* doc_scales, int64_t ld, int32_t dim,
                       float* row_max) {
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
      if (doc_scales != nullptr) dot = doc_scales[t] * dot;
      row_max[s] = std::fmax(row_max[s], dot);
    }
  }
  float total = 0.f;
  for (int64_t s = 0; s < lq; ++s) total += row_max[s];
  return total;
}

// |int8 dot| <= 127^2 * dim stays below 2^31 up to this width.
constexpr int32_t kMaxInt8Dim = 1 << 17;

// MaxSim of `lq` quantised query rows against `ld` int8 document rows:
// cell (s, t) = query_scales[s] * (doc_scales[t] * float(int32 dot)), the
// dot exact in int32 (dim <= kMaxInt8Dim).
MAXSIMD_TARGET_CLONES
float MaxSimInt8AgainstDoc(const int8_t* query, const float* query_scales,
                           int64_t lq, const int8_t* doc,
                           const float* doc_scales, int64_t ld, int32_t dim,
                           float* row_max) {
  for (int64_t s = 0; s < lq; ++s) {
    row_max[s] = -std::numeric_limits<float>::infinity();
  }
  for (int64_t t = 0; t < ld; ++t) {
    const int8_t* d = doc + t * dim;
    for (int64_t s = 0; s < lq; ++s) {
      const int8_t* q = query + s * dim;
      int32_t dot = 0;
      for (int32_t j = 0; j < dim; ++j) {
        dot += static_cast<int32_t>(q[j]) * static_cast<int32_t>(d[j]);
      }
      const float cell =
          query_scales[s] * (doc_scales[t] * static_cast<float>(dot));
      row_max[s] = std::fmax(row_max[s], cell);
    }
  }
  float total = 0.f;
  for (int64_t s = 0; s < lq; ++s) total += row_max[s];
  return total;
}

SearchPrep PrepareSearch(const SearchParams& p) {
  SearchPrep out;
  bool any = false;
  out.plaid.resize(p.segments.size());
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const SegmentView& v = p.segments[s].resident;
    any |= v.dtype == DType::kInt8;
    if (PlaidNbits(v.dtype) != 0) {
      out.plaid[s] = std::make_unique<PlaidRowDecoder>(
          v.plaid.bucket_weights, PlaidNbits(v.dtype), v.dim);
    }
  }
  if (!any || p.num_queries == 0) return out;
  const int64_t rows = p.query_offsets[p.num_queries];
  const size_t n = static_cast<size_t>(rows) * p.dim;
  if (p.quantize_queries) {
    out.codes.resize(n);
    out.scales.resize(static_cast<size_t>(rows));
    QuantizeInt8Rows(p.query_tokens, rows, p.dim, out.codes.data(),
                     out.scales.data());
  } else {
    out.fp16.resize(n);
    for (size_t i = 0; i < n; ++i) {
      out.fp16[i] = HalfToFloat(FloatToHalf(p.query_tokens[i]));
    }
  }
  return out;
}

// Per-worker scratch: one document decoded to fp32, and the running maxima.
struct Scratch {
  std::vector<float> doc;
  std::vector<float> row_max;
};

// Document `d` of a segment, ready to score: fp32 rows (a dense document
// decoded, an int8 one's codes as fp32 with its scales, or a PLAID one
// decoded with its scales), or, when int8 queries score it, its int8 rows
// and scales in place.
struct DocRows {
  const float* f32 = nullptr;
  const int8_t* i8 = nullptr;
  const float* scales = nullptr;  // int8 and PLAID only
  bool int8 = false;              // scored with fp16-rounded queries
  int64_t ld = 0;
};

DocRows PrepareDoc(const SearchParams& p, const SearchPrep& prep, int32_t s,
                   int64_t d, Scratch* scratch) {
  const SegmentView& seg = p.segments[s].resident;
  DocRows rows;
  const int64_t begin = seg.cu_seqlens[d];
  rows.ld = seg.cu_seqlens[d + 1] - begin;
  if (seg.dtype == DType::kInt8) {
    rows.scales = seg.scales + begin;
    rows.int8 = true;
    if (p.quantize_queries) {
      rows.i8 = static_cast<const int8_t*>(seg.tokens) + begin * seg.dim;
      return rows;
    }
  }
  const size_t need = static_cast<size_t>(rows.ld * seg.dim);
  if (scratch->doc.size() < need) scratch->doc.resize(need);
  if (const PlaidRowDecoder* decoder = prep.plaid[s].get()) {
    rows.scales = seg.scales + begin;
    for (int64_t t = 0; t < rows.ld; ++t) {
      decoder->DecodeToken(seg, begin + t, scratch->doc.data() + t * seg.dim);
    }
  } else {
    ConvertToFloat(seg.tokens, seg.dtype, begin * seg.dim, rows.ld * seg.dim,
                   scratch->doc.data());
  }
  rows.f32 = scratch->doc.data();
  return rows;
}

float ScoreDoc(const SearchParams& p, const SearchPrep& prep, int32_t q,
               const DocRows& doc, std::vector<float>* row_max) {
  const int64_t q0 = p.query_offsets[q];
  const int64_t lq = p.query_offsets[q + 1] - q0;
  if (row_max->size() < static_cast<size_t>(lq)) row_max->resize(lq);
  if (doc.i8 != nullptr) {
    return MaxSimInt8AgainstDoc(prep.codes.data() + q0 * p.dim,
                                prep.scales.data() + q0, lq, doc.i8, doc.scales,
                                doc.ld, p.dim, row_max->data());
  }
  const float* query = doc.int8 ? prep.fp16.data() : p.query_tokens;
  return MaxSimAgainstDoc(query + q0 * p.dim, lq, doc.f32, doc.scales, doc.ld,
                          p.dim, row_max->data());
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What fault::kCpuAlloc makes of Upload() or Pin(): the error of an
// allocation that does not fit.
absl::Status InjectedAllocFailure(const char* what, size_t bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "CpuBackend::", what, ": ", bytes,
      " bytes do not fit in host memory (fault point ", fault::kCpuAlloc, ")"));
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
  if (fault::kEnabled && !healthy_.load()) {
    return absl::UnavailableError("CpuBackend::Upload: the backend has failed");
  }
  absl::MutexLock lock(&upload_mu_);
  MAXSIMD_RETURN_IF_ERROR(CheckCorpusBudget(name(), corpus_bytes_->load(),
                                            static_cast<int64_t>(bytes),
                                            options_.corpus_budget_bytes));
  if (MAXSIMD_FAULT_POINT(fault::kCpuAlloc)) {
    return InjectedAllocFailure("Upload", bytes);
  }
  return std::unique_ptr<ResidentBuffer>(
      new HostBuffer(host, bytes, corpus_bytes_));
}

absl::StatusOr<std::unique_ptr<ResidentBuffer>> CpuBackend::Pin(
    const void* host, size_t bytes) {
  if (fault::kEnabled && !healthy_.load()) {
    return absl::UnavailableError("CpuBackend::Pin: the backend has failed");
  }
  absl::MutexLock lock(&upload_mu_);
  MAXSIMD_RETURN_IF_ERROR(
      CheckBudget("Pin", "--pinned_budget_bytes", name(), pinned_bytes_->load(),
                  static_cast<int64_t>(bytes), options_.pinned_budget_bytes));
  if (MAXSIMD_FAULT_POINT(fault::kCpuAlloc)) {
    return InjectedAllocFailure("Pin", bytes);
  }
  return std::unique_ptr<ResidentBuffer>(
      new HostBuffer(host, bytes, pinned_bytes_));
}

absl::Status CpuBackend::Search(const SearchParams& params,
                                absl::Span<std::vector<ScoredDoc>> results,
                                SearchTiming* timing) {
  if (fault::kEnabled && !healthy_.load()) {
    return absl::UnavailableError("CpuBackend::Search: the backend has failed");
  }
  MAXSIMD_RETURN_IF_ERROR(
      ValidateSearchParams(params, options_.limits, results.size()));
  if (params.quantize_queries && params.dim > kMaxInt8Dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("Search: dim is ", params.dim,
                     "; int8 dot products of quantised "
                     "queries stay exact in int32 up to dim ",
                     kMaxInt8Dim));
  }
  const int64_t start = NowNs();
  const SearchPrep prep = PrepareSearch(params);
  absl::Status status = params.candidate_offsets == nullptr
                            ? Scan(params, prep, results)
                            : Gather(params, prep, results);
  if (timing != nullptr) timing->kernel_ns = NowNs() - start;
  if (status.ok() && MAXSIMD_FAULT_POINT(fault::kCpuSearch)) {
    // As the GPU backend after a kernel fault: the batch fails, and so does
    // every later call (Sticky in gpu/gpu_backend.cu).
    healthy_.store(false);
    return absl::UnavailableError(
        absl::StrCat("CpuBackend::Search: the search of ", params.num_queries,
                     " queries failed (fault point ", fault::kCpuSearch,
                     "); the backend is unhealthy"));
  }
  return status;
}

absl::Status CpuBackend::Scan(const SearchParams& p, const SearchPrep& prep,
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
          const DocRows doc =
              PrepareDoc(p, prep, static_cast<int32_t>(s), d, &scratch[w]);
          for (int32_t q = 0; q < p.num_queries; ++q) {
            const float score = ScoreDoc(p, prep, q, doc, &scratch[w].row_max);
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

absl::Status CpuBackend::Gather(const SearchParams& p, const SearchPrep& prep,
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
      const DocRows doc = PrepareDoc(p, prep, r.segment, r.doc, &scratch[w]);
      scores[c] = ScoreDoc(p, prep, owner[c], doc, &scratch[w].row_max);
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
