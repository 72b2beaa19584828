#include "kernels/maxsim_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/element.h"

namespace maxsimd {

double ReferenceScore(const float* query, int64_t lq, const SegmentView& seg,
                      int64_t doc) {
  const int64_t begin = seg.cu_seqlens[doc];
  const int64_t end = seg.cu_seqlens[doc + 1];
  double total = 0.0;
  for (int64_t s = 0; s < lq; ++s) {
    double best = -std::numeric_limits<double>::infinity();
    for (int64_t t = begin; t < end; ++t) {
      double dot = 0.0;
      for (int32_t j = 0; j < seg.dim; ++j) {
        dot += static_cast<double>(query[s * seg.dim + j]) *
               LoadAsFloat(seg.tokens, seg.dtype, t * seg.dim + j);
      }
      best = std::fmax(best, dot);
    }
    total += best;
  }
  return total;
}

std::vector<std::vector<ScoredDoc>> ReferenceSearch(const SearchParams& p) {
  std::vector<std::vector<ScoredDoc>> out(p.num_queries);
  for (int32_t q = 0; q < p.num_queries; ++q) {
    const float* query = p.query_tokens + p.query_offsets[q] * p.dim;
    const int64_t lq = p.query_offsets[q + 1] - p.query_offsets[q];
    std::vector<ScoredDoc> all;
    auto score = [&](int32_t s, int64_t d) {
      const SegmentView& seg = p.segments[s].host;
      if (IsTombstoned(seg.tombstones, d)) return;
      all.push_back({static_cast<float>(ReferenceScore(query, lq, seg, d)),
                     seg.base_index + d});
    };
    if (p.candidate_offsets == nullptr) {
      for (size_t s = 0; s < p.segments.size(); ++s) {
        for (int64_t d = 0; d < p.segments[s].host.num_docs; ++d) {
          score(static_cast<int32_t>(s), d);
        }
      }
    } else {
      for (int64_t c = p.candidate_offsets[q]; c < p.candidate_offsets[q + 1];
           ++c) {
        score(p.candidates[c].segment, p.candidates[c].doc);
      }
    }
    std::sort(all.begin(), all.end(), RanksBefore);
    if (static_cast<int64_t>(all.size()) > p.top_k[q]) all.resize(p.top_k[q]);
    out[q] = std::move(all);
  }
  return out;
}

}  // namespace maxsimd
