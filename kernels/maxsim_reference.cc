#include "kernels/maxsim_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/base/half.h"
#include "kernels/element.h"
#include "kernels/plaid_bits.h"
#include "kernels/quantize.h"

namespace maxsimd {
namespace {

// Cell (s, t) for a dense segment: <q_s, d_t> in fp64.
double DenseCell(const float* q, const SegmentView& seg, int64_t t) {
  double dot = 0.0;
  for (int32_t j = 0; j < seg.dim; ++j) {
    dot += static_cast<double>(q[j]) *
           LoadAsFloat(seg.tokens, seg.dtype, t * seg.dim + j);
  }
  return dot;
}

}  // namespace

double ReferenceScore(const float* query, int64_t lq, const SegmentView& seg,
                      int64_t doc, bool quantize_queries) {
  const int64_t begin = seg.cu_seqlens[doc];
  const int64_t end = seg.cu_seqlens[doc + 1];
  const bool int8 = seg.dtype == DType::kInt8;
  const int nbits = PlaidNbits(seg.dtype);
  const int8_t* codes = static_cast<const int8_t*>(seg.tokens);
  std::vector<float> q16(static_cast<size_t>(seg.dim));
  std::vector<int8_t> qq(static_cast<size_t>(seg.dim));
  // A PLAID document's rows, decoded in fp32 (plaid_bits.h).
  std::vector<float> plaid_rows;
  if (nbits != 0) {
    const PlaidRowDecoder decoder(seg.plaid.bucket_weights, nbits, seg.dim);
    plaid_rows.resize(static_cast<size_t>((end - begin) * seg.dim));
    for (int64_t t = begin; t < end; ++t) {
      decoder.DecodeToken(seg, t, plaid_rows.data() + (t - begin) * seg.dim);
    }
  }
  double total = 0.0;
  for (int64_t s = 0; s < lq; ++s) {
    const float* q = query + s * seg.dim;
    // The query row as an int8 segment scores it (backend.h).
    float q_scale = 0.f;
    if (int8 && quantize_queries) {
      q_scale = QuantizeInt8Row(q, seg.dim, qq.data());
    } else if (int8) {
      for (int32_t j = 0; j < seg.dim; ++j) {
        q16[j] = HalfToFloat(FloatToHalf(q[j]));
      }
    }
    double best = -std::numeric_limits<double>::infinity();
    for (int64_t t = begin; t < end; ++t) {
      double cell;
      if (nbits != 0) {
        const float* v = plaid_rows.data() + (t - begin) * seg.dim;
        double dot = 0.0;
        for (int32_t j = 0; j < seg.dim; ++j) {
          dot += static_cast<double>(q[j]) * v[j];
        }
        cell = static_cast<double>(seg.scales[t]) * dot;
      } else if (!int8) {
        cell = DenseCell(q, seg, t);
      } else if (quantize_queries) {
        int64_t dot = 0;
        for (int32_t j = 0; j < seg.dim; ++j) {
          dot += int64_t{qq[j]} * codes[t * seg.dim + j];
        }
        cell = static_cast<double>(q_scale) * seg.scales[t] *
               static_cast<double>(dot);
      } else {
        double dot = 0.0;
        for (int32_t j = 0; j < seg.dim; ++j) {
          dot += static_cast<double>(q16[j]) * codes[t * seg.dim + j];
        }
        cell = static_cast<double>(seg.scales[t]) * dot;
      }
      best = std::fmax(best, cell);
    }
    total += best;
  }
  return total;
}

std::vector<std::vector<ScoredDoc>> ReferenceSearch(const SearchParams& p) {
  return ReferenceSearchWith(
      p, [&p](int32_t q, const SegmentView& seg, int64_t doc) {
        return ReferenceScore(p.query_tokens + p.query_offsets[q] * p.dim,
                              p.query_offsets[q + 1] - p.query_offsets[q], seg,
                              doc, p.quantize_queries);
      });
}

std::vector<std::vector<ScoredDoc>> ReferenceSearchWith(
    const SearchParams& p, const ReferenceScorer& scorer) {
  std::vector<std::vector<ScoredDoc>> out(p.num_queries);
  for (int32_t q = 0; q < p.num_queries; ++q) {
    std::vector<ScoredDoc> all;
    auto score = [&](int32_t s, int64_t d) {
      const SegmentView& seg = p.segments[s].host;
      if (IsTombstoned(seg.tombstones, d)) return;
      all.push_back(
          {static_cast<float>(scorer(q, seg, d)), seg.base_index + d});
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
