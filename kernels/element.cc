#include "kernels/element.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace maxsimd {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt8:
      return "int8";
    case DType::kPlaid1:
      return "plaid1";
    case DType::kPlaid2:
      return "plaid2";
    case DType::kPlaid4:
      return "plaid4";
    case DType::kPlaid8:
      return "plaid8";
  }
  return "unknown";
}

const char* LayoutOfDType(DType t) {
  if (t == DType::kInt8) return "int8";
  return PlaidNbits(t) != 0 ? "plaid" : "dense";
}

void ConvertToFloat(const void* base, DType dtype, int64_t first, int64_t n,
                    float* out) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(out, static_cast<const float*>(base) + first,
                  static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kFloat16: {
      const uint16_t* src = static_cast<const uint16_t*>(base) + first;
      for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(src[i]);
      return;
    }
    case DType::kBFloat16: {
      const uint16_t* src = static_cast<const uint16_t*>(base) + first;
      for (int64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(src[i]);
      return;
    }
    case DType::kInt8: {
      const int8_t* src = static_cast<const int8_t*>(base) + first;
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(src[i]);
      return;
    }
    default:  // PLAID rows decode whole (kernels/plaid_bits.h)
      break;
  }
}

void ScaleToUnitNorm(float* row, int64_t n, double norm2) {
  const double inv = 1.0 / std::sqrt(norm2);
  if (inv <= std::numeric_limits<float>::max()) {
    const float inv_f = static_cast<float>(inv);
    for (int64_t j = 0; j < n; ++j) row[j] *= inv_f;
    return;
  }
  for (int64_t j = 0; j < n; ++j) row[j] = static_cast<float>(row[j] * inv);
}

void ConvertFromFloat(const float* in, int64_t n, DType dtype, void* out) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalf(in[i]);
      return;
    }
    case DType::kBFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBFloat16(in[i]);
      return;
    }
    case DType::kInt8: {
      int8_t* dst = static_cast<int8_t*>(out);
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = static_cast<int8_t>(
            std::min(127.f, std::max(-127.f, std::rint(in[i]))));
      }
      return;
    }
    default:  // PLAID rows are made by index/plaid_train.h
      break;
  }
}

}  // namespace maxsimd
