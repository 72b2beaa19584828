// Host-side element access for embedding arrays of any DType.
//
// Int8 elements convert as their integer codes: the per-row scales of the
// int8 layout are applied by the callers that hold them (kernels/quantize.h
// makes codes and scales). PLAID rows are not element arrays: these
// functions leave them alone (LoadAsFloat returns 0), and
// kernels/plaid_bits.h decodes them.
//
// Thread-safety: pure functions.
#ifndef MAXSIMD_KERNELS_ELEMENT_H_
#define MAXSIMD_KERNELS_ELEMENT_H_

#include <cstdint>
#include <cstring>

#include "kernels/base/half.h"
#include "kernels/types.h"

namespace maxsimd {

// Element i of an array of `dtype` elements, as fp32.
inline float LoadAsFloat(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kInt8:
      return static_cast<float>(static_cast<const int8_t*>(base)[i]);
    default:  // PLAID rows decode whole (kernels/plaid_bits.h)
      break;
  }
  return 0.f;
}

// Converts n elements starting at element `first` of `base` to fp32.
void ConvertToFloat(const void* base, DType dtype, int64_t first, int64_t n,
                    float* out);

// Converts n fp32 values to `dtype`, writing n * DTypeSize(dtype) bytes.
// To int8: each value rounded to the nearest integer (ties to even) and
// clamped to [-127, 127], with no scale.
void ConvertFromFloat(const float* in, int64_t n, DType dtype, void* out);

// out[i] = FloatToHalf(in[i]) for i < n, eight at a time where the CPU has
// the F16C instructions (the GPU backend stages every query through it).
void FloatsToHalves(const float* in, int64_t n, uint16_t* out);

// Scales row[0, n) to unit L2 norm, given norm2 > 0, the sum of its squares
// (in double). Rows of normal values are scaled by 1 / norm in float; a row
// of subnormal values, whose 1 / norm is past the float range (scaling by
// it in float would make the row Inf and NaN), is scaled in double.
void ScaleToUnitNorm(float* row, int64_t n, double norm2);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_ELEMENT_H_
