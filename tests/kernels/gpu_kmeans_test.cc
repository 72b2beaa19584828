// The k-means assignment on the GPU (kernels/kmeans.h, through
// GpuBackend::AssignNearestCentroids) against the host's
// (AssignNearestCentroidsOnHost, index/plaid_train.h): the same codes, bit
// for bit, on random unit tokens of many shapes (token and centroid counts
// and widths off the 128 x 128 x 16 tiles, k = 1, fewer tokens than a tile,
// centroids split over blocks, tokens over copy chunks), exact ties to the
// lowest index (duplicate centroids, integer dot products), special values
// (+-0, subnormals, infinities, NaN); a PLAID codec trained with the GPU
// assignment equals the host-trained one; bad arguments are refused by
// name; and the time of one assignment of 2^18 tokens x 8192 centroids x
// 128 dimensions is printed (not checked). Skips without a CUDA device.
//
// On a mismatch the message names the first token that differs, both
// codes, and both centroids' dot products (fp32 in the host's order, in
// hex, and fp64), so a rounding difference shows as such.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/plaid_train.h"
#include "index/synthetic.h"
#include "kernels/kmeans.h"
#include "tests/kernels/gpu_test_util.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::SharedGpuBackend;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

// The host's dot product: an fp32 sum in dimension order, each product and
// sum rounded on its own (this file, like plaid_train.cc, is compiled with
// -ffp-contract=off).
float HostDot(const float* x, const float* y, int32_t dim) {
  float dot = 0.f;
  for (int32_t d = 0; d < dim; ++d) dot += x[d] * y[d];
  return dot;
}

double ExactDot(const float* x, const float* y, int32_t dim) {
  double dot = 0.0;
  for (int32_t d = 0; d < dim; ++d) dot += double{x[d]} * y[d];
  return dot;
}

std::string Describe(const std::vector<float>& tokens,
                     const std::vector<float>& centroids, int32_t dim,
                     int64_t i, int64_t code) {
  if (code < 0 || code >= static_cast<int64_t>(centroids.size()) / dim) {
    return absl::StrCat("code ", code, " (out of range)");
  }
  const float* x = tokens.data() + i * dim;
  const float* y = centroids.data() + code * dim;
  const float dot = HostDot(x, y, dim);
  return absl::StrFormat("code %d: fp32 dot %.9g (%a), fp64 %.12g", code, dot,
                         dot, ExactDot(x, y, dim));
}

// "" when the GPU's codes equal the host's; else how many differ, and the
// first difference in detail.
std::string CompareWithHost(const std::vector<float>& tokens,
                            const std::vector<float>& centroids, int32_t dim,
                            const std::vector<int64_t>& got) {
  const int64_t m = static_cast<int64_t>(tokens.size()) / dim;
  const int64_t k = static_cast<int64_t>(centroids.size()) / dim;
  std::vector<int64_t> want(static_cast<size_t>(m));
  AssignNearestCentroidsOnHost(tokens.data(), m, dim, centroids.data(), k,
                               want.data());
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < m; ++i) {
    if (got[i] != want[i]) {
      if (first < 0) first = i;
      ++differ;
    }
  }
  if (differ == 0) return "";
  return absl::StrCat(differ, " of ", m, " codes differ (m ", m, ", k ", k,
                      ", dim ", dim, "); first at token ", first, ": GPU ",
                      Describe(tokens, centroids, dim, first, got[first]),
                      "; host ",
                      Describe(tokens, centroids, dim, first, want[first]));
}

std::vector<float> RandomUnitRows(int64_t n, int32_t dim,
                                  std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> out(static_cast<size_t>(n) * dim);
  for (int64_t i = 0; i < n; ++i) {
    float* x = out.data() + i * dim;
    double norm = 0.0;
    for (int32_t d = 0; d < dim; ++d) {
      x[d] = normal(rng);
      norm += double{x[d]} * x[d];
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(norm));
    for (int32_t d = 0; d < dim; ++d) x[d] *= inv;
  }
  return out;
}

// The GPU's codes, or an empty vector after a failure (reported).
std::vector<int64_t> GpuAssign(const std::vector<float>& tokens,
                               const std::vector<float>& centroids,
                               int32_t dim) {
  std::vector<int64_t> codes(tokens.size() / dim, -1);
  const absl::Status st = SharedGpuBackend().AssignNearestCentroids(
      tokens, centroids, dim, absl::MakeSpan(codes));
  EXPECT_THAT(st, IsOk());
  if (!st.ok()) codes.clear();
  return codes;
}

struct Shape {
  int64_t m, k;
  int32_t dim;
};

TEST(GpuKMeansTest, MatchesTheHostOnRandomUnitTokens) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  const uint64_t seed = std::random_device()();
  std::printf("seed %" PRIu64 "\n", seed);
  std::mt19937_64 rng(seed);
  std::vector<Shape> shapes = {
      {1, 1, 64},         // one token, one centroid
      {5, 1, 128},        // k = 1
      {100, 7, 64},       // fewer tokens and centroids than a tile
      {127, 128, 128},    // one short of a token tile, one centroid tile
      {128, 129, 96},     // one token tile, one centroid past a tile
      {129, 255, 65},     // every count off the tiles, dim off 16
      {1000, 257, 128},   // centroids split over blocks
      {3000, 1000, 256},  // split, dim 256
      {40, 5000, 128},    // many centroids, few tokens
      {20000, 300, 64},  {70000, 200, 128},  // enough token blocks for no split
      {5000, 64, 17},    {2000, 100, 1},    {300, 2000, 3},
      {131073, 16, 128},  // two copy chunks of 2^17 tokens, the last of one
      {40000, 50, 1000},  // three chunks at a wide dim
  };
  std::uniform_int_distribution<int64_t> m_dist(1, 5000), k_dist(1, 600);
  std::uniform_int_distribution<int32_t> d_dist(1, 300);
  for (int r = 0; r < 6; ++r) {
    shapes.push_back({m_dist(rng), k_dist(rng), d_dist(rng)});
  }
  for (const Shape& s : shapes) {
    SCOPED_TRACE(absl::StrCat("m ", s.m, " k ", s.k, " dim ", s.dim));
    const std::vector<float> tokens = RandomUnitRows(s.m, s.dim, rng);
    const std::vector<float> centroids = RandomUnitRows(s.k, s.dim, rng);
    const std::vector<int64_t> got = GpuAssign(tokens, centroids, s.dim);
    if (got.empty()) continue;
    EXPECT_EQ(CompareWithHost(tokens, centroids, s.dim, got), "");
  }
  EXPECT_TRUE(SharedGpuBackend().healthy());
}

// Duplicate centroids (row j of 50 at indices j, j + 50 and j + 100,
// across centroid tiles and splits; 50 distinct rows after them) and
// tokens equal to centroids: every token goes to the first copy. Then
// integer rows, whose dot products are exact small integers, so distinct
// centroids tie too.
TEST(GpuKMeansTest, TiesGoToTheLowestIndex) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(17);
  constexpr int32_t kDim = 128;
  const std::vector<float> distinct = RandomUnitRows(50, kDim, rng);
  std::vector<float> centroids;
  for (int copy = 0; copy < 3; ++copy) {
    centroids.insert(centroids.end(), distinct.begin(), distinct.end());
  }
  const std::vector<float> own = RandomUnitRows(50, kDim, rng);
  centroids.insert(centroids.end(), own.begin(), own.end());
  std::vector<float> tokens = RandomUnitRows(3000, kDim, rng);
  for (int64_t i = 0; i < 200; ++i) {  // tokens equal to every centroid
    std::copy(centroids.begin() + i * kDim, centroids.begin() + (i + 1) * kDim,
              tokens.begin() + i * kDim);
  }
  std::vector<int64_t> got = GpuAssign(tokens, centroids, kDim);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(CompareWithHost(tokens, centroids, kDim, got), "");
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i] < 50 || got[i] >= 150)
        << "token " << i << " went to the copy " << got[i];
  }
  for (int64_t i = 0; i < 200; ++i) {
    EXPECT_EQ(got[i], i < 150 ? i % 50 : i) << "token " << i;
  }

  // Rows of -1, 0, 1: many exact ties between different centroids.
  std::uniform_int_distribution<int> tri(-1, 1);
  for (const Shape& s : std::vector<Shape>{{5000, 300, 16}, {700, 1000, 5}}) {
    SCOPED_TRACE(absl::StrCat("m ", s.m, " k ", s.k, " dim ", s.dim));
    std::vector<float> t(s.m * s.dim), c(s.k * s.dim);
    for (float& v : t) v = static_cast<float>(tri(rng));
    for (float& v : c) v = static_cast<float>(tri(rng));
    got = GpuAssign(t, c, s.dim);
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(CompareWithHost(t, c, s.dim, got), "");
  }
}

// +-0, subnormals, huge values (products that overflow to +-inf, sums of
// inf - inf = NaN), infinities and NaN in tokens and centroids: a NaN dot
// product never wins, and a token whose dot products are all NaN or -inf
// goes to centroid 0, on the GPU as on the host.
TEST(GpuKMeansTest, SpecialValuesGiveTheHostsCodes) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(23);
  constexpr int32_t kDim = 24;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.f,    -0.f, 1e-40f, -1e-40f, 3e38f,
                            -3e38f, inf,  -inf,   nan,     1.f};
  std::uniform_int_distribution<int> pick(0, 9);
  std::uniform_int_distribution<int> often(0, 3);
  auto fill = [&](int64_t rows) {
    std::vector<float> v = RandomUnitRows(rows, kDim, rng);
    for (float& x : v) {
      if (often(rng) == 0) x = specials[pick(rng)];
    }
    return v;
  };
  std::vector<float> tokens = fill(2000);
  std::vector<float> centroids = fill(300);
  // Centroid 0 finite; a zero token (+0 against every finite centroid, NaN
  // against the others: centroid 0 on the tie) and an all-NaN token (no
  // winner: centroid 0).
  const std::vector<float> unit = RandomUnitRows(1, kDim, rng);
  std::copy(unit.begin(), unit.end(), centroids.begin());
  std::fill(tokens.begin(), tokens.begin() + kDim, 0.f);
  std::fill(tokens.begin() + kDim, tokens.begin() + 2 * kDim, nan);
  const std::vector<int64_t> got = GpuAssign(tokens, centroids, kDim);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(CompareWithHost(tokens, centroids, kDim, got), "");
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 0);

  // Subnormal-only rows: products underflow, the sums stay subnormal or 0.
  std::vector<float> tiny_t(500 * 8), tiny_c(40 * 8);
  std::uniform_real_distribution<float> sub(-1e-38f, 1e-38f);
  for (float& v : tiny_t) v = sub(rng) * 1e-3f;
  for (float& v : tiny_c) v = sub(rng) * 1e6f;
  const std::vector<int64_t> tiny = GpuAssign(tiny_t, tiny_c, 8);
  ASSERT_FALSE(tiny.empty());
  EXPECT_EQ(CompareWithHost(tiny_t, tiny_c, 8, tiny), "");
  EXPECT_TRUE(SharedGpuBackend().healthy());
}

SyntheticCorpus Clustered(int32_t dim, uint64_t seed) {
  SyntheticCorpusOptions so;
  so.num_docs = 600;
  so.dim = dim;
  so.min_tokens = 8;
  so.max_tokens = 24;
  so.num_clusters = 64;
  so.seed = seed;
  return GenerateSyntheticCorpus(so);
}

// The whole training with the GPU's assignment: the host's codec, bit for
// bit (the update, seeding and buckets run on the host either way, and
// every assignment is the same), and compression gives the same rows.
TEST(GpuKMeansTest, TrainPlaidCodecIsTheSameWithTheGpu) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& gpu = SharedGpuBackend();
  for (int32_t dim : {64, 128}) {
    const SyntheticCorpus c = Clustered(dim, static_cast<uint64_t>(dim));
    const int64_t n = static_cast<int64_t>(c.tokens.size()) / dim;
    for (PlaidSeeding seeding :
         {PlaidSeeding::kKMeansPlusPlus, PlaidSeeding::kRandomTokens}) {
      for (int nbits : {2, 4}) {
        SCOPED_TRACE(absl::StrCat("dim ", dim, " seeding ",
                                  static_cast<int>(seeding), " nbits ", nbits));
        PlaidTrainOptions o;
        o.nbits = nbits;
        o.num_centroids = 200;
        o.iterations = 8;
        o.max_sample = n * 3 / 4;
        o.seeding = seeding;
        auto host = TrainPlaidCodec(c.tokens.data(), n, dim, o);
        ASSERT_THAT(host, IsOk());
        int calls = 0;
        const PlaidAssignFn through_gpu = BackendAssignFn(&gpu);
        ASSERT_TRUE(through_gpu);
        o.assign = [&](const float* tokens, int64_t m, int32_t d,
                       const float* centroids, int64_t k, int64_t* codes) {
          ++calls;
          return through_gpu(tokens, m, d, centroids, k, codes);
        };
        auto on_gpu = TrainPlaidCodec(c.tokens.data(), n, dim, o);
        ASSERT_THAT(on_gpu, IsOk());
        EXPECT_EQ(calls, o.iterations + 1);
        EXPECT_EQ(on_gpu->centroids, host->centroids);
        EXPECT_EQ(on_gpu->bucket_cutoffs, host->bucket_cutoffs);
        EXPECT_EQ(on_gpu->bucket_weights, host->bucket_weights);

        std::vector<int64_t> want(n), got(n);
        std::vector<uint8_t> want_rows(n * dim * nbits / 8),
            got_rows(want_rows.size());
        CompressPlaidEmbeddings(*host, c.tokens.data(), n, want.data(),
                                want_rows.data());
        ASSERT_THAT(
            CompressPlaidEmbeddings(*host, c.tokens.data(), n, got.data(),
                                    got_rows.data(), through_gpu),
            IsOk());
        EXPECT_EQ(got, want);
        EXPECT_EQ(got_rows, want_rows);
      }
    }
  }
}

TEST(GpuKMeansTest, BadArgumentsAreRefusedByName) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& gpu = SharedGpuBackend();
  EXPECT_TRUE(gpu.AssignsNearestCentroids());
  const std::vector<float> tokens(10 * 8, 0.5f), centroids(3 * 8, 0.25f);
  std::vector<int64_t> codes(10);
  const std::vector<float> none;
  EXPECT_THAT(
      gpu.AssignNearestCentroids(tokens, none, 8, absl::MakeSpan(codes)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("centroids is empty (k = 0)")));
  std::vector<int64_t> no_codes;
  EXPECT_THAT(
      gpu.AssignNearestCentroids(none, centroids, 8, absl::MakeSpan(no_codes)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tokens is empty (m = 0)")));
  // Rows of 7 values do not divide the 80 token values.
  std::vector<int64_t> eleven(11);
  EXPECT_THAT(
      gpu.AssignNearestCentroids(tokens, centroids, 7, absl::MakeSpan(eleven)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tokens has 80 values, not a multiple of "
                         "dim 7")));
  const std::vector<float> odd(3 * 8 + 1, 0.25f);
  EXPECT_THAT(gpu.AssignNearestCentroids(tokens, odd, 8, absl::MakeSpan(codes)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("centroids has 25 values, not a multiple of "
                                 "dim 8")));
  EXPECT_THAT(
      gpu.AssignNearestCentroids(tokens, centroids, 0, absl::MakeSpan(codes)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim is 0")));
  std::vector<int64_t> nine(9);
  EXPECT_THAT(
      gpu.AssignNearestCentroids(tokens, centroids, 8, absl::MakeSpan(nine)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("codes has 9 entries for 10 tokens")));
  EXPECT_TRUE(gpu.healthy());
  // Still serving: every token ties, so all go to centroid 0.
  ASSERT_THAT(
      gpu.AssignNearestCentroids(tokens, centroids, 8, absl::MakeSpan(codes)),
      IsOk());
  EXPECT_THAT(codes, ::testing::Each(0));
}

// The time of one assignment of 2^18 tokens x 8192 centroids x 128
// dimensions (0.55 TFLOP, counting a multiply and an add per term): the
// kernel alone on device buffers, and the backend call with its copies.
// Printed, not checked; 1,024 of the tokens are checked against the host.
TEST(GpuKMeansTest, TimesOneLargeAssignment) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  constexpr int64_t kM = int64_t{1} << 18, kK = 8192;
  constexpr int32_t kDim = 128;
  std::mt19937_64 rng(5);
  const std::vector<float> tokens = RandomUnitRows(kM, kDim, rng);
  const std::vector<float> centroids = RandomUnitRows(kK, kDim, rng);
  const double flop = 2.0 * kM * kK * kDim;

  int sm_count = 0;
  ASSERT_EQ(
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0),
      cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  float *d_tokens = nullptr, *d_centroids = nullptr;
  int64_t* d_codes = nullptr;
  void* d_ws = nullptr;
  const size_t ws = AssignNearestWorkspaceBytes(kM, kK, sm_count);
  auto device_alloc = [](auto** p, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void**>(p), bytes);
  };
  ASSERT_EQ(device_alloc(&d_tokens, tokens.size() * sizeof(float)),
            cudaSuccess);
  ASSERT_EQ(device_alloc(&d_centroids, centroids.size() * sizeof(float)),
            cudaSuccess);
  ASSERT_EQ(device_alloc(&d_codes, kM * sizeof(int64_t)), cudaSuccess);
  if (ws > 0) {
    ASSERT_EQ(cudaMalloc(&d_ws, ws), cudaSuccess);
  }
  ASSERT_EQ(cudaMemcpy(d_tokens, tokens.data(), tokens.size() * sizeof(float),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(d_centroids, centroids.data(),
                 centroids.size() * sizeof(float), cudaMemcpyHostToDevice),
      cudaSuccess);
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  AssignNearestParams p;
  p.tokens = d_tokens;
  p.num_tokens = kM;
  p.centroids = d_centroids;
  p.num_centroids = kK;
  p.dim = kDim;
  p.codes = d_codes;
  ASSERT_THAT(LaunchAssignNearest(p, d_ws, ws, sm_count, stream), IsOk());
  constexpr int kRuns = 5;
  ASSERT_EQ(cudaEventRecord(start, stream), cudaSuccess);
  for (int r = 0; r < kRuns; ++r) {
    ASSERT_THAT(LaunchAssignNearest(p, d_ws, ws, sm_count, stream), IsOk());
  }
  ASSERT_EQ(cudaEventRecord(stop, stream), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  float ms = 0.f;
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  const double kernel_s = ms / 1e3 / kRuns;
  std::vector<int64_t> kernel_codes(kM);
  ASSERT_EQ(cudaMemcpy(kernel_codes.data(), d_codes, kM * sizeof(int64_t),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(d_tokens);
  cudaFree(d_centroids);
  cudaFree(d_codes);
  if (d_ws != nullptr) cudaFree(d_ws);

  std::vector<int64_t> codes(kM, -1);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_THAT(SharedGpuBackend().AssignNearestCentroids(tokens, centroids, kDim,
                                                        absl::MakeSpan(codes)),
              IsOk());
  const double call_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::printf("assign %" PRId64 " tokens x %" PRId64
              " centroids x %d: kernel %.2f ms "
              "(%.1f TFLOP/s, %d SMs), backend call with copies %.2f ms (%.1f "
              "TFLOP/s)\n",
              kM, kK, kDim, kernel_s * 1e3, flop / kernel_s / 1e12, sm_count,
              call_s * 1e3, flop / call_s / 1e12);
  EXPECT_EQ(kernel_codes, codes);

  // 1,024 tokens spread over the range against the host.
  std::vector<float> some;
  std::vector<int64_t> some_codes;
  for (int64_t i = 0; i < kM; i += kM / 1024) {
    some.insert(some.end(), tokens.begin() + i * kDim,
                tokens.begin() + (i + 1) * kDim);
    some_codes.push_back(codes[i]);
  }
  EXPECT_EQ(CompareWithHost(some, centroids, kDim, some_codes), "");
}

}  // namespace
}  // namespace maxsimd
