// Per-token int8 quantisation (kernels/quantize.h, index/FORMAT.md "Int8
// quantisation"): the round trip stays within half a step, zero and tiny
// rows, a row dominated by one value, and ties rounding to even.
#include "kernels/quantize.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/element.h"
#include "tests/support/ranking.h"

namespace maxsimd {
namespace {

// Checks one row's codes and scale against the formula's invariants:
// scale = max|x| / 127 in fp32, |q| <= 127 with a code of magnitude 127
// for the largest value, and |x_i - q_i * scale| <= scale / 2 up to fp32
// rounding of the division and the product.
void ExpectRoundTrip(const std::vector<float>& x, const char* what) {
  SCOPED_TRACE(what);
  const int32_t dim = static_cast<int32_t>(x.size());
  std::vector<int8_t> q(x.size(), 99);
  const float scale = QuantizeInt8Row(x.data(), dim, q.data());
  float amax = 0.f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  ASSERT_EQ(scale, amax / 127.f);
  std::vector<float> back(x.size());
  DequantizeInt8Row(q.data(), scale, dim, back.data());
  int top = 0;
  for (int32_t i = 0; i < dim; ++i) {
    ASSERT_GE(q[i], -127) << "element " << i;
    ASSERT_LE(q[i], 127) << "element " << i;
    top = std::max(top, std::abs(static_cast<int>(q[i])));
    EXPECT_EQ(back[i], static_cast<float>(q[i]) * scale);
    const float slack = 4e-7f * amax;  // a few fp32 ulps of the row's scale
    EXPECT_LE(std::fabs(x[i] - back[i]), scale / 2 + slack)
        << "element " << i << ": " << x[i] << " -> " << int{q[i]} << " * "
        << scale;
  }
  EXPECT_EQ(top, 127);
}

TEST(QuantizeTest, RandomRowsRoundTripWithinHalfAStep) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int32_t dim : {1, 2, 7, 64, 128, 300}) {
    for (float magnitude : {1e-30f, 1e-3f, 1.f, 3e4f, 1e30f}) {
      std::normal_distribution<float> normal(0.f, magnitude);
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<float> x(static_cast<size_t>(dim));
        for (float& v : x) v = normal(rng);
        ExpectRoundTrip(x, "normal");
      }
    }
  }
}

TEST(QuantizeTest, ZeroAndSubnormalRowsGetScaleZero) {
  std::vector<int8_t> q(5, 7);
  const std::vector<float> zeros(5, 0.f);
  EXPECT_EQ(QuantizeInt8Row(zeros.data(), 5, q.data()), 0.f);
  EXPECT_EQ(q, std::vector<int8_t>(5, 0));
  const std::vector<float> signed_zeros = {-0.f, 0.f, -0.f, 0.f, -0.f};
  q.assign(5, 7);
  EXPECT_EQ(QuantizeInt8Row(signed_zeros.data(), 5, q.data()), 0.f);
  EXPECT_EQ(q, std::vector<int8_t>(5, 0));
  // max / 127 below the smallest normal fp32: a zero row.
  const float tiny = 100.f * std::numeric_limits<float>::min();
  const std::vector<float> small = {tiny, -tiny / 2, 0.f, tiny / 3, 0.f};
  q.assign(5, 7);
  EXPECT_EQ(QuantizeInt8Row(small.data(), 5, q.data()), 0.f);
  EXPECT_EQ(q, std::vector<int8_t>(5, 0));
  std::vector<float> back(5, 1.f);
  DequantizeInt8Row(q.data(), 0.f, 5, back.data());
  EXPECT_EQ(back, zeros);
  // Just above the threshold the row is quantised as usual.
  const float normal = 128.f * std::numeric_limits<float>::min();
  const std::vector<float> least = {normal, -normal / 2, 0.f};
  ExpectRoundTrip(least, "smallest quantised row");
}

TEST(QuantizeTest, OneLargeValueTakesTheWholeRange) {
  std::vector<float> x(64, 1e-3f);
  x[17] = -1000.f;
  x[3] = 3.9f;   // 3.9 / (1000 / 127) = 0.495...: rounds to 0
  x[4] = 4.0f;   // 0.508: rounds to 1
  x[5] = 500.f;  // 63.5: a tie, to even
  std::vector<int8_t> q(64);
  const float scale = QuantizeInt8Row(x.data(), 64, q.data());
  EXPECT_EQ(scale, 1000.f / 127.f);
  EXPECT_EQ(q[17], -127);
  EXPECT_EQ(q[3], 0);
  EXPECT_EQ(q[4], 1);
  EXPECT_EQ(q[5], static_cast<int8_t>(std::rint(500.f / scale)));
  EXPECT_EQ(q[0], 0);
  ExpectRoundTrip(x, "one large value");
}

TEST(QuantizeTest, TiesRoundHalfToEven) {
  // max 127 gives scale exactly 1, so x_i / scale is x_i itself.
  const std::vector<float> x = {127.f, 0.5f, 1.5f,  2.5f,   -0.5f,  -1.5f,
                                -2.5f, 3.5f, 3.49f, 126.5f, -126.5f};
  const std::vector<int8_t> want = {127, 0, 2, 2, 0, -2, -2, 4, 3, 126, -126};
  std::vector<int8_t> q(x.size());
  EXPECT_EQ(QuantizeInt8Row(x.data(), static_cast<int32_t>(x.size()), q.data()),
            1.f);
  EXPECT_EQ(q, want);
  // max 254 gives scale 2: 5 / 2 = 2.5 -> 2, 7 / 2 = 3.5 -> 4, -9 -> -4.
  const std::vector<float> y = {-254.f, 5.f, 7.f, -9.f, 1.f, 3.f};
  const std::vector<int8_t> want_y = {-127, 2, 4, -4, 0, 2};
  std::vector<int8_t> qy(y.size());
  EXPECT_EQ(
      QuantizeInt8Row(y.data(), static_cast<int32_t>(y.size()), qy.data()),
      2.f);
  EXPECT_EQ(qy, want_y);
}

TEST(QuantizeTest, RowsAreQuantisedOneByOne) {
  const std::vector<float> x = {127.f, 1.5f, 0.f, 0.f, -2.f, 1.f};
  std::vector<int8_t> q(6);
  std::vector<float> scales(3);
  QuantizeInt8Rows(x.data(), 3, 2, q.data(), scales.data());
  EXPECT_EQ(scales, (std::vector<float>{1.f, 0.f, 2.f / 127.f}));
  EXPECT_EQ(q, (std::vector<int8_t>{127, 2, 0, 0, -127, 64}));
}

TEST(QuantizeTest, Int8ElementsConvertAsTheirCodes) {
  const std::vector<int8_t> codes = {-127, -1, 0, 5, 127};
  std::vector<float> f(codes.size());
  ConvertToFloat(codes.data(), DType::kInt8, 0, 5, f.data());
  EXPECT_EQ(f, (std::vector<float>{-127.f, -1.f, 0.f, 5.f, 127.f}));
  EXPECT_EQ(LoadAsFloat(codes.data(), DType::kInt8, 3), 5.f);
  std::vector<int8_t> back(5);
  const std::vector<float> in = {-300.f, -1.5f, 0.4f, 2.5f, 300.f};
  ConvertFromFloat(in.data(), 5, DType::kInt8, back.data());
  EXPECT_EQ(back, (std::vector<int8_t>{-127, -2, 0, 2, 127}));
  EXPECT_EQ(DTypeSize(DType::kInt8), 1u);
  EXPECT_STREQ(DTypeName(DType::kInt8), "int8");
}

}  // namespace
}  // namespace maxsimd
