#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace maxsimd {

float QuantizeInt8Row(const float* x, int32_t dim, int8_t* q) {
  float amax = 0.f;
  for (int32_t i = 0; i < dim; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float step = amax / 127.f;
  // A subnormal scale would lose the precision the codes rely on (and a
  // GPU flushing denormals would disagree with it): such a row is zero.
  if (!(step >= std::numeric_limits<float>::min())) {
    std::fill(q, q + dim, int8_t{0});
    return 0.f;
  }
  // The codes: x on the grid of step max_i |x_i| / 127.
  double xq = 0.0;
  double qq = 0.0;
  for (int32_t i = 0; i < dim; ++i) {
    // rint in the default rounding mode: to nearest, ties to even (the
    // GPU's __float2int_rn). The clamp absorbs x / step landing a rounding
    // step past 127 for the largest element.
    const float r = std::rint(x[i] / step);
    q[i] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, r)));
    xq += static_cast<double>(x[i]) * q[i];
    qq += static_cast<double>(q[i]) * q[i];
  }
  // The scale: the least-squares fit of x by the codes (quantize.h). Every
  // code has its value's sign and the largest is +-127, so xq > 0; the fit
  // lies within a factor 1.5 of the step (each value is within step / 2 of
  // its grid point). Its rounding to fp32 may still land below the least
  // normal number for a row just above the threshold: that row keeps the
  // step.
  const float fit = static_cast<float>(xq / qq);
  return fit >= std::numeric_limits<float>::min() ? fit : step;
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
