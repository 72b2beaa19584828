// GPU scan path (kernels/maxsim_scan.cu through GpuBackend::Search) against
// the scalar oracle on random ragged shapes. Skips without a CUDA device.
#include "kernels/maxsim_scan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/gpu_test_util.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::Batch;
using ::maxsimd::testing::DeviceSegment;
using ::maxsimd::testing::ExpectMatchesReference;
using ::maxsimd::testing::HostSegment;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::RandomSegment;
using ::maxsimd::testing::SharedGpuBackend;
using ::maxsimd::testing::Upload;

TEST(GpuScanTest, RandomRaggedShapesEveryDimAndDtype) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int32_t dim : {64, 96, 128, 200, 256, 7}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim);
      HostSegment a = RandomSegment(rng, 97, 1, 45, dim, dtype, 0);
      HostSegment b = RandomSegment(rng, 31, 1, 9, dim, dtype, 97);
      b.Delete(3);
      b.Delete(30);
      DeviceSegment da = Upload(SharedGpuBackend(), a),
                    db = Upload(SharedGpuBackend(), b);
      Batch batch;
      batch.dim = dim;
      batch.refs = {da.ref, db.ref};
      // Query lengths from 1 to 70: one pass of 32 rows, and several queries
      // per 128-row pass (segmented sums), and a query split across passes.
      std::uniform_int_distribution<int> lq(1, 70);
      for (int q = 0; q < 5; ++q) {
        batch.AddQuery(RandomQuery(rng, lq(rng), dim), 1 + q * 23);
      }
      ExpectMatchesReference(SharedGpuBackend(), batch, dtype);
      // One query alone, Lq = 32: the single-query fast path.
      Batch one = batch;
      one.tokens.clear();
      one.offsets = {0};
      one.top_k.clear();
      one.AddQuery(RandomQuery(rng, 32, dim), 100);
      ExpectMatchesReference(SharedGpuBackend(), one, dtype);
    }
  }
}

TEST(GpuScanTest, QueryBatchesFromOneTo256) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 300, 0, 24, 128, DType::kFloat16, 0);
  DeviceSegment d = Upload(SharedGpuBackend(), seg);
  for (int nq : {1, 2, 17, 64, 256}) {
    SCOPED_TRACE(::testing::Message() << "num_queries " << nq);
    Batch batch;
    batch.dim = 128;
    batch.refs = {d.ref};
    std::uniform_int_distribution<int> lq(0, 12);  // includes empty queries
    for (int q = 0; q < nq; ++q) {
      batch.AddQuery(RandomQuery(rng, nq == 1 ? 32 : lq(rng), 128), 10);
    }
    ExpectMatchesReference(SharedGpuBackend(), batch, DType::kFloat16);
  }
}

TEST(GpuScanTest, LongQuerySpansManyPasses) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    HostSegment seg = RandomSegment(rng, 40, 1, 300, 128, dtype, 5);
    DeviceSegment d = Upload(SharedGpuBackend(), seg);
    Batch batch;
    batch.dim = 128;
    batch.refs = {d.ref};
    batch.AddQuery(RandomQuery(rng, 300, 128), 40);
    ExpectMatchesReference(SharedGpuBackend(), batch, dtype);
  }
}

TEST(GpuScanTest, OneTokenAndEmptyDocuments) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 60, 0, 1, 64, DType::kBFloat16, 0);
  DeviceSegment d = Upload(SharedGpuBackend(), seg);
  Batch batch;
  batch.dim = 64;
  batch.refs = {d.ref};
  batch.AddQuery(RandomQuery(rng, 4, 64), 60);
  batch.AddQuery({}, 5);  // empty query: every document scores 0
  const auto got =
      ::maxsimd::testing::GpuSearch(SharedGpuBackend(), batch.Params());
  ASSERT_EQ(got[0].size(), 60u);
  int64_t empties = 0;
  for (int64_t i = 0; i < seg.num_docs(); ++i) {
    empties += seg.cu_seqlens[i + 1] == seg.cu_seqlens[i];
  }
  ASSERT_GT(empties, 0);
  for (size_t i = got[0].size() - empties; i < got[0].size(); ++i) {
    EXPECT_EQ(got[0][i].score, -std::numeric_limits<float>::infinity());
  }
  ASSERT_EQ(got[1].size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got[1][i].score, 0.f);
    EXPECT_EQ(got[1][i].index, i);
  }
  ExpectMatchesReference(SharedGpuBackend(), batch, DType::kBFloat16);
}

TEST(GpuScanTest, DeletedDocumentsAreSkipped) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 200, 1, 30, 96, DType::kFloat16, 1000);
  for (int64_t d = 0; d < 200; d += 3) seg.Delete(d);
  DeviceSegment d = Upload(SharedGpuBackend(), seg);
  Batch batch;
  batch.dim = 96;
  batch.refs = {d.ref};
  batch.AddQuery(RandomQuery(rng, 20, 96), 4096);
  const auto got =
      ::maxsimd::testing::GpuSearch(SharedGpuBackend(), batch.Params());
  EXPECT_EQ(got[0].size(), 200u - 67u);
  for (const ScoredDoc& s : got[0]) EXPECT_NE((s.index - 1000) % 3, 0);
  ExpectMatchesReference(SharedGpuBackend(), batch, DType::kFloat16);
}

// Every document the GPU returns for `batch` scores what the oracle gives
// that same document, within rel_tol. Stricter than ExpectMatchesReference,
// whose rank-by-rank comparison forgives a document scored a little off
// where many documents score alike. `batch` asks for every document.
void ExpectSameDocumentScores(Backend& backend, const Batch& batch, DType dtype,
                              double rel_tol) {
  const auto got = ::maxsimd::testing::GpuSearch(backend, batch.Params());
  const auto want = ::maxsimd::testing::GpuReferenceSearch(batch, dtype);
  ASSERT_EQ(got.size(), want.size());
  for (size_t q = 0; q < got.size(); ++q) {
    ASSERT_EQ(got[q].size(), want[q].size()) << "query " << q;
    std::map<int64_t, float> expected;
    for (const ScoredDoc& s : want[q]) expected[s.index] = s.score;
    for (const ScoredDoc& s : got[q]) {
      const auto it = expected.find(s.index);
      ASSERT_NE(it, expected.end()) << "query " << q << " doc " << s.index;
      if (std::isinf(it->second)) {  // an empty document
        EXPECT_EQ(s.score, it->second) << "query " << q << " doc " << s.index;
        continue;
      }
      EXPECT_NEAR(s.score, it->second,
                  rel_tol * std::max(1.0, std::fabs(double{it->second})))
          << "query " << q << " doc " << s.index;
    }
  }
}

// Documents long enough that most 128-column parts of a chunk hold one or
// two of them: the kernel's per-part plans (one max over the part, or one
// pass that splits it at a document boundary) instead of the segment walk.
// 128 documents of 129 tokens put a boundary at every column of a part;
// lengths 128, 256 and 640 end documents on part and chunk edges; the long
// ones carry their maxima across parts and chunks; deleted and empty
// documents sit between them. Units of 64 documents: with the default of
// about eight waves of blocks, a corpus this small gets one document per
// unit, and no chunk holds two.
TEST(GpuScanTest, DocumentBoundariesAtEveryColumnOfAPart) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions options = ::maxsimd::testing::TestOptions();
  options.tma_scan_docs_per_unit = 64;
  const std::unique_ptr<Backend> backend =
      ::maxsimd::testing::MakeGpuBackend(options);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  std::vector<int32_t> lengths(128, 129);
  for (int32_t l : {128, 256, 640, 0, 300, 127, 1, 255, 129, 384, 2, 200}) {
    lengths.push_back(l);
  }
  std::uniform_int_distribution<int32_t> len(100, 400);
  for (int i = 0; i < 40; ++i) lengths.push_back(len(rng));
  std::vector<DType> dtypes = {DType::kFloat16, DType::kBFloat16};
  // Only the TMA kernels score int8 (MAXSIMD_TEST_KERNELS=mma: not here).
  if (::maxsimd::testing::TestOptions().use_tma) dtypes.push_back(DType::kInt8);
  for (DType dtype : dtypes) {
    for (int32_t dim : {64, 128}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim);
      HostSegment seg =
          ::maxsimd::testing::SegmentWithLengths(rng, lengths, dim, dtype, 7);
      for (int64_t d : {5, 60, 61, 130, 133}) seg.Delete(d);
      DeviceSegment d = Upload(*backend, seg);
      const int32_t all = static_cast<int32_t>(lengths.size());
      // Five queries of 32 tokens: the two-warpgroup kernel, three 64-row
      // tiles (two for one warpgroup, one for the other).
      Batch batch;
      batch.dim = dim;
      batch.refs = {d.ref};
      for (int q = 0; q < 5; ++q) {
        batch.AddQuery(RandomQuery(rng, 32, dim), all);
      }
      Batch one;  // one query: the single-query kernel
      one.dim = dim;
      one.refs = {d.ref};
      one.AddQuery(RandomQuery(rng, 32, dim), all);
      for (bool quantize : {false, true}) {
        // Quantised queries: the int8 MMA kernel.
        if (quantize && dtype != DType::kInt8) continue;
        SCOPED_TRACE(::testing::Message() << "quantize_queries " << quantize);
        batch.quantize_queries = quantize;
        one.quantize_queries = quantize;
        ExpectMatchesReference(*backend, batch, dtype);
        ExpectMatchesReference(*backend, one, dtype);
        ExpectSameDocumentScores(*backend, batch, dtype, 1e-4);
        ExpectSameDocumentScores(*backend, one, dtype, 1e-4);
      }
    }
  }
}

TEST(GpuScanTest, ScoresWithinToleranceOfFp32Reference) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    HostSegment seg = RandomSegment(rng, 64, 16, 64, 128, dtype, 0);
    DeviceSegment d = Upload(SharedGpuBackend(), seg);
    Batch batch;
    batch.dim = 128;
    batch.refs = {d.ref};
    batch.AddQuery(RandomQuery(rng, 32, 128), 64);
    const auto got =
        ::maxsimd::testing::GpuSearch(SharedGpuBackend(), batch.Params());
    ASSERT_EQ(got[0].size(), 64u);
    for (const ScoredDoc& s : got[0]) {
      const double ref =
          ReferenceScore(batch.tokens.data(), 32, seg.View(), s.index);
      EXPECT_NEAR(s.score, ref, 1e-3 * std::max(1.0, std::fabs(ref)))
          << DTypeName(dtype) << " doc " << s.index;
    }
  }
}

}  // namespace
}  // namespace maxsimd
