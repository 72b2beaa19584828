// CPU backend against the scalar reference on random ragged shapes.
#include "kernels/maxsim_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "kernels/maxsim_reference.h"
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

}  // namespace
}  // namespace maxsimd
