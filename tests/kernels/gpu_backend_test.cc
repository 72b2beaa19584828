// GpuBackend: creation, Upload (including out-of-memory), argument errors,
// timing, a corpus of more than 2^31 elements, and failures injected at the
// fault points gpu.malloc and gpu.kernel (the twins of maxsim_cpu_test's
// CpuBackendFaultTest).
#include "kernels/gpu_backend.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/base/fault_injection.h"
#include "kernels/base/half.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/fault_skip.h"
#include "tests/support/plaid_segment.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::Batch;
using ::maxsimd::testing::DeviceSegment;
using ::maxsimd::testing::GpuSearch;
using ::maxsimd::testing::HostSegment;
using ::maxsimd::testing::MakeGpuBackend;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::RandomSegment;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::Upload;

TEST(GpuBackendTest, CreateRejectsABadOrdinal) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions o = ::maxsimd::testing::TestOptions();
  o.device = GpuBackend::DeviceCount();
  EXPECT_THAT(GpuBackend::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument));
  o.device = 0;
  o.num_workers = 0;
  EXPECT_THAT(GpuBackend::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(GpuBackendTest, UploadOutOfMemoryLeavesTheBackendHealthy) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  const char byte = 1;
  // 1 PiB: more than any GPU has. The host pointer is never read, since the
  // allocation fails first.
  EXPECT_THAT(backend->Upload(&byte, size_t{1} << 50),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(backend->healthy());
  // The backend still works.
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 10, 1, 5, 64, DType::kFloat16, 0);
  DeviceSegment d = Upload(*backend, seg);
  Batch batch;
  batch.dim = 64;
  batch.refs = {d.ref};
  batch.AddQuery(RandomQuery(rng, 3, 64), 10);
  ::maxsimd::testing::ExpectMatchesReference(*backend, batch, DType::kFloat16);
  EXPECT_TRUE(backend->healthy());
}

// The GPU twin of StorageTest.CorpusBudgetRefusesWritesAndFreesOnDrop.
TEST(GpuBackendTest, CorpusBudgetRefusesUploadsPastItAndFreesOnRelease) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions o = ::maxsimd::testing::TestOptions();
  o.corpus_budget_bytes = 1 << 20;
  std::unique_ptr<Backend> backend = MakeGpuBackend(o);
  ASSERT_NE(backend, nullptr);
  std::vector<char> host(600 << 10, 1);
  auto first = backend->Upload(host.data(), host.size());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(
      backend->Upload(host.data(), host.size()),
      StatusIs(absl::StatusCode::kResourceExhausted,
               ::testing::HasSubstr("--corpus_budget_bytes is 1048576")));
  EXPECT_TRUE(backend->healthy());
  EXPECT_EQ(backend->Memory().front().corpus_bytes, 600 << 10);
  first->reset();  // freed: room again
  EXPECT_TRUE(backend->Upload(host.data(), host.size()).ok());
}

// The Hopper kernels run exactly where the device is a Hopper GPU and the
// build carries sm_90a code (cmake/MaxsimdCudaArchs.cmake); a build of
// compute_80 PTX alone runs on the H100 through the mma.sync kernels. The
// description names the GPU and, where they do not run, says so, and the
// PLAID layout (theirs alone) is refused while int8 is still served (by
// the mma.sync kernels).
TEST(GpuBackendTest, HopperKernelsRunWhereTheDeviceAndTheBuildHaveThem) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const bool expected = prop.major == 9 && MAXSIMD_TEST_BUILD_HAS_SM90A;
  EXPECT_EQ(GpuBackend::TmaKernelsAvailable(0), expected)
      << "compute capability " << prop.major << "." << prop.minor
      << ", build with sm_90a code: " << MAXSIMD_TEST_BUILD_HAS_SM90A;
  GpuBackendOptions options = ::maxsimd::testing::TestOptions();
  options.use_tma = true;
  auto backend = MakeGpuBackend(options);
  ASSERT_NE(backend, nullptr);
  EXPECT_THAT(backend->description(),
              ::testing::HasSubstr(absl::StrCat("gpu:0 (", prop.name,
                                                ", compute capability ",
                                                prop.major, ".", prop.minor)));
  EXPECT_EQ(
      absl::StrContains(backend->description(), "without the Hopper kernels"),
      !expected)
      << backend->description();
  EXPECT_EQ(backend->SupportsDType(DType::kPlaid2, 128), expected);
  EXPECT_TRUE(backend->SupportsDType(DType::kInt8, 128));
  EXPECT_TRUE(backend->SupportsDType(DType::kFloat16, 128));
  EXPECT_FALSE(GpuBackend::TmaKernelsAvailable(GpuBackend::DeviceCount()));
}

// Int8 segments are served at every width: the TMA kernel at the widths
// it widens whole (64, 128, 256), the mma.sync kernels at the others (80
// here) and wherever TMA is off. gpu_int8_test checks the scores at many
// widths; here, one search at 80 matches the oracle.
TEST(GpuBackendTest, Int8SegmentsOfEveryWidthAreServed) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  for (int32_t dim : {32, 64, 80, 128, 256, 512}) {
    EXPECT_TRUE(backend->SupportsDType(DType::kInt8, dim)) << dim;
  }
  std::mt19937_64 rng(1);
  HostSegment seg = RandomSegment(rng, 10, 1, 5, 80, DType::kInt8, 0);
  DeviceSegment d = Upload(*backend, seg);
  Batch batch;
  batch.dim = 80;
  batch.refs = {d.ref};
  batch.AddQuery(RandomQuery(rng, 3, 80), 10);
  ::maxsimd::testing::ExpectMatchesReference(*backend, batch, DType::kInt8);
  EXPECT_TRUE(backend->healthy());
}

TEST(GpuBackendTest, RejectsBadArgumentsAndStaysHealthy) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(1);
  HostSegment f32 = RandomSegment(rng, 4, 1, 3, 8, DType::kFloat32, 0);
  Batch batch;
  batch.dim = 8;
  batch.refs = {{f32.View(), f32.View()}};
  batch.AddQuery(RandomQuery(rng, 2, 8), 1);
  std::vector<std::vector<ScoredDoc>> got(1);
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(got), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("segments[0].dtype")));
  HostSegment seg = RandomSegment(rng, 4, 1, 3, 8, DType::kFloat16, 0);
  DeviceSegment d = Upload(*backend, seg);
  batch.refs = {d.ref};
  batch.top_k = {kMaxTopK + 1};
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(got), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("top_k[0]")));
  EXPECT_TRUE(backend->healthy());
}

TEST(GpuBackendTest, FillsTiming) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 2000, 1, 40, 128, DType::kFloat16, 0);
  DeviceSegment d = Upload(*backend, seg);
  Batch batch;
  batch.dim = 128;
  batch.refs = {d.ref};
  batch.AddQuery(RandomQuery(rng, 32, 128), 100);
  std::vector<std::vector<ScoredDoc>> got(1);
  SearchTiming t;
  MAXSIMD_ASSERT_OK(backend->Search(batch.Params(), absl::MakeSpan(got), &t));
  EXPECT_GT(t.h2d_ns, 0);
  EXPECT_GT(t.kernel_ns, 0);
  EXPECT_GT(t.topk_ns, 0);
  EXPECT_EQ(got[0].size(), 100u);
}

// d = 128 fp16, 17M tokens = 2.2e9 elements (4.4 GB) in one segment, so
// element offsets pass 2^31. Three planted documents past that point hold
// copies of the query's tokens and must rank first, in a known order; the
// oracle checks the scores of the whole top 10 (it reads only those
// documents).
TEST(GpuBackendTest, CorpusBeyond2To31Elements) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  constexpr int32_t kDim = 128;
  constexpr int64_t kDocs = 56000;
  constexpr int64_t kLen = 304;  // 56000 * 304 = 17.0M tokens
  const int64_t tokens = kDocs * kLen;
  ASSERT_GT(tokens * kDim, int64_t{1} << 31);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg;
  seg.dim = kDim;
  seg.dtype = DType::kFloat16;
  seg.cu_seqlens.resize(kDocs + 1);
  for (int64_t d = 0; d <= kDocs; ++d) seg.cu_seqlens[d] = d * kLen;
  // Small random values repeated with a period that is not a multiple of
  // the row, so documents differ; filling 2.2e9 values from a generator
  // would dominate the test.
  constexpr int64_t kPeriod = (1 << 20) + 7;
  std::vector<uint16_t> block(kPeriod);
  std::uniform_real_distribution<float> small(-0.05f, 0.05f);
  for (auto& h : block) h = FloatToHalf(small(rng));
  seg.tokens16.resize(static_cast<size_t>(tokens * kDim));
  for (int64_t at = 0; at < tokens * kDim; at += kPeriod) {
    const int64_t n = std::min(kPeriod, tokens * kDim - at);
    std::memcpy(&seg.tokens16[at], block.data(), n * sizeof(uint16_t));
  }
  // The query: 32 tokens; planted document p holds the query's tokens scaled
  // by (p + 1), so it scores (p + 1) * sum ||q_s||^2 and the order is known.
  const std::vector<float> query = RandomQuery(rng, 32, kDim);
  const int64_t planted[3] = {kDocs - 1, kDocs - 300, kDocs - 600};
  for (int p = 0; p < 3; ++p) {
    const int64_t t0 = seg.cu_seqlens[planted[p]];
    ASSERT_GT(t0 * kDim, int64_t{1} << 31);
    std::vector<float> scaled(query);
    for (float& v : scaled) v *= 0.1f * (p + 1);
    ConvertFromFloat(scaled.data(), 32 * kDim, DType::kFloat16,
                     &seg.tokens16[t0 * kDim]);
  }
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  DeviceSegment d = Upload(*backend, seg);
  Batch batch;
  batch.dim = kDim;
  batch.refs = {d.ref};
  batch.AddQuery(query, 10);
  const auto got = GpuSearch(*backend, batch.Params());
  ASSERT_EQ(got[0].size(), 10u);
  EXPECT_EQ(got[0][0].index, planted[2]);
  EXPECT_EQ(got[0][1].index, planted[1]);
  EXPECT_EQ(got[0][2].index, planted[0]);
  const std::vector<float> rounded =
      ::maxsimd::testing::RoundTo(query, DType::kFloat16);
  for (const ScoredDoc& s : got[0]) {
    const double ref = ReferenceScore(rounded.data(), 32, seg.View(), s.index);
    EXPECT_NEAR(s.score, ref, 1e-3 * std::max(1.0, std::fabs(ref)))
        << "doc " << s.index;
  }
  // The gather path over the same far documents.
  batch.cand_offsets = {0, 4};
  batch.candidates = {{0, planted[0]}, {0, 5}, {0, planted[1]}, {0, kDocs - 2}};
  const auto gathered = GpuSearch(*backend, batch.Params());
  ASSERT_EQ(gathered[0].size(), 4u);
  EXPECT_EQ(gathered[0][0].index, planted[1]);
  EXPECT_EQ(gathered[0][1].index, planted[0]);
}

// The fault points of the GPU backend (kernels/base/fault_injection.h).
class GpuBackendFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MAXSIMD_SKIP_WITHOUT_FAULT_INJECTION();
    MAXSIMD_SKIP_WITHOUT_GPU();
    std::mt19937_64 rng(::maxsimd::testing::TestSeed());
    segment_ = RandomSegment(rng, 20, 1, 8, 64, DType::kFloat16, 0);
    query_ = RandomQuery(rng, 4, 64);
  }
  void TearDown() override { fault::DisarmAll(); }

  HostSegment segment_;
  std::vector<float> query_;
};

TEST_F(GpuBackendFaultTest, KernelFaultIsSticky) {
  // A backend of its own: this one ends unhealthy.
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  DeviceSegment d = Upload(*backend, segment_);
  Batch batch;
  batch.dim = 64;
  batch.refs = {d.ref};
  batch.AddQuery(query_, 5);
  ::maxsimd::testing::ExpectMatchesReference(*backend, batch, DType::kFloat16);
  fault::ScopedFault fault(fault::kGpuKernel, fault::Schedule::Once());
  std::vector<std::vector<ScoredDoc>> got(1);
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(got), nullptr),
              StatusIs(absl::StatusCode::kUnavailable,
                       ::testing::HasSubstr("cudaErrorLaunchFailure")));
  EXPECT_FALSE(backend->healthy());
  // The point failed once; every later call fails on the backend's state.
  const auto failed = StatusIs(absl::StatusCode::kUnavailable,
                               ::testing::HasSubstr("has failed"));
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(got), nullptr),
              failed);
  const float data[4] = {};
  EXPECT_THAT(backend->Upload(data, sizeof(data)), failed);
  EXPECT_THAT(backend->Pin(data, sizeof(data)), failed);
  EXPECT_EQ(fault::Hits(fault::kGpuKernel), 1);
}

TEST_F(GpuBackendFaultTest, MallocFaultIsResourceExhaustedAndNotSticky) {
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  const int64_t held = backend->Memory()[0].corpus_bytes;
  fault::ScopedFault fault(fault::kGpuMalloc, fault::Schedule::NthHit(2));
  const float data[4] = {};
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> first =
      backend->Upload(data, sizeof(data));
  MAXSIMD_EXPECT_OK(first);
  EXPECT_THAT(backend->Upload(data, sizeof(data)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("16 bytes do not fit on gpu:0")));
  EXPECT_EQ(fault::Failures(fault::kGpuMalloc), 1);
  EXPECT_TRUE(backend->healthy());
  first->reset();  // frees the first buffer
  EXPECT_EQ(backend->Memory()[0].corpus_bytes, held);
  DeviceSegment d = Upload(*backend, segment_);
  Batch batch;
  batch.dim = 64;
  batch.refs = {d.ref};
  batch.AddQuery(query_, 5);
  ::maxsimd::testing::ExpectMatchesReference(*backend, batch, DType::kFloat16);
}

// Search() allocates nothing after Create(): the allocation fault point
// counts every cudaMalloc of the backend (Schedule::CountOnly) while
// scans and reranks of every layout run: float16 and bfloat16 (resident
// and host-placed), int8 (both query modes, the int8 MMA included) and
// PLAID at 1, 2 and 4 bits (the int8 MMA with its query-centroid table,
// the warp scan, and the float16 decode); and PLAID candidate generation's
// centroid product (ScoreCentroids) on each codec's tables, in one chunk
// and, on a backend with a small chunk, in many.
TEST_F(GpuBackendFaultTest, SearchAllocatesNothingForAnyLayout) {
  auto backend = MakeGpuBackend();
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  constexpr int32_t kDim = 128;
  std::vector<HostSegment> hosts;
  std::vector<DeviceSegment> dense;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kInt8}) {
    hosts.push_back(RandomSegment(rng, 40, 1, 30, kDim, dtype, 0));
  }
  for (const HostSegment& h : hosts) dense.push_back(Upload(*backend, h));
  dense.push_back(Upload(*backend, hosts[0], /*streamed=*/true));
  std::vector<::maxsimd::testing::PlaidSegment> plaid_hosts;
  std::vector<::maxsimd::testing::DevicePlaid> plaid;
  for (int nbits : {1, 2, 4}) {
    plaid_hosts.push_back(::maxsimd::testing::MakePlaidSegment(
        kDim, nbits, 300, std::vector<int64_t>(40, 12), 7 + nbits));
  }
  for (const auto& h : plaid_hosts) {
    plaid.push_back(::maxsimd::testing::UploadPlaid(*backend, h, 0));
  }
  // (segment, layout) of each search target.
  std::vector<std::pair<SegmentRef, DType>> targets;
  for (size_t i = 0; i < dense.size(); ++i) {
    targets.push_back({dense[i].ref, dense[i].ref.resident.dtype});
  }
  for (const auto& d : plaid) {
    targets.push_back({d.ref, d.ref.resident.dtype});
  }
  const std::vector<float> small = RandomQuery(rng, 20, kDim);  // one tile
  const std::vector<float> wide = RandomQuery(rng, 50, kDim);
  // Centroid products of 1000 scores a chunk: 300 centroids come back 3
  // rows at a time.
  GpuBackendOptions chunked = ::maxsimd::testing::TestOptions();
  chunked.centroid_score_entries = 1000;
  auto chunking = MakeGpuBackend(chunked);
  ASSERT_NE(chunking, nullptr);
  std::vector<std::unique_ptr<ResidentBuffer>> chunking_centroids;
  for (const auto& h : plaid_hosts) {
    chunking_centroids.push_back(
        chunking->Upload(h.centroids.data(), h.centroids.size() * sizeof(float))
            .value());
  }

  fault::ScopedFault count(fault::kGpuMalloc, fault::Schedule::CountOnly());
  int searches = 0;
  for (const auto& [ref, dtype] : targets) {
    if (!backend->SupportsDType(dtype, kDim)) continue;
    for (bool quantize : {false, true}) {
      if (quantize && dtype != DType::kInt8) continue;
      for (bool rerank : {false, true}) {
        // One query of one tile (the PLAID int8 MMA and warp scan), and
        // two queries of two-warpgroup tiles (the float16 decode).
        for (int queries : {1, 2}) {
          Batch batch;
          batch.dim = kDim;
          batch.quantize_queries = quantize;
          batch.refs = {ref};
          batch.AddQuery(small, 10);
          if (queries == 2) batch.AddQuery(wide, 5);
          if (rerank) {
            batch.candidates = {{0, 1},  {0, 4}, {0, 9}, {0, 16}, {0, 25},
                                {0, 39}, {0, 2}, {0, 3}, {0, 5}};
            batch.cand_offsets = {0, 6};
            if (queries == 2) batch.cand_offsets.push_back(9);
            batch.candidates.resize(batch.cand_offsets.back());
          }
          std::vector<std::vector<ScoredDoc>> got(queries);
          ASSERT_TRUE(
              backend->Search(batch.Params(), absl::MakeSpan(got), nullptr)
                  .ok())
              << DTypeName(dtype) << (rerank ? " rerank" : " scan");
          EXPECT_FALSE(got[0].empty()) << DTypeName(dtype);
          ++searches;
        }
      }
    }
  }
  EXPECT_GE(searches, 8);
  EXPECT_EQ(fault::Hits(fault::kGpuMalloc), 0)
      << "cudaMalloc calls during " << searches << " searches";

  // The product reads only the fp32 centroids, whatever the layout serves.
  int products = 0;
  for (size_t i = 0; i < plaid.size(); ++i) {
    const PlaidTablesView& tables = plaid[i].tables;
    PlaidTablesView on_chunking = tables;
    on_chunking.centroids =
        static_cast<const float*>(chunking_centroids[i]->data());
    for (Backend* b : {backend.get(), chunking.get()}) {
      const PlaidTablesView& t = b == chunking.get() ? on_chunking : tables;
      std::vector<float> scores(50 * tables.num_centroids);
      ASSERT_TRUE(
          b->ScoreCentroids(0, t, kDim, wide, absl::MakeSpan(scores)).ok());
      ++products;
    }
  }
  EXPECT_EQ(products, 6);
  EXPECT_EQ(fault::Hits(fault::kGpuMalloc), 0)
      << "cudaMalloc calls during " << searches << " searches and " << products
      << " centroid products";
}

TEST_F(GpuBackendFaultTest, MallocFaultAtCreationIsAnError) {
  fault::ScopedFault fault(fault::kGpuMalloc, fault::Schedule::NthHit(3));
  EXPECT_THAT(GpuBackend::Create(::maxsimd::testing::TestOptions()),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("DeviceMalloc")));
  EXPECT_EQ(fault::Failures(fault::kGpuMalloc), 1);
}

}  // namespace
}  // namespace maxsimd
