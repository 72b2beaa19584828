// Per-token symmetric int8 quantisation: the one definition of the int8
// corpus layout's codes and scales (index/FORMAT.md, "Int8 quantisation"),
// used to store documents, to quantise queries where the corpus asks for
// it, and by the reference scorer.
//
// For one row x of `dim` fp32 values:
//
//   scale = max_i |x_i| / 127                       (fp32 division)
//   q_i   = clamp(rint(x_i / scale), -127, 127)     (fp32 division; rint
//                                                   rounds half to even)
//
// A row whose scale is not a normal fp32 number (all zeros, or
// max_i |x_i| < 127 * 2^-126, about 1.5e-36) gets scale 0 and every q_i 0.
// The row stands for q_i * scale, within scale / 2 of x_i. -128 is never
// produced, so the codes are symmetric.
//
// Thread-safety: pure functions.
#ifndef MAXSIMD_KERNELS_QUANTIZE_H_
#define MAXSIMD_KERNELS_QUANTIZE_H_

#include <cstdint>

namespace maxsimd {

// Quantises `dim` finite fp32 values at `x` into `q[dim]` and returns the
// row's scale (>= 0, finite). REQUIRES: x finite (callers validate input).
float QuantizeInt8Row(const float* x, int32_t dim, int8_t* q);

// Quantises `rows` rows of `dim` values ([rows, dim] row-major) into
// q[rows, dim] and scales[rows].
void QuantizeInt8Rows(const float* x, int64_t rows, int32_t dim, int8_t* q,
                      float* scales);

// out[i] = q[i] * scale (fp32) for i < dim: the values a quantised row
// stands for.
void DequantizeInt8Row(const int8_t* q, float scale, int32_t dim, float* out);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_QUANTIZE_H_
