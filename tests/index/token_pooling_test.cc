// Token pooling (index/token_pooling.h): pool_factor 1 and documents of 0
// or 1 token are copied; every document keeps ceil(n / pool_factor) rows;
// each row is the (renormalised) mean of its group, groups numbered by
// first token; duplicated directions come back; the partition is scipy's
// (fixtures from tests/data/token_pooling/make_fixtures.py); ties at the
// cut still give k groups; a batch gives each document what it gets alone,
// with or without a pool; bad inputs are refused by name. A disabled test
// prints the time per document (run it with
// --gtest_also_run_disabled_tests).
#include "index/token_pooling.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/base/thread_pool.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

// n unit-length (when `unit`) Gaussian tokens [n, dim].
std::vector<float> RandomTokens(int64_t n, int32_t dim, uint64_t seed,
                                bool unit = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n * dim);
  for (float& v : x) v = normal(rng);
  if (unit) {
    for (int64_t i = 0; i < n; ++i) {
      double norm2 = 0.0;
      for (int32_t d = 0; d < dim; ++d)
        norm2 += double{x[i * dim + d]} * x[i * dim + d];
      const float inv = static_cast<float>(1.0 / std::sqrt(norm2));
      for (int32_t d = 0; d < dim; ++d) x[i * dim + d] *= inv;
    }
  }
  return x;
}

// Whether labels a and b (one per token) define the same partition.
bool SamePartition(const std::vector<int32_t>& a,
                   const std::vector<int32_t>& b) {
  if (a.size() != b.size()) return false;
  std::map<int32_t, int32_t> ab;
  std::map<int32_t, int32_t> ba;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ab.emplace(a[i], b[i]).first->second != b[i]) return false;
    if (ba.emplace(b[i], a[i]).first->second != a[i]) return false;
  }
  return true;
}

TEST(TokenPoolingTest, PoolFactorOneCopiesEveryToken) {
  const std::vector<float> x = RandomTokens(13, 8, 1, /*unit=*/false);
  for (bool normalize : {false, true}) {
    std::vector<float> out = {42.f};
    const absl::StatusOr<int64_t> k = PoolDocumentTokens(
        x, 8, {.pool_factor = 1, .normalize = normalize}, &out);
    MAXSIMD_ASSERT_OK(k);
    EXPECT_EQ(*k, 13);
    EXPECT_EQ(out, x);  // bit for bit, not renormalised
  }
}

TEST(TokenPoolingTest, EmptyAndOneTokenDocumentsAreUnchanged) {
  std::vector<float> out = {1.f, 2.f};
  absl::StatusOr<int64_t> k =
      PoolDocumentTokens({}, 4, {.pool_factor = 3}, &out);
  MAXSIMD_ASSERT_OK(k);
  EXPECT_EQ(*k, 0);
  EXPECT_TRUE(out.empty());
  const std::vector<float> one = {3.f, 0.f, 4.f, 0.f};
  k = PoolDocumentTokens(one, 4, {.pool_factor = 3, .normalize = true}, &out);
  MAXSIMD_ASSERT_OK(k);
  EXPECT_EQ(*k, 1);
  EXPECT_EQ(out, one);
}

TEST(TokenPoolingTest, KeepsCeilOfNOverPoolFactorGroupsNumberedByFirstToken) {
  const int32_t dim = 8;
  for (int64_t n = 0; n <= 70; ++n) {
    const std::vector<float> x = RandomTokens(n, dim, 100 + n);
    for (int32_t pool_factor : {1, 2, 3, 4, 7, 64, kMaxTokenPoolFactor}) {
      SCOPED_TRACE(::testing::Message()
                   << "n " << n << " pool_factor " << pool_factor);
      const int64_t want = (n + pool_factor - 1) / pool_factor;
      EXPECT_EQ(PooledTokenCount(n, pool_factor), want);
      std::vector<float> out;
      const absl::StatusOr<int64_t> k =
          PoolDocumentTokens(x, dim, {.pool_factor = pool_factor}, &out);
      MAXSIMD_ASSERT_OK(k);
      EXPECT_EQ(*k, want);
      EXPECT_EQ(out.size(), static_cast<size_t>(want * dim));
      const absl::StatusOr<std::vector<int32_t>> groups =
          TokenPoolingGroups(x, dim, pool_factor);
      MAXSIMD_ASSERT_OK(groups);
      ASSERT_EQ(groups->size(), static_cast<size_t>(n));
      // Every group in [0, k) is used, each first met after the previous.
      int32_t next = 0;
      for (int32_t g : *groups) {
        ASSERT_LE(g, next);
        if (g == next) ++next;
      }
      EXPECT_EQ(next, want);
    }
  }
}

TEST(TokenPoolingTest, EachRowIsTheMeanOfItsGroup) {
  const int32_t dim = 16;
  const int64_t n = 40;
  for (bool unit : {true, false}) {
    const std::vector<float> x = RandomTokens(n, dim, 7, unit);
    const absl::StatusOr<std::vector<int32_t>> groups =
        TokenPoolingGroups(x, dim, 3);
    MAXSIMD_ASSERT_OK(groups);
    const int64_t k = PooledTokenCount(n, 3);
    std::vector<std::vector<double>> mean(k, std::vector<double>(dim, 0.0));
    std::vector<int> count(k, 0);
    for (int64_t i = 0; i < n; ++i) {
      ++count[(*groups)[i]];
      for (int32_t d = 0; d < dim; ++d) {
        mean[(*groups)[i]][d] += x[i * dim + d];
      }
    }
    for (bool normalize : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "unit " << unit << " normalize " << normalize);
      std::vector<float> out;
      MAXSIMD_ASSERT_OK(PoolDocumentTokens(
          x, dim, {.pool_factor = 3, .normalize = normalize}, &out));
      ASSERT_EQ(out.size(), static_cast<size_t>(k * dim));
      int singletons = 0;
      for (int64_t g = 0; g < k; ++g) {
        double norm2 = 0.0;
        for (int32_t d = 0; d < dim; ++d) {
          norm2 += (mean[g][d] / count[g]) * (mean[g][d] / count[g]);
        }
        const double scale =
            normalize && count[g] > 1 ? 1.0 / std::sqrt(norm2) : 1.0;
        if (count[g] == 1) ++singletons;
        for (int32_t d = 0; d < dim; ++d) {
          EXPECT_NEAR(out[g * dim + d], mean[g][d] / count[g] * scale, 1e-6)
              << "group " << g << " dimension " << d;
        }
      }
      EXPECT_LT(singletons, k);  // some groups do hold several tokens
    }
  }
}

TEST(TokenPoolingTest, RecoversDuplicatedDirectionsInOrderOfFirstToken) {
  const int32_t dim = 16;
  const std::vector<float> directions = RandomTokens(5, dim, 3);
  // 18 tokens, the directions interleaved, each with noise of 1e-6.
  const std::vector<int> which = {2, 0, 2, 4, 1, 0, 3, 2, 4,
                                  1, 0, 3, 3, 4, 2, 0, 1, 4};
  std::mt19937_64 rng(9);
  std::normal_distribution<float> noise(0.f, 1e-6f);
  std::vector<float> x;
  for (int w : which) {
    for (int32_t d = 0; d < dim; ++d) {
      x.push_back(directions[w * dim + d] + noise(rng));
    }
  }
  const int32_t pool_factor = 4;  // ceil(18 / 4) = 5 groups
  const absl::StatusOr<std::vector<int32_t>> groups =
      TokenPoolingGroups(x, dim, pool_factor);
  MAXSIMD_ASSERT_OK(groups);
  EXPECT_TRUE(
      SamePartition(*groups, std::vector<int32_t>(which.begin(), which.end())));
  std::vector<float> out;
  const absl::StatusOr<int64_t> k = PoolDocumentTokens(
      x, dim, {.pool_factor = pool_factor, .normalize = true}, &out);
  MAXSIMD_ASSERT_OK(k);
  ASSERT_EQ(*k, 5);
  // Group order is that of first tokens: directions 2, 0, 4, 1, 3.
  const std::vector<int> first_seen = {2, 0, 4, 1, 3};
  for (int g = 0; g < 5; ++g) {
    for (int32_t d = 0; d < dim; ++d) {
      EXPECT_NEAR(out[g * dim + d], directions[first_seen[g] * dim + d], 1e-5)
          << "group " << g << " dimension " << d;
    }
  }
}

struct WardCase {
  std::string name;
  int64_t n = 0;
  int32_t dim = 0;
  int32_t pool_factor = 0;
  int64_t k = 0;
  std::vector<float> tokens;
  std::vector<int32_t> labels;
};

// Reads tests/data/token_pooling/ward_cases.txt (format in
// make_fixtures.py).
std::vector<WardCase> ReadWardCases() {
  std::ifstream in(std::string(MAXSIMD_TOKEN_POOLING_TESTDATA) +
                   "/ward_cases.txt");
  std::vector<WardCase> cases;
  std::string word;
  while (in >> word) {
    if (word == "#") {
      std::getline(in, word);
      continue;
    }
    if (word != "case") {
      ADD_FAILURE() << "unexpected word " << word;
      break;
    }
    WardCase c;
    in >> c.name >> c.n >> c.dim >> c.pool_factor >> c.k;
    c.tokens.resize(c.n * c.dim);
    for (float& v : c.tokens) in >> v;
    in >> word;
    EXPECT_EQ(word, "labels");
    c.labels.resize(c.n);
    for (int32_t& l : c.labels) in >> l;
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(TokenPoolingTest, PartitionIsScipysWardOnCosineDistances) {
  const std::vector<WardCase> cases = ReadWardCases();
  ASSERT_EQ(cases.size(), 7u);
  for (const WardCase& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(PooledTokenCount(c.n, c.pool_factor), c.k);
    const absl::StatusOr<std::vector<int32_t>> groups =
        TokenPoolingGroups(c.tokens, c.dim, c.pool_factor);
    MAXSIMD_ASSERT_OK(groups);
    EXPECT_TRUE(SamePartition(*groups, c.labels))
        << "ours: " << ::testing::PrintToString(*groups)
        << "\nscipy: " << ::testing::PrintToString(c.labels);
  }
}

TEST(TokenPoolingTest, TiesAtTheCutStillGiveKGroupsDeterministically) {
  // Six copies of one token (exactly: unit, so every distance is 0, and
  // so is every merge). The chain from
  // token 0 merges (0, 1) into slot 1, then (1, 2), ...: the lowest merges
  // join tokens 0..3, and tokens 4 and 5 stay alone.
  std::vector<float> x;
  for (int i = 0; i < 6; ++i) x.insert(x.end(), {1.f, 0.f});
  const absl::StatusOr<std::vector<int32_t>> groups =
      TokenPoolingGroups(x, 2, 2);
  MAXSIMD_ASSERT_OK(groups);
  EXPECT_EQ(*groups, (std::vector<int32_t>{0, 0, 0, 0, 1, 2}));
}

TEST(TokenPoolingTest, BatchGivesEachDocumentWhatItGetsAloneWithOrWithoutPool) {
  const int32_t dim = 8;
  const std::vector<int64_t> lengths = {0, 1, 5, 17, 40, 3, 64, 2};
  std::vector<int64_t> cu = {0};
  for (int64_t n : lengths) cu.push_back(cu.back() + n);
  const std::vector<float> x = RandomTokens(cu.back(), dim, 21, false);
  const TokenPoolingOptions options{.pool_factor = 3, .normalize = true};
  std::vector<float> want;
  std::vector<int64_t> want_cu = {0};
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<float> out;
    const absl::StatusOr<int64_t> k = PoolDocumentTokens(
        absl::MakeConstSpan(x).subspan(cu[d] * dim, lengths[d] * dim), dim,
        options, &out);
    MAXSIMD_ASSERT_OK(k);
    want.insert(want.end(), out.begin(), out.end());
    want_cu.push_back(want_cu.back() + *k);
  }
  ThreadPool pool(3);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    SCOPED_TRACE(p == nullptr ? "no pool" : "pool");
    std::vector<float> out = {7.f};
    std::vector<int64_t> out_cu = {7};
    MAXSIMD_ASSERT_OK(PoolTokenBatch(x, cu, dim, options, p, &out, &out_cu));
    EXPECT_EQ(out_cu, want_cu);
    EXPECT_EQ(out, want);
  }
}

TEST(TokenPoolingTest, RefusesBadInputsByName) {
  const std::vector<float> x = RandomTokens(6, 4, 2);
  std::vector<float> out;
  EXPECT_THAT(PoolDocumentTokens(x, 0, {.pool_factor = 2}, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dim is 0; it must be at least 1")));
  EXPECT_THAT(PoolDocumentTokens(x, 4, {.pool_factor = 0}, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pool_factor is 0; it must be in [1, 1024]")));
  EXPECT_THAT(
      TokenPoolingGroups(x, 4, kMaxTokenPoolFactor + 1),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pool_factor")));
  EXPECT_THAT(PoolDocumentTokens(x, 5, {.pool_factor = 2}, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("24 values, not a multiple of dim 5")));
  EXPECT_THAT(PoolDocumentTokens(x, 4, {.pool_factor = 2}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out")));
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> y = x;
    y[4 * 3 + 2] = bad;
    EXPECT_THAT(PoolDocumentTokens(y, 4, {.pool_factor = 2}, &out),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("token 3 has a value that is not finite")));
  }
  const std::vector<float> long_doc(kMaxPooledDocumentTokens + 1, 1.f);
  EXPECT_THAT(PoolDocumentTokens(long_doc, 1, {.pool_factor = 2}, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("at most 8192 can be pooled")));
  // A copy (k = n) builds no tree: any length.
  MAXSIMD_EXPECT_OK(PoolDocumentTokens(long_doc, 1, {.pool_factor = 1}, &out));

  std::vector<int64_t> out_cu;
  const TokenPoolingOptions o{.pool_factor = 2};
  const auto batch = [&](std::vector<int64_t> cu) {
    return PoolTokenBatch(x, cu, 4, o, nullptr, &out, &out_cu);
  };
  EXPECT_THAT(batch({}), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("cu_seqlens")));
  EXPECT_THAT(batch({1, 6}), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("cu_seqlens must start at 0")));
  EXPECT_THAT(batch({0, 5}), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("end at the 6 tokens")));
  EXPECT_THAT(batch({0, 4, 2, 6}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cu_seqlens decreases at entry 2")));
  std::vector<float> y = x;
  y[4 * 4] = NAN;
  EXPECT_THAT(PoolTokenBatch(y, std::vector<int64_t>{0, 3, 6}, 4, o, nullptr,
                             &out, &out_cu),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token 1 of document 1")));
  EXPECT_THAT(PoolTokenBatch(x, std::vector<int64_t>{0, 6}, 4, o, nullptr, &out,
                             nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out_cu_seqlens")));
}

// Time per document at dim 128 (ColBERT's; ColPali pages have ~1030
// tokens). Not run by default: it is a measurement, not a check.
TEST(TokenPoolingTest, DISABLED_PrintsTimePerDocument) {
  const int32_t dim = 128;
  for (int64_t n : {32, 128, 300, 1030}) {
    const std::vector<float> x = RandomTokens(n, dim, 5);
    std::vector<float> out;
    const int reps = n >= 1000 ? 10 : 100;
    MAXSIMD_ASSERT_OK(PoolDocumentTokens(x, dim, {.pool_factor = 2}, &out));
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      MAXSIMD_ASSERT_OK(PoolDocumentTokens(x, dim, {.pool_factor = 2}, &out));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    std::printf("n %4lld dim %d pool_factor 2: %.3f ms per document\n",
                static_cast<long long>(n), dim, 1e3 * seconds / reps);
  }
}

}  // namespace
}  // namespace maxsimd
