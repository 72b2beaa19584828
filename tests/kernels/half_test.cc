#include "kernels/half.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

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
