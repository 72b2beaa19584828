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

// Q C^T: [lq, K], each cell an fp32 dot product over 16 independent
// partial sums (which the compiler turns into SIMD lanes).
MAXSIMD_TARGET_CLONES
std::vector<float> CentroidScores(const PlaidCodec& codec, const float* query,
                                  int64_t lq) {
  const int64_t k = codec.num_centroids;
  const int32_t dim = codec.dim;
  std::vector<float> out(static_cast<size_t>(lq * k));
  for (int64_t c = 0; c < k; ++c) {
    const float* centroid = codec.centroids.data() + c * dim;
    for (int64_t s = 0; s < lq; ++s) {
      const float* q = query + s * dim;
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
  return out;
}

}  // namespace

std::vector<DocRef> PlaidCandidates(const CorpusSnapshot& snapshot,
                                    const float* query, int64_t lq,
                                    const PlaidSearchParams& params) {
  std::vector<DocRef> out;
  if (snapshot.codec() == nullptr || lq == 0) return out;
  const PlaidCodec& codec = snapshot.codec()->codec();
  const int64_t k = codec.num_centroids;
  const std::vector<float> qc = CentroidScores(codec, query, lq);

  // 2. Each token's best cells.
  const int64_t probe = std::min<int64_t>(params.n_ivf_probe, k);
  std::vector<int32_t> cells;
  std::vector<int32_t> order(static_cast<size_t>(k));
  for (int64_t s = 0; s < lq; ++s) {
    const float* row = qc.data() + s * k;
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

}  // namespace maxsimd
