// GpuBackend::ScoreCentroids (kernels/plaid_centroids.h: PLAID candidate
// generation's Q C^T on the GPU) against the host's product
// (PlaidCentroidScores, index/plaid_search.h), bit for bit: random shapes
// (rows 1, 33, 300; centroids 1, 1000, 5000; dims 64, 96, 128, 130) in one
// chunk and in many (a small centroid_score_entries: column pieces, row
// chunks, several token blocks), and special values (signed zeros,
// subnormals, infinities, NaN); then the argument errors, the option off,
// a kernel fault (sticky), and PlaidCandidatesBatch over a synthetic PLAID
// corpus on the GPU (one backend, and two shards) giving the host's
// candidates. The GPU twin of plaid_search_test's tests of where the
// product runs. Skips without a CUDA device (seeds printed).
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/corpus.h"
#include "index/plaid_search.h"
#include "index/synthetic.h"
#include "kernels/base/fault_injection.h"
#include "kernels/gpu_backend.h"
#include "kernels/sharded_backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/fault_skip.h"
#include "tests/support/synthetic_plaid.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::MakeGpuBackend;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::TestOptions;
using ::maxsimd::testing::TestSeed;
using ::testing::HasSubstr;

// Centroids resident on a backend, as a PLAID codec's tables are.
struct DeviceCentroids {
  PlaidCodec codec;  // the host copy
  std::unique_ptr<ResidentBuffer> buffer;
  PlaidTablesView tables;
};

DeviceCentroids Upload(Backend& backend, std::vector<float> centroids,
                       int64_t k, int32_t dim) {
  DeviceCentroids d;
  d.codec.dim = dim;
  d.codec.nbits = 2;
  d.codec.num_centroids = k;
  d.codec.centroids = std::move(centroids);
  d.buffer = backend
                 .Upload(d.codec.centroids.data(),
                         d.codec.centroids.size() * sizeof(float))
                 .value();
  d.tables.centroids = static_cast<const float*>(d.buffer->data());
  d.tables.num_centroids = k;
  return d;
}

// The GPU's product of `tokens` with `d`, or a test failure.
std::vector<float> GpuProduct(Backend& backend, const DeviceCentroids& d,
                              const std::vector<float>& tokens) {
  const int32_t dim = d.codec.dim;
  std::vector<float> scores(tokens.size() / dim * d.codec.num_centroids, -7.f);
  EXPECT_THAT(
      backend.ScoreCentroids(0, d.tables, dim, tokens, absl::MakeSpan(scores)),
      IsOk());
  return scores;
}

// Whether two scores are the same: equal bits, or both NaN (whose payload
// the host and the GPU may set differently).
bool Same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// Expects `got` to equal `want` cell by cell (Same); the message counts
// the cells outside 1e-5 relative + 1e-6 absolute too, and shows the first
// difference.
void ExpectSameScores(const std::vector<float>& got,
                      const std::vector<float>& want, int64_t k,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t differ = 0, far = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (Same(got[i], want[i])) continue;
    ++differ;
    if (first < 0) first = static_cast<int64_t>(i);
    const double tol = 1e-6 + 1e-5 * std::fabs(double{want[i]});
    far += !(std::fabs(double{got[i]} - want[i]) <= tol);
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " cells differ (" << far
                       << " beyond 1e-5 rel + 1e-6 abs); first at row "
                       << (first < 0 ? 0 : first / k) << " centroid "
                       << (first < 0 ? 0 : first % k) << ": gpu "
                       << (first < 0 ? 0.f : got[first]) << ", host "
                       << (first < 0 ? 0.f : want[first]);
}

std::vector<float> Normal(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Every shape of the grid, on a backend whose product fits one chunk and
// on one that needs many (4000 scores per chunk: 5000 centroids come in
// two column pieces, 1000 in chunks of 4 rows; 62 rows of dim 64 per
// token block).
TEST(GpuCentroidScoresTest, MatchesTheHostProductBitForBit) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions chunked = TestOptions();
  chunked.centroid_score_entries = 4000;
  std::unique_ptr<Backend> backends[2] = {MakeGpuBackend(),
                                          MakeGpuBackend(chunked)};
  ASSERT_NE(backends[0], nullptr);
  ASSERT_NE(backends[1], nullptr);
  ThreadPool pool(4);
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  for (int32_t dim : {64, 96, 128, 130}) {
    for (int64_t k : {int64_t{1}, int64_t{1000}, int64_t{5000}}) {
      const std::vector<float> centroids = Normal(rng, k * dim);
      DeviceCentroids on[2] = {Upload(*backends[0], centroids, k, dim),
                               Upload(*backends[1], centroids, k, dim)};
      for (int64_t rows : {int64_t{1}, int64_t{33}, int64_t{300}}) {
        const std::vector<float> tokens = RandomQuery(rng, rows, dim);
        const std::vector<float> want =
            PlaidCentroidScores(on[0].codec, tokens.data(), rows, &pool);
        for (int b = 0; b < 2; ++b) {
          ExpectSameScores(
              GpuProduct(*backends[b], on[b], tokens), want, k,
              absl::StrCat("seed ", seed, " dim ", dim, " k ", k, " rows ",
                           rows, b ? " chunked" : " one chunk"));
        }
      }
    }
  }
  EXPECT_TRUE(backends[0]->healthy());
  EXPECT_TRUE(backends[1]->healthy());
}

// Signed zeros, subnormals, infinities, NaN and products that overflow,
// at widths with and without a tail past the 16 lanes: the host's values
// (NaN for NaN).
TEST(GpuCentroidScoresTest, SpecialValuesMatchTheHost) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  const float inf = std::numeric_limits<float>::infinity();
  const float values[] = {
      0.f,    -0.f,    1e-40f, -1e-40f,
      1e-20f, -1e-20f, 3e38f,  -3e38f,
      inf,    -inf,    1.5f,   -2.25f,
      0.5f,   1.f,     -1.f,   std::numeric_limits<float>::quiet_NaN()};
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  // Mostly ordinary values, so that most cells stay finite.
  auto draw = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) {
      x = rng() % 4 == 0 ? values[rng() % 16] : values[10 + rng() % 5];
    }
    return v;
  };
  for (int32_t dim : {5, 16, 40, 64}) {
    const int64_t k = 70, rows = 130;
    DeviceCentroids d = Upload(*backend, draw(k * dim), k, dim);
    const std::vector<float> tokens = draw(rows * dim);
    ExpectSameScores(GpuProduct(*backend, d, tokens),
                     PlaidCentroidScores(d.codec, tokens.data(), rows), k,
                     absl::StrCat("seed ", seed, " dim ", dim));
  }
  EXPECT_TRUE(backend->healthy());
}

// A caller's mistake is INVALID_ARGUMENT naming the field and the limit,
// and leaves the backend healthy; no rows is a no-op.
TEST(GpuCentroidScoresTest, RejectsBadArgumentsAndStaysHealthy) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_TRUE(backend->ScoresCentroids());
  std::mt19937_64 rng(1);
  DeviceCentroids d = Upload(*backend, Normal(rng, 3 * 8), 3, 8);
  const std::vector<float> tokens = Normal(rng, 2 * 8);
  std::vector<float> scores(2 * 3);
  const auto bad = [](const char* what) {
    return StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what));
  };
  auto run = [&](int shard, const PlaidTablesView& t, int32_t dim,
                 absl::Span<const float> q, absl::Span<float> s) {
    return backend->ScoreCentroids(shard, t, dim, q, s);
  };
  const auto out = absl::MakeSpan(scores);
  EXPECT_THAT(run(1, d.tables, 8, tokens, out), bad("shard is 1"));
  EXPECT_THAT(run(0, d.tables, 0, tokens, out), bad("dim is 0"));
  EXPECT_THAT(run(0, d.tables, 4096, tokens, out),
              bad("dim is 4096, must be in [1, 2048]"));
  EXPECT_THAT(run(0, d.tables, 3, tokens, out), bad("not a multiple of dim"));
  EXPECT_THAT(run(0, d.tables, 8, tokens, out.subspan(1)),
              bad("scores has 5 entries"));
  PlaidTablesView none = d.tables;
  none.centroids = nullptr;
  EXPECT_THAT(run(0, none, 8, tokens, out), bad("tables.centroids is null"));
  EXPECT_THAT(run(0, d.tables, 8, {}, {}), IsOk());
  EXPECT_TRUE(backend->healthy());
  EXPECT_THAT(run(0, d.tables, 8, tokens, out), IsOk());
  EXPECT_EQ(scores, PlaidCentroidScores(d.codec, tokens.data(), 2));
}

// centroid_score_entries 0: no scratch, and the product is the host's to
// run (UNIMPLEMENTED); a negative value is refused at creation.
TEST(GpuCentroidScoresTest, OffWithoutScratch) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions o = TestOptions();
  o.centroid_score_entries = 0;
  auto backend = MakeGpuBackend(o);
  ASSERT_NE(backend, nullptr);
  EXPECT_FALSE(backend->ScoresCentroids());
  std::mt19937_64 rng(2);
  DeviceCentroids d = Upload(*backend, Normal(rng, 3 * 8), 3, 8);
  const std::vector<float> tokens = Normal(rng, 8);
  std::vector<float> scores(3);
  EXPECT_THAT(
      backend->ScoreCentroids(0, d.tables, 8, tokens, absl::MakeSpan(scores)),
      StatusIs(absl::StatusCode::kUnimplemented,
               HasSubstr("centroid_score_entries is 0")));
  o.centroid_score_entries = -1;
  EXPECT_THAT(GpuBackend::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("centroid_score_entries is -1")));
}

// A kernel fault during a product is sticky, as during a search: this
// call and every later one answer UNAVAILABLE.
TEST(GpuCentroidScoresTest, KernelFaultIsSticky) {
  MAXSIMD_SKIP_WITHOUT_FAULT_INJECTION();
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = MakeGpuBackend();  // its own: this one ends unhealthy
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(3);
  DeviceCentroids d = Upload(*backend, Normal(rng, 40 * 16), 40, 16);
  const std::vector<float> tokens = Normal(rng, 5 * 16);
  std::vector<float> scores(5 * 40);
  {
    fault::ScopedFault fault(fault::kGpuKernel, fault::Schedule::Once());
    EXPECT_THAT(backend->ScoreCentroids(0, d.tables, 16, tokens,
                                        absl::MakeSpan(scores)),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr("cudaErrorLaunchFailure")));
    EXPECT_EQ(fault::Hits(fault::kGpuKernel), 1);
  }
  EXPECT_FALSE(backend->healthy());
  EXPECT_THAT(
      backend->ScoreCentroids(0, d.tables, 16, tokens, absl::MakeSpan(scores)),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("has failed")));
  fault::DisarmAll();
}

// PLAID candidate generation over a synthetic PLAID corpus resident on the
// GPU: the product on the GPU (on the first segment's shard where the
// corpus is sharded) gives the host's candidates, query by query, and the
// scores of the resident tables equal the host's.
TEST(GpuCentroidScoresTest, PlaidCandidatesMatchTheHost) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  constexpr int32_t kDim = 128;
  if (!MakeGpuBackend()->SupportsDType(DType::kPlaid2, kDim)) {
    GTEST_SKIP() << "the GPU backend serves no PLAID corpus of dim " << kDim
                 << " here (no TMA kernels)";
  }
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  SyntheticCorpusOptions o;
  o.num_docs = 600;
  o.dim = kDim;
  o.min_tokens = 4;
  o.max_tokens = 40;
  o.num_clusters = 48;
  o.seed = rng();
  const SyntheticCorpus synth = GenerateSyntheticCorpus(o);
  for (bool sharded : {false, true}) {
    std::unique_ptr<Backend> backend;
    if (sharded) {
      std::vector<std::unique_ptr<Backend>> children;
      children.push_back(MakeGpuBackend());
      children.push_back(MakeGpuBackend());
      backend = ShardedBackend::Create(std::move(children), 1).value();
    } else {
      backend = MakeGpuBackend();
    }
    ASSERT_NE(backend, nullptr);
    auto corpus =
        testing::MakeSyntheticPlaidCorpus(backend.get(), "p", 256, synth);
    const auto snap = corpus->Snapshot();
    ASSERT_NE(snap->codec(), nullptr);
    std::vector<std::vector<float>> tokens(16);
    std::vector<PlaidQuery> queries(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int64_t lq = 1 + static_cast<int64_t>(rng() % 32);
      tokens[i] = GenerateQueryForDocument(
          synth, static_cast<int64_t>(rng() % synth.ids.size()), lq, 0.4f,
          rng());
      queries[i] = {
          tokens[i].data(),
          lq,
          {1 + static_cast<int32_t>(i % 4), 10 + static_cast<int32_t>(i * 7)}};
    }
    const auto host = PlaidCandidatesBatch(*snap, queries).value();
    PlaidProduct product;
    product.backend = backend.get();
    PlaidBatchStats stats;
    const auto got = PlaidCandidatesBatch(*snap, queries, product, &stats);
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(stats.centroid_products, 1);
    EXPECT_EQ(stats.device_products, 1);
    int found = 0;
    for (size_t i = 0; i < queries.size(); ++i) {
      const std::string where =
          absl::StrCat("seed ", seed, sharded ? " sharded" : "", " query ", i);
      found += !host[i].empty();
      ASSERT_EQ((*got)[i].size(), host[i].size()) << where;
      for (size_t j = 0; j < host[i].size(); ++j) {
        EXPECT_EQ((*got)[i][j].segment, host[i][j].segment) << where;
        EXPECT_EQ((*got)[i][j].doc, host[i][j].doc) << where;
      }
    }
    EXPECT_GT(found, 0);

    const int shard = snap->segments().front()->shard();
    const PlaidCodec& codec = snap->codec()->codec();
    std::vector<float> scores(tokens[0].size() / kDim * codec.num_centroids);
    ASSERT_THAT(
        backend->ScoreCentroids(shard, snap->codec()->ResidentTables(shard),
                                kDim, tokens[0], absl::MakeSpan(scores)),
        IsOk());
    ExpectSameScores(
        scores, PlaidCentroidScores(codec, tokens[0].data(), queries[0].lq),
        codec.num_centroids, "resident tables");
  }
}

}  // namespace
}  // namespace maxsimd
