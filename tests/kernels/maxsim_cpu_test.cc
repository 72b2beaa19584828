// CPU backend against the scalar reference on random ragged shapes; its
// failures at the fault points cpu.search and cpu.alloc.
#include "kernels/maxsim_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "kernels/base/fault_injection.h"
#include "kernels/maxsim_reference.h"
#include "tests/support/fault_skip.h"
#include "tests/support/plaid_segment.h"
#include "tests/support/ranking.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::Batch;
using ::maxsimd::testing::CompareRanking;
using ::maxsimd::testing::HostSegment;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::RandomSegment;
using ::maxsimd::testing::StatusIs;

std::unique_ptr<CpuBackend> MakeBackend(int threads = 2) {
  CpuBackendOptions options;
  options.num_threads = threads;
  return CpuBackend::Create(options).value();
}

void ExpectMatchesReference(Backend& backend, const SearchParams& p,
                            double tol = 1e-4) {
  std::vector<std::vector<ScoredDoc>> got(p.num_queries);
  MAXSIMD_ASSERT_OK(backend.Search(p, absl::MakeSpan(got), nullptr));
  const auto want = ReferenceSearch(p);
  for (int32_t q = 0; q < p.num_queries; ++q) {
    EXPECT_EQ(CompareRanking(got[q], want[q], tol), "") << "query " << q;
  }
}

SegmentRef Ref(const HostSegment& s) { return {s.View(), s.View()}; }

TEST(CpuBackendTest, RandomRaggedScanMatchesReference) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    for (int32_t dim : {7, 64, 96, 128}) {
      HostSegment a = RandomSegment(rng, 61, 1, 40, dim, dtype, 0);
      HostSegment b = RandomSegment(rng, 23, 1, 9, dim, dtype, 61);
      Batch batch;
      batch.dim = dim;
      batch.refs = {Ref(a), Ref(b)};
      for (int q = 0; q < 5; ++q) {
        std::uniform_int_distribution<int> lq(1, 33);
        batch.AddQuery(RandomQuery(rng, lq(rng), dim), 1 + q * 7);
      }
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim);
      ExpectMatchesReference(*MakeBackend(), batch.Params());
    }
  }
}

TEST(CpuBackendTest, KEqualsOneAndKAboveDocumentCount) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 50, 1, 20, 32, DType::kFloat16, 0);
  Batch batch;
  batch.dim = 32;
  batch.refs = {Ref(seg)};
  batch.AddQuery(RandomQuery(rng, 8, 32), 1);
  batch.AddQuery(RandomQuery(rng, 8, 32), 50);    // k == n
  batch.AddQuery(RandomQuery(rng, 8, 32), 4096);  // k > n
  std::vector<std::vector<ScoredDoc>> got(3);
  auto backend = MakeBackend();
  MAXSIMD_ASSERT_OK(
      backend->Search(batch.Params(), absl::MakeSpan(got), nullptr));
  EXPECT_EQ(got[0].size(), 1u);
  EXPECT_EQ(got[1].size(), 50u);
  EXPECT_EQ(got[2].size(), 50u);
  ExpectMatchesReference(*backend, batch.Params());
}

TEST(CpuBackendTest, OneTokenAndEmptyDocuments) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 40, 0, 1, 16, DType::kFloat16, 0);
  Batch batch;
  batch.dim = 16;
  batch.refs = {Ref(seg)};
  batch.AddQuery(RandomQuery(rng, 4, 16), 40);
  std::vector<std::vector<ScoredDoc>> got(1);
  MAXSIMD_ASSERT_OK(
      MakeBackend()->Search(batch.Params(), absl::MakeSpan(got), nullptr));
  ASSERT_EQ(got[0].size(), 40u);
  // Empty documents score -inf and rank last, lower index first.
  int64_t empties = 0;
  for (int64_t d = 0; d < seg.num_docs(); ++d) {
    empties += seg.cu_seqlens[d + 1] == seg.cu_seqlens[d];
  }
  ASSERT_GT(empties, 0);
  for (size_t i = got[0].size() - empties; i < got[0].size(); ++i) {
    EXPECT_EQ(got[0][i].score, -std::numeric_limits<float>::infinity());
  }
  ExpectMatchesReference(*MakeBackend(), batch.Params());
}

TEST(CpuBackendTest, TiesGoToTheLowerIndex) {
  // Every document is the same single token, so every score ties exactly.
  HostSegment seg;
  seg.dim = 4;
  seg.dtype = DType::kFloat32;
  seg.cu_seqlens = {0};
  for (int d = 0; d < 30; ++d) {
    seg.tokens32.insert(seg.tokens32.end(), {0.5f, -1.f, 2.f, 0.25f});
    seg.cu_seqlens.push_back(d + 1);
  }
  Batch batch;
  batch.dim = 4;
  batch.refs = {Ref(seg)};
  batch.AddQuery({1.f, 1.f, 1.f, 1.f}, 7);
  std::vector<std::vector<ScoredDoc>> got(1);
  MAXSIMD_ASSERT_OK(
      MakeBackend(2)->Search(batch.Params(), absl::MakeSpan(got), nullptr));
  ASSERT_EQ(got[0].size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(got[0][i].index, i);
    EXPECT_FLOAT_EQ(got[0][i].score, 1.75f);
  }
}

TEST(CpuBackendTest, DeletedDocumentsAreSkipped) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 64, 1, 12, 24, DType::kBFloat16, 100);
  Batch batch;
  batch.dim = 24;
  batch.AddQuery(RandomQuery(rng, 6, 24), 64);
  batch.refs = {Ref(seg)};
  std::vector<std::vector<ScoredDoc>> before(1);
  auto backend = MakeBackend();
  MAXSIMD_ASSERT_OK(
      backend->Search(batch.Params(), absl::MakeSpan(before), nullptr));
  const int64_t best = before[0][0].index - 100;
  seg.Delete(best);
  seg.Delete(63);
  batch.refs = {Ref(seg)};
  std::vector<std::vector<ScoredDoc>> after(1);
  MAXSIMD_ASSERT_OK(
      backend->Search(batch.Params(), absl::MakeSpan(after), nullptr));
  ASSERT_EQ(after[0].size(), before[0].size() - (best == 63 ? 1 : 2));
  for (const ScoredDoc& d : after[0]) {
    EXPECT_NE(d.index, 100 + best);
    EXPECT_NE(d.index, 100 + 63);
  }
  ExpectMatchesReference(*backend, batch.Params());
}

TEST(CpuBackendTest, GatherScoresOnlyCandidatesAcrossSegments) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment a = RandomSegment(rng, 30, 1, 25, 64, DType::kFloat16, 0);
  HostSegment b = RandomSegment(rng, 30, 1, 25, 64, DType::kFloat16, 30);
  b.Delete(4);
  Batch batch;
  batch.dim = 64;
  batch.refs = {Ref(a), Ref(b)};
  batch.cand_offsets = {0};
  std::vector<int64_t> docs(30);
  for (int64_t d = 0; d < 30; ++d) docs[d] = d;
  for (int q = 0; q < 4; ++q) {
    batch.AddQuery(RandomQuery(rng, 5 + q, 64), 3 + q);
    std::shuffle(docs.begin(), docs.end(), rng);  // distinct candidates
    for (int c = 0; c < 12; ++c) {
      batch.candidates.push_back({static_cast<int32_t>(c % 2), docs[c]});
    }
    batch.candidates.push_back({1, 4});  // tombstoned: skipped
    batch.cand_offsets.push_back(static_cast<int64_t>(batch.candidates.size()));
  }
  ExpectMatchesReference(*MakeBackend(), batch.Params());
}

TEST(CpuBackendTest, RejectsTopKOutOfRange) {
  std::mt19937_64 rng(1);
  HostSegment seg = RandomSegment(rng, 5, 1, 3, 8, DType::kFloat16, 0);
  Batch batch;
  batch.dim = 8;
  batch.refs = {Ref(seg)};
  batch.AddQuery(RandomQuery(rng, 2, 8), kMaxTopK + 1);
  std::vector<std::vector<ScoredDoc>> got(1);
  EXPECT_THAT(
      MakeBackend()->Search(batch.Params(), absl::MakeSpan(got), nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::HasSubstr("top_k[0]")));
}

TEST(CpuBackendTest, ResultsDoNotDependOnThreadCount) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 500, 1, 30, 32, DType::kFloat16, 0);
  Batch batch;
  batch.dim = 32;
  batch.refs = {Ref(seg)};
  batch.AddQuery(RandomQuery(rng, 9, 32), 100);
  std::vector<std::vector<ScoredDoc>> one(1), four(1);
  MAXSIMD_ASSERT_OK(
      MakeBackend(1)->Search(batch.Params(), absl::MakeSpan(one), nullptr));
  MAXSIMD_ASSERT_OK(
      MakeBackend(4)->Search(batch.Params(), absl::MakeSpan(four), nullptr));
  EXPECT_EQ(one[0], four[0]);
}

// ---------------------------------------------------------------------------
// The int8 layout (backend.h's formulas), in both query modes.

// A scan and a rerank batch over two ragged int8 segments (empty and
// one-token documents included, some deleted), each query mode against the
// reference.
TEST(CpuBackendTest, Int8ScanAndRerankMatchReferenceInBothQueryModes) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int32_t dim : {7, 64, 128}) {
    HostSegment a = RandomSegment(rng, 61, 0, 40, dim, DType::kInt8, 0);
    HostSegment b = RandomSegment(rng, 23, 1, 9, dim, DType::kInt8, 61);
    a.Delete(3);
    a.Delete(60);
    b.Delete(0);
    for (bool quantize : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "dim " << dim << " quantize_queries " << quantize);
      Batch scan;
      scan.dim = dim;
      scan.quantize_queries = quantize;
      scan.refs = {Ref(a), Ref(b)};
      Batch rerank = scan;
      rerank.cand_offsets = {0};
      std::vector<DocRef> all;
      for (int64_t d = 0; d < 61; ++d) all.push_back({0, d});
      for (int64_t d = 0; d < 23; ++d) all.push_back({1, d});
      for (int q = 0; q < 5; ++q) {
        std::uniform_int_distribution<int> lq(1, 33);
        const std::vector<float> query = RandomQuery(rng, lq(rng), dim);
        scan.AddQuery(query, 1 + q * 7);
        rerank.AddQuery(query, 1 + q * 3);
        std::shuffle(all.begin(), all.end(), rng);  // distinct candidates
        rerank.candidates.insert(rerank.candidates.end(), all.begin(),
                                 all.begin() + 20);
        if (std::none_of(all.begin(), all.begin() + 20, [](const DocRef& r) {
              return r.segment == 0 && r.doc == 3;
            })) {
          rerank.candidates.push_back({0, 3});  // deleted: skipped
        }
        rerank.cand_offsets.push_back(
            static_cast<int64_t>(rerank.candidates.size()));
      }
      ExpectMatchesReference(*MakeBackend(), scan.Params());
      ExpectMatchesReference(*MakeBackend(3), rerank.Params());
    }
  }
}

// The two formulas on numbers worked by hand. Document: codes
// {127, -64} scale 0.5 and {10, 20} scale 0.25. Query rows:
//   {127, -3}: fp16-exact, and its own quantisation (scale 1): every cell
//     is exact; the best is 0.5 * (127 * 127 + 3 * 64) = 8160.5;
//   {0, 0}: scores 0 in both modes;
//   {1 + 2^-12, 0}: rounds to fp16 1.0, so the fp16 mode's best cell is
//     0.5 * 127 = 63.5 exactly, where the unrounded value would give
//     63.5155; quantised, its scale is (1 + 2^-12) / 127 and its codes
//     {127, 0}, so the cell is scale * (0.5 * 16129) = 63.5155.
TEST(CpuBackendTest, Int8ScoresFollowTheStatedFormulas) {
  HostSegment seg;
  seg.dim = 2;
  seg.dtype = DType::kInt8;
  seg.cu_seqlens = {0, 2};
  seg.tokens8 = {127, -64, 10, 20};
  seg.scales = {0.5f, 0.25f};
  const float odd = 1.f + 1.f / 4096.f;
  const std::vector<float> query = {127.f, -3.f, 0.f, 0.f, odd, 0.f};
  for (bool quantize : {false, true}) {
    Batch batch;
    batch.dim = 2;
    batch.quantize_queries = quantize;
    batch.refs = {Ref(seg)};
    batch.AddQuery(query, 1);
    std::vector<std::vector<ScoredDoc>> got(1);
    MAXSIMD_ASSERT_OK(
        MakeBackend()->Search(batch.Params(), absl::MakeSpan(got), nullptr));
    ASSERT_EQ(got[0].size(), 1u);
    const float third = quantize ? odd / 127.f * (0.5f * 16129.f) : 63.5f;
    EXPECT_EQ(got[0][0].score, 8160.5f + third) << "quantize " << quantize;
    EXPECT_NEAR(ReferenceScore(query.data(), 3, seg.View(), 0, quantize),
                8160.5 + (quantize ? 63.5 * odd : 63.5), 1e-3);
  }
}

// An int8 view without its scales is a caller's bug, refused by name.
TEST(CpuBackendTest, Int8SegmentWithoutScalesIsRefused) {
  std::mt19937_64 rng(1);
  HostSegment seg = RandomSegment(rng, 5, 1, 3, 8, DType::kInt8, 0);
  Batch batch;
  batch.dim = 8;
  SegmentRef ref = Ref(seg);
  ref.resident.scales = nullptr;
  batch.refs = {ref};
  batch.AddQuery(RandomQuery(rng, 2, 8), 3);
  std::vector<std::vector<ScoredDoc>> got(1);
  EXPECT_THAT(
      MakeBackend()->Search(batch.Params(), absl::MakeSpan(got), nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::HasSubstr("segments[0] is int8 and has no scales")));
  EXPECT_TRUE(MakeBackend()->SupportsDType(DType::kInt8, 8));
}

SegmentRef PlaidRef(const ::maxsimd::testing::PlaidSegment& s, int64_t base) {
  return {s.View(base), s.View(base)};
}

// PLAID segments at every nbits: scans over two segments (empty, one-token
// and deleted documents) and reranks match the reference.
TEST(CpuBackendTest, PlaidScanAndRerankMatchReferenceAtEveryNbits) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int nbits : {1, 2, 4, 8}) {
    for (int32_t dim : {8, 64, 128}) {
      SCOPED_TRACE(::testing::Message() << "nbits " << nbits << " dim " << dim);
      std::vector<int64_t> lens_a, lens_b;
      std::uniform_int_distribution<int64_t> len(1, 40);
      for (int i = 0; i < 41; ++i) lens_a.push_back(i == 5 ? 0 : len(rng));
      for (int i = 0; i < 13; ++i) lens_b.push_back(i == 0 ? 1 : len(rng));
      auto a = ::maxsimd::testing::MakePlaidSegment(
          dim, nbits, 37, lens_a, static_cast<uint32_t>(rng()));
      auto b = ::maxsimd::testing::MakePlaidSegment(
          dim, nbits, 37, lens_b, static_cast<uint32_t>(rng()), false);
      a.Delete(7);
      Batch scan;
      scan.dim = dim;
      scan.refs = {PlaidRef(a, 0), PlaidRef(b, 41)};
      Batch rerank = scan;
      rerank.cand_offsets = {0};
      for (int q = 0; q < 4; ++q) {
        std::uniform_int_distribution<int> lq(1, 33);
        const std::vector<float> query = RandomQuery(rng, lq(rng), dim);
        scan.AddQuery(query, 1 + q * 9);
        rerank.AddQuery(query, 1 + q * 3);
        for (int64_t d = q; d < 41; d += 3) rerank.candidates.push_back({0, d});
        for (int64_t d = q; d < 13; d += 2) rerank.candidates.push_back({1, d});
        rerank.cand_offsets.push_back(
            static_cast<int64_t>(rerank.candidates.size()));
      }
      ExpectMatchesReference(*MakeBackend(), scan.Params());
      ExpectMatchesReference(*MakeBackend(3), rerank.Params());
    }
  }
}

// The PLAID formula on numbers worked by hand: dim 4, nbits 2, bucket
// weights {-0.5, -0.25, 0.25, 0.5}, centroid {1, 0, 0, 0}. Residual byte
// 0b00'10'01'11 holds groups 00, 10, 01, 11 from the top; each group is its
// bucket index bit-reversed, so the buckets are 0, 1, 2, 3 and the token
// decodes to {1 - 0.5, -0.25, 0.25, 0.5} = {0.5, -0.25, 0.25, 0.5}. With
// scale 2 the query row {1, 2, 3, 4} scores 2 * (0.5 - 0.5 + 0.75 + 2) =
// 5.5.
// PlaidLevels (the GPU's int8 MMA path scores residuals with them): the
// largest |weight| maps to +-127, every level times the step lies within
// half a step of its weight, ties round to even, and all-zero weights give
// a step of 1 and zero levels.
TEST(CpuBackendTest, PlaidLevelsStayWithinHalfAStep) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  std::uniform_real_distribution<float> w(-0.2f, 0.2f);
  for (int nbits : {1, 2, 4}) {
    std::vector<float> weights(static_cast<size_t>(1) << nbits);
    for (float& x : weights) x = w(rng);
    int8_t levels[16] = {};
    const float step = PlaidLevels(weights.data(), nbits, levels);
    float most = 0.f;
    for (float x : weights) most = std::max(most, std::fabs(x));
    EXPECT_EQ(step, most / 127.f);
    int peak = 0;
    for (size_t b = 0; b < weights.size(); ++b) {
      EXPECT_LE(std::fabs(levels[b] * step - weights[b]), step / 2 * 1.0001f)
          << "nbits " << nbits << " bucket " << b;
      peak = std::max(peak, std::abs(int{levels[b]}));
    }
    EXPECT_EQ(peak, 127) << "nbits " << nbits;
  }
  // Step 1 (the largest |weight| is 127): the halves round to even.
  const float ties[4] = {-127.f, -63.5f, 62.5f, 127.f};
  int8_t levels[4] = {};
  EXPECT_EQ(PlaidLevels(ties, 2, levels), 1.f);
  EXPECT_EQ(levels[0], -127);
  EXPECT_EQ(levels[1], -64);
  EXPECT_EQ(levels[2], 62);
  EXPECT_EQ(levels[3], 127);
  const float zeros[2] = {0.f, 0.f};
  int8_t zero_levels[2] = {5, 5};
  EXPECT_EQ(PlaidLevels(zeros, 1, zero_levels), 1.f);
  EXPECT_EQ(zero_levels[0], 0);
  EXPECT_EQ(zero_levels[1], 0);
}

// PlaidOffsetLevels (the int8 MMA path's levels at 4 bits, PlaidMmaLevels):
// every level in [0, 127], the least weight at 0 and the largest at 127,
// offset + level * step within half a step of its weight; equal weights
// give a step of 1 and zero levels. PlaidMmaLevels takes them at 4 bits
// only.
TEST(CpuBackendTest, PlaidOffsetLevelsSpanTheWeightsFromZero) {
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  std::uniform_real_distribution<float> w(-0.2f, 0.15f);
  for (int nbits : {1, 2, 4}) {
    std::vector<float> weights(static_cast<size_t>(1) << nbits);
    for (float& x : weights) x = w(rng);
    int8_t levels[16] = {};
    float offset = 1.f;
    const float step =
        PlaidOffsetLevels(weights.data(), nbits, levels, &offset);
    const auto [least, most] =
        std::minmax_element(weights.begin(), weights.end());
    EXPECT_EQ(offset, *least);
    EXPECT_EQ(step, (*most - *least) / 127.f);
    int low = 127, high = 0;
    for (size_t b = 0; b < weights.size(); ++b) {
      EXPECT_LE(std::fabs(offset + levels[b] * step - weights[b]),
                step / 2 * 1.0001f)
          << "nbits " << nbits << " bucket " << b;
      low = std::min(low, int{levels[b]});
      high = std::max(high, int{levels[b]});
    }
    EXPECT_EQ(low, 0) << "nbits " << nbits;
    EXPECT_EQ(high, 127) << "nbits " << nbits;
    int8_t mma[16] = {};
    float mma_offset = 1.f;
    const float mma_step =
        PlaidMmaLevels(weights.data(), nbits, mma, &mma_offset);
    int8_t signed_levels[16] = {};
    const float signed_step = PlaidLevels(weights.data(), nbits, signed_levels);
    EXPECT_EQ(mma_step, nbits == 4 ? step : signed_step);
    EXPECT_EQ(mma_offset, nbits == 4 ? offset : 0.f);
    for (size_t b = 0; b < weights.size(); ++b) {
      EXPECT_EQ(mma[b], nbits == 4 ? levels[b] : signed_levels[b]);
    }
  }
  const float same[4] = {0.03f, 0.03f, 0.03f, 0.03f};
  int8_t same_levels[4] = {5, 5, 5, 5};
  float offset = 0.f;
  EXPECT_EQ(PlaidOffsetLevels(same, 2, same_levels, &offset), 1.f);
  EXPECT_EQ(offset, 0.03f);
  for (int8_t level : same_levels) EXPECT_EQ(level, 0);
}

TEST(CpuBackendTest, PlaidScoresFollowTheStatedFormula) {
  ::maxsimd::testing::PlaidSegment seg;
  seg.dim = 4;
  seg.nbits = 2;
  seg.centroids = {0.f, 1.f, 0.f, 0.f, 1.f, 0.f, 0.f, 0.f};
  seg.bucket_weights = {-0.5f, -0.25f, 0.25f, 0.5f};
  seg.codes = {1};
  seg.residuals = {0b00100111};
  seg.scales = {2.f};
  seg.cu_seqlens = {0, 1};
  std::vector<float> v(4);
  PlaidRowDecoder(seg.bucket_weights.data(), 2, 4)
      .DecodeToken(seg.View(), 0, v.data());
  EXPECT_EQ(v, (std::vector<float>{0.5f, -0.25f, 0.25f, 0.5f}));
  Batch batch;
  batch.dim = 4;
  batch.refs = {PlaidRef(seg, 0)};
  batch.AddQuery({1.f, 2.f, 3.f, 4.f}, 1);
  std::vector<std::vector<ScoredDoc>> got(1);
  MAXSIMD_ASSERT_OK(
      MakeBackend()->Search(batch.Params(), absl::MakeSpan(got), nullptr));
  ASSERT_EQ(got[0].size(), 1u);
  EXPECT_EQ(got[0][0].score, 5.5f);
  EXPECT_EQ(ReferenceScore(batch.tokens.data(), 1, seg.View(), 0), 5.5);
  // Without its codes the view is refused by name.
  SegmentRef bad = PlaidRef(seg, 0);
  bad.resident.codes = nullptr;
  batch.refs = {bad};
  EXPECT_THAT(
      MakeBackend()->Search(batch.Params(), absl::MakeSpan(got), nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::HasSubstr("segments[0] is PLAID and lacks")));
}

// The fault points of the CPU backend (kernels/base/fault_injection.h).
class CpuBackendFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MAXSIMD_SKIP_WITHOUT_FAULT_INJECTION();
    std::mt19937_64 rng(::maxsimd::testing::TestSeed());
    segment_ = RandomSegment(rng, 20, 1, 8, 16, DType::kFloat16, 0);
    batch_.dim = 16;
    batch_.refs = {Ref(segment_)};
    batch_.AddQuery(RandomQuery(rng, 4, 16), 5);
    batch_.AddQuery(RandomQuery(rng, 3, 16), 7);
  }
  void TearDown() override { fault::DisarmAll(); }

  HostSegment segment_;
  Batch batch_;
};

TEST_F(CpuBackendFaultTest, SearchFaultIsStickyAsOnTheGpu) {
  auto backend = MakeBackend();
  ExpectMatchesReference(*backend, batch_.Params());
  EXPECT_TRUE(backend->healthy());
  fault::ScopedFault fault(fault::kCpuSearch, fault::Schedule::Once());
  std::vector<std::vector<ScoredDoc>> got(2);
  EXPECT_THAT(backend->Search(batch_.Params(), absl::MakeSpan(got), nullptr),
              StatusIs(absl::StatusCode::kUnavailable,
                       ::testing::HasSubstr("fault point cpu.search")));
  EXPECT_FALSE(backend->healthy());
  // The point failed once; every later call fails on the backend's state.
  const auto failed = StatusIs(absl::StatusCode::kUnavailable,
                               ::testing::HasSubstr("has failed"));
  EXPECT_THAT(backend->Search(batch_.Params(), absl::MakeSpan(got), nullptr),
              failed);
  const float data[4] = {};
  EXPECT_THAT(backend->Upload(data, sizeof(data)), failed);
  EXPECT_THAT(backend->Pin(data, sizeof(data)), failed);
  EXPECT_EQ(fault::Hits(fault::kCpuSearch), 1);
  EXPECT_FALSE(backend->healthy());
}

TEST_F(CpuBackendFaultTest, AllocationFaultIsResourceExhaustedAndNotSticky) {
  auto backend = MakeBackend();
  fault::ScopedFault fault(fault::kCpuAlloc, fault::Schedule::NthHit(2));
  const float data[4] = {};
  MAXSIMD_EXPECT_OK(backend->Upload(data, sizeof(data)));
  EXPECT_THAT(backend->Upload(data, sizeof(data)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("16 bytes do not fit")));
  MAXSIMD_EXPECT_OK(backend->Pin(data, sizeof(data)));
  EXPECT_EQ(fault::Failures(fault::kCpuAlloc), 1);
  EXPECT_TRUE(backend->healthy());
  ExpectMatchesReference(*backend, batch_.Params());
}

}  // namespace
}  // namespace maxsimd
