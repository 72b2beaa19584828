#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace maxsimd {

float QuantizeInt8Row(const float* x, int32_t dim, int8_t* q) {
  float amax = 0.f;
  for (int32_t i = 0; i < dim; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.f;
  // A subnormal scale would lose the precision the codes rely on (and a
  // GPU flushing denormals would disagree with it): such a row is zero.
  if (!(scale >= std::numeric_limits<float>::min())) {
    std::fill(q, q + dim, int8_t{0});
    return 0.f;
  }
  for (int32_t i = 0; i < dim; ++i) {
    // rint in the default rounding mode: to nearest, ties to even (the
    // GPU's __float2int_rn). The clamp absorbs x / scale landing a rounding
    // step past 127 for the largest element.
    const float r = std::rint(x[i] / scale);
    q[i] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, r)));
  }
  return scale;
}

void QuantizeInt8Rows(const float* x, int64_t rows, int32_t dim, int8_t* q,
                      float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    scales[r] = QuantizeInt8Row(x + r * dim, dim, q + r * dim);
  }
}

void DequantizeInt8Row(const int8_t* q, float scale, int32_t dim, float* out) {
  for (int32_t i = 0; i < dim; ++i) out[i] = static_cast<float>(q[i]) * scale;
}

}  // namespace maxsimd
