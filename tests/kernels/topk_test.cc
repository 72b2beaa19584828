// GPU top-k (kernels/topk.cu through GpuBackend::Search): k buckets, k above
// the document count, ties, multi-round selection and chunked scans.
#include "kernels/topk.h"

#include <random>

#include "gtest/gtest.h"
#include "tests/kernels/gpu_test_util.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::Batch;
using ::maxsimd::testing::DeviceSegment;
using ::maxsimd::testing::ExpectMatchesReference;
using ::maxsimd::testing::GpuSearch;
using ::maxsimd::testing::HostSegment;
using ::maxsimd::testing::MakeGpuBackend;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::RandomSegment;
using ::maxsimd::testing::SharedGpuBackend;
using ::maxsimd::testing::Upload;

TEST(GpuTopKTest, KOneHundredAnd4096AndAboveDocumentCount) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment big = RandomSegment(rng, 6000, 1, 6, 64, DType::kFloat16, 0);
  HostSegment small = RandomSegment(rng, 50, 1, 6, 64, DType::kFloat16, 6000);
  DeviceSegment db = Upload(SharedGpuBackend(), big),
                ds = Upload(SharedGpuBackend(), small);
  for (int32_t k : {1, 100, 512, 513, 4096}) {
    SCOPED_TRACE(::testing::Message() << "k " << k);
    Batch batch;
    batch.dim = 64;
    batch.refs = {db.ref};
    batch.AddQuery(RandomQuery(rng, 8, 64), k);
    batch.AddQuery(RandomQuery(rng, 3, 64), std::max(1, k / 2));
    ExpectMatchesReference(SharedGpuBackend(), batch, DType::kFloat16);
  }
  Batch batch;
  batch.dim = 64;
  batch.refs = {ds.ref};
  batch.AddQuery(RandomQuery(rng, 8, 64), 4096);  // k > n
  batch.AddQuery(RandomQuery(rng, 8, 64), 50);    // k == n
  const auto got = GpuSearch(SharedGpuBackend(), batch.Params());
  EXPECT_EQ(got[0].size(), 50u);
  EXPECT_EQ(got[1].size(), 50u);
  ExpectMatchesReference(SharedGpuBackend(), batch, DType::kFloat16);
}

// 40k documents: more than one select slice, so partial rounds run (three
// of them for k = 4096), and with a small scan chunk the segment is scanned
// in pieces whose results merge with the running top k.
TEST(GpuTopKTest, MultiRoundSelectionAndChunkedScan) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 40000, 1, 3, 64, DType::kBFloat16, 7);
  for (int64_t d = 0; d < 40000; d += 7) seg.Delete(d);
  auto options = ::maxsimd::testing::TestOptions();
  for (int64_t chunk_entries : {int64_t{1} << 22, int64_t{9000}}) {
    SCOPED_TRACE(::testing::Message()
                 << "scan_chunk_entries " << chunk_entries);
    options.scan_chunk_entries = chunk_entries;
    auto backend = MakeGpuBackend(options);
    ASSERT_NE(backend, nullptr);
    DeviceSegment d = Upload(*backend, seg);
    Batch batch;
    batch.dim = 64;
    batch.refs = {d.ref};
    batch.AddQuery(RandomQuery(rng, 5, 64), 4096);
    batch.AddQuery(RandomQuery(rng, 5, 64), 100);
    batch.AddQuery(RandomQuery(rng, 5, 64), 1);
    ExpectMatchesReference(*backend, batch, DType::kBFloat16);
  }
}

TEST(GpuTopKTest, TiesGoToTheLowerIndexAcrossChunksAndSegments) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  // Every document holds the same token, so every score ties exactly.
  auto make = [](int64_t n, int64_t base) {
    HostSegment s;
    s.dim = 64;
    s.dtype = DType::kFloat16;
    s.base_index = base;
    s.cu_seqlens = {0};
    std::vector<float> tok(64);
    for (int j = 0; j < 64; ++j) tok[j] = 0.25f * ((j % 5) - 2);
    s.tokens16.resize(n * 64);
    for (int64_t d = 0; d < n; ++d) {
      ConvertFromFloat(tok.data(), 64, DType::kFloat16, &s.tokens16[d * 64]);
      s.cu_seqlens.push_back(d + 1);
    }
    return s;
  };
  HostSegment a = make(9000, 20000), b = make(500, 100);
  a.Delete(0);
  auto options = ::maxsimd::testing::TestOptions();
  options.scan_chunk_entries = 3000;  // three chunks of segment a
  auto backend = MakeGpuBackend(options);
  ASSERT_NE(backend, nullptr);
  DeviceSegment da = Upload(*backend, a), db = Upload(*backend, b);
  Batch batch;
  batch.dim = 64;
  batch.refs = {da.ref, db.ref};
  std::vector<float> q(64, 1.f);
  batch.AddQuery(q, 7);
  batch.AddQuery(q, 4096);
  const auto got = GpuSearch(*backend, batch.Params());
  ASSERT_EQ(got[0].size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(got[0][i].index, 100 + i);
  ASSERT_EQ(got[1].size(), 4096u);
  for (int i = 0; i < 4096; ++i) {
    ASSERT_EQ(got[1][i].index, i < 500 ? 100 + i : 20001 + (i - 500)) << i;
    ASSERT_EQ(got[1][i].score, got[1][0].score);
  }
}

}  // namespace
}  // namespace maxsimd
