#include "kernels/element.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define MAXSIMD_HAVE_F16C_PATH 1
#endif

namespace maxsimd {
namespace {

#ifdef MAXSIMD_HAVE_F16C_PATH
// Converts the whole groups of eight values, eight per instruction,
// rounded to nearest even like FloatToHalf, and returns how many it
// converted. A group holding a NaN goes through FloatToHalf instead, which
// makes every NaN the same quiet NaN (the instruction would keep part of
// the payload).
__attribute__((target("avx,f16c"))) int64_t FloatsToHalvesF16c(const float* in,
                                                               int64_t n,
                                                               uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) out[j] = FloatToHalf(in[j]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

// CPUID leaf 1: AVX, F16C and OSXSAVE; then XCR0: the OS saves the YMM
// registers.
bool HasF16c() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    constexpr unsigned kOsxsave = 1u << 27, kAvx = 1u << 28, kF16c = 1u << 29;
    if ((c & (kOsxsave | kAvx | kF16c)) != (kOsxsave | kAvx | kF16c)) {
      return false;
    }
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
  }();
  return has;
}
#endif

}  // namespace

void FloatsToHalves(const float* in, int64_t n, uint16_t* out) {
  int64_t i = 0;
#ifdef MAXSIMD_HAVE_F16C_PATH
  if (HasF16c()) i = FloatsToHalvesF16c(in, n, out);
#endif
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

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
    case DType::kFloat16:
      FloatsToHalves(in, n, static_cast<uint16_t*>(out));
      return;
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
