// A PLAID segment built in host memory for kernel tests: a random codec
// (unit centroids, ascending bucket weights), random codes and residual
// bytes, and each row's scale (its inverse decoded norm, as a normalising
// corpus stores it, or 1).
#ifndef MAXSIMD_TESTS_SUPPORT_PLAID_SEGMENT_H_
#define MAXSIMD_TESTS_SUPPORT_PLAID_SEGMENT_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/base/half.h"
#include "kernels/plaid_bits.h"
#include "kernels/types.h"

namespace maxsimd::testing {

struct PlaidSegment {
  int32_t dim = 0;
  int nbits = 0;
  std::vector<float> centroids;  // [num_centroids, dim]
  std::vector<uint16_t> centroids_f16;
  std::vector<float> bucket_weights;  // [1 << nbits], ascending
  std::vector<int32_t> codes;         // [tokens]
  std::vector<uint8_t> residuals;     // [tokens, dim * nbits / 8]
  std::vector<float> scales;          // [tokens]
  std::vector<int64_t> cu_seqlens;    // [docs + 1]
  std::vector<uint32_t> tombstones;   // empty: nothing deleted

  int64_t num_centroids() const {
    return static_cast<int64_t>(centroids.size()) / dim;
  }
  int64_t num_tokens() const { return cu_seqlens.back(); }

  // Marks document `doc` deleted.
  void Delete(int64_t doc) {
    const int64_t docs = static_cast<int64_t>(cu_seqlens.size()) - 1;
    tombstones.resize(static_cast<size_t>((docs + 31) / 32), 0u);
    tombstones[doc >> 5] |= 1u << (doc & 31);
  }

  // The host view, `base_index` as given.
  SegmentView View(int64_t base_index = 0) const {
    SegmentView v;
    v.tokens = residuals.data();
    v.scales = scales.data();
    v.codes = codes.data();
    v.plaid.centroids = centroids.data();
    v.plaid.centroids_f16 = centroids_f16.data();
    v.plaid.bucket_weights = bucket_weights.data();
    v.plaid.num_centroids = num_centroids();
    v.cu_seqlens = cu_seqlens.data();
    v.tombstones = tombstones.empty() ? nullptr : tombstones.data();
    v.num_docs = static_cast<int64_t>(cu_seqlens.size()) - 1;
    v.num_tokens = num_tokens();
    v.dim = dim;
    v.dtype = PlaidDType(nbits);
    v.base_index = base_index;
    return v;
  }
};

// Documents of the given token counts over `num_centroids` random unit
// centroids; bucket weights spread over about +-0.1 (a residual's scale
// in a trained codec); scales normalise each row when `normalize`.
inline PlaidSegment MakePlaidSegment(int32_t dim, int nbits,
                                     int64_t num_centroids,
                                     const std::vector<int64_t>& doc_lens,
                                     uint32_t seed, bool normalize = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  PlaidSegment s;
  s.dim = dim;
  s.nbits = nbits;
  s.centroids.resize(static_cast<size_t>(num_centroids * dim));
  for (int64_t c = 0; c < num_centroids; ++c) {
    float* row = s.centroids.data() + c * dim;
    double sq = 0;
    for (int32_t k = 0; k < dim; ++k) {
      row[k] = normal(rng);
      sq += double{row[k]} * row[k];
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(sq));
    for (int32_t k = 0; k < dim; ++k) row[k] *= inv;
  }
  for (float c : s.centroids) s.centroids_f16.push_back(FloatToHalf(c));
  const int buckets = 1 << nbits;
  for (int b = 0; b < buckets; ++b) {
    s.bucket_weights.push_back(0.05f * normal(rng) +
                               0.2f * (b + 0.5f) / buckets - 0.1f);
  }
  std::sort(s.bucket_weights.begin(), s.bucket_weights.end());
  s.cu_seqlens.push_back(0);
  for (int64_t len : doc_lens)
    s.cu_seqlens.push_back(s.cu_seqlens.back() + len);
  const int64_t tokens = s.cu_seqlens.back();
  const int64_t row_bytes = int64_t{dim} * nbits / 8;
  std::uniform_int_distribution<int32_t> code(
      0, static_cast<int32_t>(num_centroids - 1));
  std::uniform_int_distribution<int> byte(0, 255);
  s.codes.resize(static_cast<size_t>(tokens));
  s.residuals.resize(static_cast<size_t>(tokens * row_bytes));
  for (auto& c : s.codes) c = code(rng);
  for (auto& b : s.residuals) b = static_cast<uint8_t>(byte(rng));
  const PlaidRowDecoder decoder(s.bucket_weights.data(), nbits, dim);
  std::vector<float> v(static_cast<size_t>(dim));
  s.scales.resize(static_cast<size_t>(tokens), 1.f);
  for (int64_t t = 0; t < tokens; ++t) {
    decoder.DecodeToken(s.View(), t, v.data());
    if (normalize) s.scales[t] = PlaidInverseNorm(v.data(), dim);
  }
  return s;
}

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_PLAID_SEGMENT_H_
