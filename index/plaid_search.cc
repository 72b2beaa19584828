#include "index/plaid_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/base/target_clones.h"

namespace maxsimd {

PlaidSearchParams DefaultPlaidSearchParams(int32_t top_k) {
  PlaidSearchParams p;
  int32_t ndocs;
  if (top_k <= 10) {
    p.n_ivf_probe = 1;
    ndocs = 256;
  } else if (top_k <= 100) {
    p.n_ivf_probe = 2;
    ndocs = 1024;
  } else {
    p.n_ivf_probe = 4;
    ndocs = std::max(4 * top_k, 4096);
  }
  p.n_full_scores = std::max(ndocs / 4, top_k);
  return p;
}

namespace {

// Query tokens per block of the product: a block's rows (16 KiB at dim
// 128) stay in L1 while the centroids stream past them, once per block.
constexpr int64_t kTokenBlock = 32;

// Rows [32 b0, 32 b1) of Q C^T into out ([rows, K]). Each cell is an fp32
// dot product over 16 independent partial sums (which the compiler turns
// into SIMD lanes), computed the same way in any block. Every product and
// sum is rounded on its own: this file compiles without fused
// multiply-adds (index/CMakeLists.txt), so the cells are the same on every
// host and equal the GPU's (Backend::ScoreCentroids, kernels/
// plaid_centroids.h) bit for bit, so a batch gets the same candidates
// wherever its product ran.
MAXSIMD_TARGET_CLONES
void ScoreTokenBlocks(const PlaidCodec& codec, const float* tokens,
                      int64_t rows, int64_t b0, int64_t b1, float* out) {
  const int64_t k = codec.num_centroids;
  const int32_t dim = codec.dim;
  for (int64_t s0 = b0 * kTokenBlock; s0 < std::min(rows, b1 * kTokenBlock);
       s0 += kTokenBlock) {
    const int64_t s1 = std::min(rows, s0 + kTokenBlock);
    for (int64_t c = 0; c < k; ++c) {
      const float* centroid = codec.centroids.data() + c * dim;
      for (int64_t s = s0; s < s1; ++s) {
        const float* q = tokens + s * dim;
        constexpr int kLanes = 16;
        float acc[kLanes] = {};
        const int32_t main = dim - dim % kLanes;
        for (int32_t j = 0; j < main; j += kLanes) {
          for (int l = 0; l < kLanes; ++l) acc[l] += q[j + l] * centroid[j + l];
        }
        float dot = 0.f;
        for (int l = 0; l < kLanes; ++l) dot += acc[l];
        for (int32_t j = main; j < dim; ++j) dot += q[j] * centroid[j];
        out[s * k + c] = dot;
      }
    }
  }
}

}  // namespace

std::vector<float> PlaidCentroidScores(const PlaidCodec& codec,
                                       const float* tokens, int64_t rows,
                                       ThreadPool* pool) {
  std::vector<float> out(static_cast<size_t>(rows * codec.num_centroids));
  const int64_t blocks = (rows + kTokenBlock - 1) / kTokenBlock;
  if (pool == nullptr || blocks < 2) {
    ScoreTokenBlocks(codec, tokens, rows, 0, blocks, out.data());
  } else {
    pool->ParallelFor(blocks, 1, [&](int, int64_t b0, int64_t b1) {
      ScoreTokenBlocks(codec, tokens, rows, b0, b1, out.data());
    });
  }
  return out;
}

namespace {

// Steps 2 to 4 for one query, given its rows of Q C^T: qc [lq, k].
std::vector<DocRef> CandidatesFromRows(const CorpusSnapshot& snapshot,
                                       const float* qc, int64_t lq, int64_t k,
                                       const PlaidSearchParams& params) {
  std::vector<DocRef> out;
  if (lq == 0) return out;

  // 2. Each token's best cells.
  const int64_t probe = std::min<int64_t>(params.n_ivf_probe, k);
  std::vector<int32_t> cells;
  std::vector<int32_t> order(static_cast<size_t>(k));
  for (int64_t s = 0; s < lq; ++s) {
    const float* row = qc + s * k;
    for (int64_t c = 0; c < k; ++c) order[c] = static_cast<int32_t>(c);
    std::partial_sort(order.begin(), order.begin() + probe, order.end(),
                      [row](int32_t a, int32_t b) {
                        return row[a] != row[b] ? row[a] > row[b] : a < b;
                      });
    cells.insert(cells.end(), order.begin(), order.begin() + probe);
  }
  std::sort(cells.begin(), cells.end());
  cells.erase(std::unique(cells.begin(), cells.end()), cells.end());

  // 3. The live documents of those cells, per segment.
  struct Candidate {
    float approx = 0.f;
    int64_t index = 0;  // internal index, for ties
    DocRef ref;
  };
  std::vector<Candidate> found;
  for (size_t si = 0; si < snapshot.segments().size(); ++si) {
    const Segment& seg = *snapshot.segments()[si];
    const TombstoneSet* dead = snapshot.tombstones(si);
    std::vector<int32_t> docs;
    for (int32_t cell : cells) {
      auto [lo, hi] = std::equal_range(
          seg.ivf().begin(), seg.ivf().end(), Segment::IvfEntry{cell, 0},
          [](const Segment::IvfEntry& a, const Segment::IvfEntry& b) {
            return a.code < b.code;
          });
      for (auto it = lo; it != hi; ++it) docs.push_back(it->doc);
    }
    std::sort(docs.begin(), docs.end());
    docs.erase(std::unique(docs.begin(), docs.end()), docs.end());
    // 4. Centroid-only scores.
    const SegmentData& d = seg.data();
    std::vector<float> best(static_cast<size_t>(lq));
    for (int32_t doc : docs) {
      if (dead != nullptr && dead->Contains(doc)) continue;
      std::fill(best.begin(), best.end(),
                -std::numeric_limits<float>::infinity());
      for (int64_t t = d.cu_seqlens[doc]; t < d.cu_seqlens[doc + 1]; ++t) {
        const int32_t code = d.codes[t];
        for (int64_t s = 0; s < lq; ++s) {
          best[s] = std::max(best[s], qc[s * k + code]);
        }
      }
      float approx = 0.f;
      for (float b : best) approx += b;
      found.push_back({approx, seg.base_index() + doc,
                       DocRef{static_cast<int32_t>(si), doc}});
    }
  }
  const size_t keep =
      std::min(found.size(), static_cast<size_t>(params.n_full_scores));
  std::partial_sort(found.begin(), found.begin() + keep, found.end(),
                    [](const Candidate& a, const Candidate& b) {
                      return a.approx != b.approx ? a.approx > b.approx
                                                  : a.index < b.index;
                    });
  out.reserve(keep);
  for (size_t i = 0; i < keep; ++i) out.push_back(found[i].ref);
  return out;
}

}  // namespace

std::vector<std::vector<DocRef>> PlaidCandidatesFromScores(
    const CorpusSnapshot& snapshot, absl::Span<const PlaidQuery> queries,
    const float* scores, ThreadPool* pool) {
  std::vector<std::vector<DocRef>> out(queries.size());
  if (snapshot.codec() == nullptr) return out;
  const int64_t k = snapshot.codec()->codec().num_centroids;
  std::vector<int64_t> first_row(queries.size() + 1, 0);
  for (size_t i = 0; i < queries.size(); ++i) {
    first_row[i + 1] = first_row[i] + queries[i].lq;
  }
  auto run = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const PlaidQuery& q = queries[i];
      out[i] = CandidatesFromRows(snapshot, scores + first_row[i] * k, q.lq, k,
                                  q.params);
    }
  };
  const int64_t n = static_cast<int64_t>(queries.size());
  if (pool == nullptr || n < 2) {
    run(0, n);
  } else {
    pool->ParallelFor(n, 1, [&](int, int64_t i0, int64_t i1) { run(i0, i1); });
  }
  return out;
}

namespace {

// Step 1 on product.backend: true with `scores` filled, false where the
// backend has no such kernel (the host runs it then), or its error.
absl::StatusOr<bool> ScoreOnBackend(const CorpusSnapshot& snapshot,
                                    const PlaidProduct& product,
                                    const float* tokens, int64_t rows,
                                    std::vector<float>* scores) {
  Backend* backend = product.backend;
  if (backend == nullptr || !backend->ScoresCentroids()) return false;
  const PlaidCodec& codec = snapshot.codec()->codec();
  const int shard =
      snapshot.segments().empty() ? 0 : snapshot.segments().front()->shard();
  scores->resize(static_cast<size_t>(rows * codec.num_centroids));
  const absl::Status st = backend->ScoreCentroids(
      shard, snapshot.codec()->ResidentTables(shard), codec.dim,
      absl::MakeConstSpan(tokens, static_cast<size_t>(rows * codec.dim)),
      absl::MakeSpan(*scores));
  if (st.code() == absl::StatusCode::kUnimplemented) return false;
  if (!st.ok()) return st;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<DocRef>>> PlaidCandidatesBatch(
    const CorpusSnapshot& snapshot, absl::Span<const PlaidQuery> queries,
    const PlaidProduct& product, PlaidBatchStats* stats) {
  if (stats != nullptr) *stats = PlaidBatchStats{};
  int64_t rows = 0;
  for (const PlaidQuery& q : queries) rows += q.lq;
  if (snapshot.codec() == nullptr || rows == 0) {
    return std::vector<std::vector<DocRef>>(queries.size());
  }
  const PlaidCodec& codec = snapshot.codec()->codec();
  // The batch's tokens stacked [rows, dim], unless one query holds them all.
  std::vector<float> stacked;
  const float* tokens = nullptr;
  for (const PlaidQuery& q : queries) {
    if (q.lq == rows) tokens = q.tokens;
  }
  if (tokens == nullptr) {
    stacked.reserve(static_cast<size_t>(rows * codec.dim));
    for (const PlaidQuery& q : queries) {
      if (q.lq == 0) continue;  // its tokens may be null
      stacked.insert(stacked.end(), q.tokens, q.tokens + q.lq * codec.dim);
    }
    tokens = stacked.data();
  }
  std::vector<float> scores;
  absl::StatusOr<bool> on_device =
      ScoreOnBackend(snapshot, product, tokens, rows, &scores);
  if (!on_device.ok()) return on_device.status();
  ThreadPool* pool = product.host_pool ? product.host_pool() : nullptr;
  if (!*on_device) scores = PlaidCentroidScores(codec, tokens, rows, pool);
  if (stats != nullptr) {
    stats->centroid_products = 1;
    stats->device_products = *on_device ? 1 : 0;
  }
  return PlaidCandidatesFromScores(snapshot, queries, scores.data(), pool);
}

std::vector<DocRef> PlaidCandidates(const CorpusSnapshot& snapshot,
                                    const float* query, int64_t lq,
                                    const PlaidSearchParams& params) {
  const PlaidQuery q{query, lq, params};
  // The host product cannot fail.
  return std::move(PlaidCandidatesBatch(snapshot, absl::MakeConstSpan(&q, 1))
                       .value()
                       .front());
}

}  // namespace maxsimd
