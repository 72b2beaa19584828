#include "kernels/plaid_bits.h"

#include <algorithm>
#include <cmath>

namespace maxsimd {

PlaidRowDecoder::PlaidRowDecoder(const float* bucket_weights, int nbits,
                                 int32_t dim)
    : per_byte_(8 / nbits),
      dim_(dim),
      row_bytes_(int64_t{dim} * nbits / 8),
      table_(static_cast<size_t>(256 * (8 / nbits))) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte = static_cast<uint8_t>(b);
    for (int s = 0; s < per_byte_; ++s) {
      table_[b * per_byte_ + s] =
          bucket_weights[PlaidResidualBucket(&byte, nbits, s)];
    }
  }
}

void PlaidRowDecoder::Decode(const float* centroid, const uint8_t* row,
                             float* out) const {
  for (int64_t j = 0; j < row_bytes_; ++j) {
    const float* r = &table_[row[j] * per_byte_];
    for (int s = 0; s < per_byte_; ++s) {
      const int64_t k = j * per_byte_ + s;
      out[k] = centroid[k] + r[s];
    }
  }
}

float PlaidLevels(const float* bucket_weights, int nbits, int8_t* levels) {
  const int n = 1 << nbits;
  float most = 0.f;
  for (int b = 0; b < n; ++b)
    most = std::max(most, std::fabs(bucket_weights[b]));
  const float step = most > 0.f ? most / 127.f : 1.f;
  for (int b = 0; b < n; ++b) {
    const float level = std::nearbyint(bucket_weights[b] / step);
    levels[b] = static_cast<int8_t>(std::clamp(level, -127.f, 127.f));
  }
  return step;
}

float PlaidOffsetLevels(const float* bucket_weights, int nbits, int8_t* levels,
                        float* offset) {
  const int n = 1 << nbits;
  float least = bucket_weights[0], most = bucket_weights[0];
  for (int b = 1; b < n; ++b) {
    least = std::min(least, bucket_weights[b]);
    most = std::max(most, bucket_weights[b]);
  }
  const float step = most > least ? (most - least) / 127.f : 1.f;
  for (int b = 0; b < n; ++b) {
    const float level = std::nearbyint((bucket_weights[b] - least) / step);
    levels[b] = static_cast<int8_t>(std::clamp(level, 0.f, 127.f));
  }
  *offset = least;
  return step;
}

float PlaidMmaLevels(const float* bucket_weights, int nbits, int8_t* levels,
                     float* offset) {
  if (nbits == 4) {
    return PlaidOffsetLevels(bucket_weights, nbits, levels, offset);
  }
  *offset = 0.f;
  return PlaidLevels(bucket_weights, nbits, levels);
}

float PlaidInverseNorm(const float* v, int32_t dim) {
  double sq = 0;
  for (int32_t k = 0; k < dim; ++k) sq += static_cast<double>(v[k]) * v[k];
  return 1.f / std::max(static_cast<float>(std::sqrt(sq)), 1e-12f);
}

}  // namespace maxsimd
