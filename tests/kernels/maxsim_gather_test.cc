// GPU gather (rerank) path (kernels/maxsim_gather.cu through
// GpuBackend::Search) against the scalar oracle.
#include "kernels/maxsim_gather.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"
#include "tests/kernels/gpu_test_util.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::AddCandidates;
using ::maxsimd::testing::Batch;
using ::maxsimd::testing::DeviceSegment;
using ::maxsimd::testing::ExpectMatchesReference;
using ::maxsimd::testing::GpuSearch;
using ::maxsimd::testing::HostSegment;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::RandomSegment;
using ::maxsimd::testing::SharedGpuBackend;
using ::maxsimd::testing::Upload;

TEST(GpuGatherTest, RandomCandidatesEveryDimAndDtype) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int32_t dim : {64, 96, 128, 200, 256, 7}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim);
      HostSegment a = RandomSegment(rng, 80, 1, 40, dim, dtype, 0);
      HostSegment b = RandomSegment(rng, 60, 0, 20, dim, dtype, 500);
      b.Delete(5);
      DeviceSegment da = Upload(SharedGpuBackend(), a),
                    db = Upload(SharedGpuBackend(), b);
      Batch batch;
      batch.dim = dim;
      batch.refs = {da.ref, db.ref};
      std::uniform_int_distribution<int> lq(1, 70), nc(0, 90);
      for (int q = 0; q < 6; ++q) {
        // Query 5 is empty: its candidates all score 0.
        batch.AddQuery(RandomQuery(rng, q == 5 ? 0 : lq(rng), dim),
                       q == 0 ? 1 : 3 + q * 17);
        AddCandidates(rng, batch, 80, 60, nc(rng));
      }
      ExpectMatchesReference(SharedGpuBackend(), batch, dtype);
    }
  }
}

TEST(GpuGatherTest, BatchesFromOneTo256Queries) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment a = RandomSegment(rng, 400, 1, 30, 128, DType::kFloat16, 0);
  HostSegment b = RandomSegment(rng, 100, 1, 30, 128, DType::kFloat16, 400);
  DeviceSegment da = Upload(SharedGpuBackend(), a),
                db = Upload(SharedGpuBackend(), b);
  for (int nq : {1, 3, 64, 256}) {
    SCOPED_TRACE(::testing::Message() << "num_queries " << nq);
    Batch batch;
    batch.dim = 128;
    batch.refs = {da.ref, db.ref};
    for (int q = 0; q < nq; ++q) {
      batch.AddQuery(RandomQuery(rng, nq == 1 ? 32 : 1 + q % 20, 128), 10);
      AddCandidates(rng, batch, 400, 100, nq == 1 ? 500 : 30);
    }
    ExpectMatchesReference(SharedGpuBackend(), batch, DType::kFloat16);
  }
}

TEST(GpuGatherTest, DuplicatesAreScoredAsGivenAndDeletedSkipped) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment a = RandomSegment(rng, 20, 1, 30, 64, DType::kBFloat16, 0);
  HostSegment b = RandomSegment(rng, 20, 1, 30, 64, DType::kBFloat16, 20);
  b.Delete(2);
  DeviceSegment da = Upload(SharedGpuBackend(), a),
                db = Upload(SharedGpuBackend(), b);
  Batch batch;
  batch.dim = 64;
  batch.refs = {da.ref, db.ref};
  batch.cand_offsets = {0};
  batch.AddQuery(RandomQuery(rng, 9, 64), 4096);
  batch.candidates = {{0, 3}, {1, 7}, {0, 3}, {1, 2}, {0, 19}, {1, 7}, {0, 3}};
  batch.cand_offsets.push_back(7);
  const auto got = GpuSearch(SharedGpuBackend(), batch.Params());
  Batch rounded = batch;
  rounded.tokens = ::maxsimd::testing::RoundTo(batch.tokens, DType::kBFloat16);
  const auto want = ReferenceSearch(rounded.Params());
  ASSERT_EQ(got[0].size(), 6u);  // (1, 2) is deleted
  ASSERT_EQ(want[0].size(), 6u);
  std::vector<int64_t> got_ids, want_ids;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(got[0][i].score, want[0][i].score,
                1e-3 * std::max(1.0, std::fabs(double{want[0][i].score})));
    got_ids.push_back(got[0][i].index);
    want_ids.push_back(want[0][i].index);
  }
  EXPECT_EQ(got_ids, want_ids);  // duplicates tie exactly: same order
  EXPECT_EQ(std::count(got_ids.begin(), got_ids.end(), 3), 3);
  EXPECT_EQ(std::count(got_ids.begin(), got_ids.end(), 27), 2);
}

TEST(GpuGatherTest, ManyCandidatesMultiRoundTopK) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment a = RandomSegment(rng, 30000, 1, 4, 64, DType::kFloat16, 0);
  HostSegment b = RandomSegment(rng, 1000, 1, 4, 64, DType::kFloat16, 1 << 20);
  DeviceSegment da = Upload(SharedGpuBackend(), a),
                db = Upload(SharedGpuBackend(), b);
  Batch batch;
  batch.dim = 64;
  batch.refs = {da.ref, db.ref};
  batch.AddQuery(RandomQuery(rng, 6, 64), 4096);
  AddCandidates(rng, batch, 30000, 1000, 20000);
  batch.AddQuery(RandomQuery(rng, 6, 64), 100);
  AddCandidates(rng, batch, 30000, 1000, 9000);
  batch.AddQuery(RandomQuery(rng, 6, 64), 3);
  AddCandidates(rng, batch, 30000, 1000, 0);  // no candidates: no results
  ExpectMatchesReference(SharedGpuBackend(), batch, DType::kFloat16);
}

}  // namespace
}  // namespace maxsimd
