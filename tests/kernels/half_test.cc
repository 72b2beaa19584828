#include "kernels/base/half.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/element.h"

namespace maxsimd {
namespace {

TEST(HalfTest, RoundTripsEveryHalfValue) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << "half bits " << h;
  }
}

TEST(HalfTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between odd and even: rounds up to even.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(65520.f), 0x7c00);  // overflows to inf
  EXPECT_EQ(FloatToHalf(-0.f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
}

// The batch conversion (eight at a time where the CPU has F16C) against the
// scalar one: a stride through every float bit pattern (every exponent,
// both signs, the subnormal and overflow ranges, NaNs), each tie below a
// half's last bit, and lengths that leave a tail.
TEST(HalfTest, FloatsToHalvesMatchesFloatToHalf) {
  std::vector<float> in;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) {
    const uint32_t bits = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    in.push_back(f);
  }
  for (uint32_t h = 0; h < 0x7c00u; h += 7) {
    // Exactly halfway between half h and h + 1 (normal range), and a hair
    // above.
    const float lo = HalfToFloat(static_cast<uint16_t>(h));
    const float hi = HalfToFloat(static_cast<uint16_t>(h + 1));
    in.push_back(lo + (hi - lo) / 2);
    in.push_back(std::nextafter(lo + (hi - lo) / 2, hi));
  }
  for (size_t n : {in.size(), in.size() - 3, size_t{5}}) {
    std::vector<uint16_t> out(n);
    FloatsToHalves(in.data(), static_cast<int64_t>(n), out.data());
    int mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != FloatToHalf(in[i]) && ++mismatches <= 5) {
        ADD_FAILURE() << "value " << in[i] << " at " << i << ": " << out[i]
                      << " against " << FloatToHalf(in[i]);
      }
    }
    EXPECT_EQ(mismatches, 0) << "of " << n;
  }
}

TEST(HalfTest, BFloat16RoundTrips) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBFloat16(f), b);
  }
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(
      FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace maxsimd
