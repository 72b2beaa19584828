// Per-token symmetric int8 quantisation: the one definition of the int8
// corpus layout's codes and scales (index/FORMAT.md, "Int8 quantisation"),
// used to store documents, to quantise queries where the corpus asks for
// it, and by the reference scorer.
//
// For one row x of `dim` fp32 values:
//
//   step  = max_i |x_i| / 127                       (fp32 division)
//   q_i   = clamp(rint(x_i / step), -127, 127)      (fp32 division; rint
//                                                   rounds half to even)
//   scale = fp32(sum_i x_i q_i / sum_i q_i^2)       (sums in fp64)
//
// The codes put x on a grid of `step`; the scale is then the least-squares
// fit of x by the codes rather than the step itself. With that scale the
// rounding error e = x - scale * q is orthogonal to the row q stands for,
// so a query token aligned with a document token (the pairs that win a
// MaxSim) sees the error only through its unaligned part: on the fidelity
// benchmark's corpus the top-10 overlap with the exact ranking rises from
// 0.987 to 0.991 (fp16 queries) and from 0.984 to 0.994 (quantised
// queries) against scale = step (bench/NOTES.md, "s5: int8 with a
// least-squares scale per token"). The fit lies in [step / 2, 3 step / 2],
// and ||x - scale * q|| <= ||x - step * q|| <= sqrt(dim) * step / 2 (up to
// the fit's rounding to fp32).
//
// A row whose step is not a normal fp32 number (all zeros, or
// max_i |x_i| < 127 * 2^-126, about 1.5e-36) gets scale 0 and every q_i 0;
// a row whose fit rounds below the least normal fp32 number keeps
// scale = step. -128 is never produced, so the codes are symmetric.
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
