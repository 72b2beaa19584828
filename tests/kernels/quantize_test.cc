// Per-token int8 quantisation (kernels/quantize.h, index/FORMAT.md "Int8
// quantisation"): codes on the grid of max|x| / 127, the least-squares
// scale and its bounds, zero and tiny rows, a row dominated by one value,
// ties rounding to even, and what the fitted scale buys against the step.
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

// The fitted scale as the formula states it: sum x_i q_i / sum q_i^2 in
// fp64, rounded to fp32.
float Fit(const std::vector<float>& x, const std::vector<int8_t>& q) {
  double xq = 0.0;
  double qq = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    xq += static_cast<double>(x[i]) * q[i];
    qq += static_cast<double>(q[i]) * q[i];
  }
  return static_cast<float>(xq / qq);
}

// Squared distance between x and scale * q, in fp64.
double Residual(const std::vector<float>& x, const std::vector<int8_t>& q,
                float scale) {
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(x[i]) - double{scale} * q[i];
    sum += e * e;
  }
  return sum;
}

// Checks one row's codes and scale against the formula and its bounds:
// q_i = clamp(rint(x_i / step)) with step = max|x| / 127 in fp32, a code
// of magnitude 127 for the largest value, the scale the least-squares fit
// (or the step where the fit is not a normal fp32 number), within
// [step / 2, 3 step / 2], and the round trip no farther from x than the
// step's: ||x - scale q|| <= ||x - step q|| <= sqrt(dim) step / 2.
void ExpectRoundTrip(const std::vector<float>& x, const char* what) {
  SCOPED_TRACE(what);
  const int32_t dim = static_cast<int32_t>(x.size());
  std::vector<int8_t> q(x.size(), 99);
  const float scale = QuantizeInt8Row(x.data(), dim, q.data());
  float amax = 0.f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float step = amax / 127.f;
  int top = 0;
  for (int32_t i = 0; i < dim; ++i) {
    ASSERT_EQ(q[i], static_cast<int8_t>(std::min(
                        127.f, std::max(-127.f, std::rint(x[i] / step)))))
        << "element " << i << ": " << x[i] << " / " << step;
    top = std::max(top, std::abs(static_cast<int>(q[i])));
  }
  EXPECT_EQ(top, 127);
  const float fit = Fit(x, q);
  ASSERT_EQ(scale, fit >= std::numeric_limits<float>::min() ? fit : step);
  EXPECT_GE(scale, step / 2);
  EXPECT_LE(scale, step * 1.5f);
  std::vector<float> back(x.size());
  DequantizeInt8Row(q.data(), scale, dim, back.data());
  for (int32_t i = 0; i < dim; ++i) {
    EXPECT_EQ(back[i], static_cast<float>(q[i]) * scale);
  }
  // The fit minimises the residual over all scales; its rounding to fp32
  // may add a relative 2^-24 to the scale.
  const double grid = Residual(x, q, step);
  const double slack = 1e-6 * Residual(x, std::vector<int8_t>(x.size(), 0), 0);
  EXPECT_LE(Residual(x, q, scale), grid + slack);
  EXPECT_LE(grid, dim * double{step} * step / 4 * (1 + 1e-6));
}

TEST(QuantizeTest, RandomRowsStayWithinTheStepsBounds) {
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

// What the fitted scale is for: the rounding error is orthogonal to the
// quantised row, so the row's product with itself (a query token aligned
// with it) loses only |e|^2, where the step's scale loses a first-order
// x . e. Unit rows of 128 values: the mean error of x . x falls about
// elevenfold (4.3e-5 against 4.7e-4 in a numpy replica of this loop); the
// test asks for fivefold.
TEST(QuantizeTest, FittedScaleCutsTheErrorAlongTheRow) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  std::normal_distribution<float> normal(0.f, 1.f);
  const int32_t dim = 128;
  double err_fit = 0.0;
  double err_step = 0.0;
  const int rows = 500;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> x(dim);
    double norm = 0.0;
    for (float& v : x) {
      v = normal(rng);
      norm += double{v} * v;
    }
    for (float& v : x) v = static_cast<float>(v / std::sqrt(norm));
    std::vector<int8_t> q(dim);
    const float scale = QuantizeInt8Row(x.data(), dim, q.data());
    float amax = 0.f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    double xx = 0.0;
    double xq = 0.0;
    for (int32_t i = 0; i < dim; ++i) {
      xx += double{x[i]} * x[i];
      xq += double{x[i]} * q[i];
    }
    err_fit += std::fabs(xx - scale * xq);
    err_step += std::fabs(xx - (amax / 127.f) * xq);
  }
  err_fit /= rows;
  err_step /= rows;
  EXPECT_LT(err_fit, 1e-4) << "step's error " << err_step;
  EXPECT_LT(err_fit * 5, err_step);
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
  // A step of exactly the least normal number, and a value rounded up
  // (0.6 -> 1) pulling the fit just below it: the row keeps the step.
  const float min = std::numeric_limits<float>::min();
  const std::vector<float> edge = {127.f * min, 0.6f * min};
  ASSERT_LT(Fit(edge, {127, 1}), min);
  std::vector<int8_t> qe(2);
  EXPECT_EQ(QuantizeInt8Row(edge.data(), 2, qe.data()), min);
  EXPECT_EQ(qe, (std::vector<int8_t>{127, 1}));
}

TEST(QuantizeTest, OneLargeValueTakesTheWholeRange) {
  std::vector<float> x(64, 1e-3f);
  x[17] = -1000.f;
  x[3] = 3.9f;   // 3.9 / (1000 / 127) = 0.495...: rounds to 0
  x[4] = 4.0f;   // 0.508: rounds to 1
  x[5] = 500.f;  // 63.5: a tie, to even
  std::vector<int8_t> q(64);
  const float scale = QuantizeInt8Row(x.data(), 64, q.data());
  const float step = 1000.f / 127.f;
  EXPECT_EQ(q[17], -127);
  EXPECT_EQ(q[3], 0);
  EXPECT_EQ(q[4], 1);
  EXPECT_EQ(q[5], static_cast<int8_t>(std::rint(500.f / step)));
  EXPECT_EQ(q[0], 0);
  // The fit of -1000 -> -127, 500 -> 64 (or 63) and 4 -> 1.
  EXPECT_EQ(scale, Fit(x, q));
  ExpectRoundTrip(x, "one large value");
}

TEST(QuantizeTest, TiesRoundHalfToEven) {
  // max 127 gives step exactly 1, so x_i / step is x_i itself.
  const std::vector<float> x = {127.f, 0.5f, 1.5f,  2.5f,   -0.5f,  -1.5f,
                                -2.5f, 3.5f, 3.49f, 126.5f, -126.5f};
  const std::vector<int8_t> want = {127, 0, 2, 2, 0, -2, -2, 4, 3, 126, -126};
  std::vector<int8_t> q(x.size());
  EXPECT_EQ(QuantizeInt8Row(x.data(), static_cast<int32_t>(x.size()), q.data()),
            Fit(x, want));
  EXPECT_EQ(q, want);
  // max 254 gives step 2: 5 / 2 = 2.5 -> 2, 7 / 2 = 3.5 -> 4, -9 -> -4.
  const std::vector<float> y = {-254.f, 5.f, 7.f, -9.f, 1.f, 3.f};
  const std::vector<int8_t> want_y = {-127, 2, 4, -4, 0, 2};
  std::vector<int8_t> qy(y.size());
  EXPECT_EQ(
      QuantizeInt8Row(y.data(), static_cast<int32_t>(y.size()), qy.data()),
      Fit(y, want_y));
  EXPECT_EQ(qy, want_y);
}

TEST(QuantizeTest, RowsAreQuantisedOneByOne) {
  const std::vector<float> x = {127.f, 1.5f, 0.f, 0.f, -2.f, 1.f};
  std::vector<int8_t> q(6);
  std::vector<float> scales(3);
  QuantizeInt8Rows(x.data(), 3, 2, q.data(), scales.data());
  EXPECT_EQ(q, (std::vector<int8_t>{127, 2, 0, 0, -127, 64}));
  // {127, 1.5} -> {127, 2}: (127 * 127 + 1.5 * 2) / (127^2 + 2^2);
  // {-2, 1} -> {-127, 64} (63.5, to even): (254 + 64) / (127^2 + 64^2).
  EXPECT_EQ(scales,
            (std::vector<float>{static_cast<float>(16132.0 / 16133.0), 0.f,
                                static_cast<float>(318.0 / 20225.0)}));
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
