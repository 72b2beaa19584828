// Host-placed segments (Backend::Pin): scans that stream the tokens to the
// GPU in chunks through the worker's double buffers, reranks that gather
// the candidates' rows into pinned staging in rounds, both against the
// oracle and against the same segments resident; the pinned budget, a
// corpus larger than the GPU budget, and a document too long for a buffer.
//
// Stream buffers of a few KiB force every search through many chunks and
// rounds, so buffer reuse across chunks is exercised.
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/kernels/gpu_test_util.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::AddCandidates;
using ::maxsimd::testing::Batch;
using ::maxsimd::testing::CompareRanking;
using ::maxsimd::testing::DeviceSegment;
using ::maxsimd::testing::ExpectMatchesReference;
using ::maxsimd::testing::GpuSearch;
using ::maxsimd::testing::HostSegment;
using ::maxsimd::testing::MakeGpuBackend;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::RandomSegment;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::Upload;

// Buffers of 48 rows at dim 256 (96 at dim 128, 61 at dim 200): documents
// are up to 40 rows, so a chunk holds one to a few of them.
constexpr int64_t kSmallBuffer = 48 * 256 * 2;

std::unique_ptr<Backend> StreamingBackend(int64_t buffer_bytes) {
  GpuBackendOptions o = ::maxsimd::testing::TestOptions();
  o.stream_buffer_bytes = buffer_bytes;
  return MakeGpuBackend(o);
}

// The same batch over the resident copies (`resident`) and the host-placed
// ones (`streamed`): equal rankings, and both match the oracle.
void ExpectStreamedMatchesResident(Backend& backend, Batch batch,
                                   const std::vector<SegmentRef>& resident,
                                   const std::vector<SegmentRef>& streamed,
                                   DType dtype) {
  batch.refs = resident;
  const auto want = GpuSearch(backend, batch.Params());
  batch.refs = streamed;
  const auto got = GpuSearch(backend, batch.Params());
  ASSERT_EQ(got.size(), want.size());
  for (size_t q = 0; q < got.size(); ++q) {
    EXPECT_EQ(CompareRanking(got[q], want[q], 1e-5), "") << "query " << q;
  }
  ExpectMatchesReference(backend, batch, dtype);
}

TEST(HostStreamTest, ScanMatchesResidentAcrossWidthsDtypesAndBatches) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = StreamingBackend(kSmallBuffer);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int32_t dim : {64, 128, 200, 7}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim);
      HostSegment a = RandomSegment(rng, 300, 1, 40, dim, dtype, 0);
      HostSegment b = RandomSegment(rng, 120, 0, 30, dim, dtype, 300);
      HostSegment c = RandomSegment(rng, 200, 1, 40, dim, dtype, 420);
      b.Delete(3);
      c.Delete(0);
      c.Delete(199);
      DeviceSegment ra = Upload(*backend, a), rb = Upload(*backend, b),
                    rc = Upload(*backend, c);
      DeviceSegment sa = Upload(*backend, a, true),
                    sc = Upload(*backend, c, true);
      // Resident and host-placed segments mix in one search.
      const std::vector<SegmentRef> resident = {ra.ref, rb.ref, rc.ref};
      const std::vector<SegmentRef> streamed = {sa.ref, rb.ref, sc.ref};
      for (int nq : {1, 5, 40}) {
        SCOPED_TRACE(::testing::Message() << nq << " queries");
        Batch batch;
        batch.dim = dim;
        std::uniform_int_distribution<int> lq(1, 40);
        for (int q = 0; q < nq; ++q) {
          batch.AddQuery(RandomQuery(rng, q == 2 ? 0 : lq(rng), dim),
                         q == 0 ? 1 : 7 + q);
        }
        ExpectStreamedMatchesResident(*backend, batch, resident, streamed,
                                      dtype);
      }
    }
  }
}

TEST(HostStreamTest, RerankGathersHostCandidatesInRounds) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  // Small buffers: many rounds; large ones: everything in one round.
  for (int64_t buffer : {kSmallBuffer, int64_t{8} << 20}) {
    auto backend = StreamingBackend(buffer);
    ASSERT_NE(backend, nullptr);
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (int32_t dim : {64, 128, 7}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " dim " << dim
                                          << " buffer " << buffer);
        HostSegment a = RandomSegment(rng, 200, 1, 40, dim, dtype, 0);
        HostSegment b = RandomSegment(rng, 150, 0, 30, dim, dtype, 200);
        b.Delete(7);
        DeviceSegment ra = Upload(*backend, a), rb = Upload(*backend, b);
        DeviceSegment sa = Upload(*backend, a, true),
                      sb = Upload(*backend, b, true);
        Batch batch;
        batch.dim = dim;
        std::uniform_int_distribution<int> lq(1, 60), nc(0, 300);
        for (int q = 0; q < 6; ++q) {
          batch.AddQuery(RandomQuery(rng, q == 4 ? 0 : lq(rng), dim),
                         q == 0 ? 1 : 5 + q * 13);
          AddCandidates(rng, batch, 200, 150, nc(rng));
        }
        // All host-placed, then host candidates beside resident ones.
        ExpectStreamedMatchesResident(*backend, batch, {ra.ref, rb.ref},
                                      {sa.ref, sb.ref}, dtype);
        ExpectStreamedMatchesResident(*backend, batch, {ra.ref, rb.ref},
                                      {ra.ref, sb.ref}, dtype);
      }
    }
  }
}

TEST(HostStreamTest, ConcurrentSearchesUseTheirOwnBuffers) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = StreamingBackend(kSmallBuffer);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment a = RandomSegment(rng, 500, 1, 40, 128, DType::kFloat16, 0);
  DeviceSegment ra = Upload(*backend, a), sa = Upload(*backend, a, true);
  std::vector<Batch> batches(4);
  std::vector<std::vector<std::vector<ScoredDoc>>> want(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    batches[i].dim = 128;
    batches[i].AddQuery(RandomQuery(rng, 32, 128), 50);
    batches[i].refs = {ra.ref};
    want[i] = GpuSearch(*backend, batches[i].Params());
    batches[i].refs = {sa.ref};
  }
  std::vector<std::vector<std::vector<ScoredDoc>>> got(batches.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < batches.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 5; ++round) {
        got[i] = GpuSearch(*backend, batches[i].Params());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < batches.size(); ++i) {
    ASSERT_EQ(got[i].size(), 1u);
    EXPECT_EQ(CompareRanking(got[i][0], want[i][0], 1e-5), "") << i;
  }
}

// The acceptance case in small: a GPU budget of 1 MiB, a corpus of 5 MiB of
// tokens. The upload is refused; pinned, the corpus scans correctly.
TEST(HostStreamTest, HostCorpusLargerThanTheGpuBudgetScans) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions o = ::maxsimd::testing::TestOptions();
  o.corpus_budget_bytes = 1 << 20;
  o.stream_buffer_bytes = 256 << 10;
  o.pinned_budget_bytes = 16 << 20;
  std::unique_ptr<Backend> backend = MakeGpuBackend(o);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  HostSegment seg = RandomSegment(rng, 1000, 1, 40, 128, DType::kFloat16, 0);
  const size_t token_bytes = seg.tokens16.size() * 2;
  ASSERT_GT(token_bytes, size_t{2} << 20);
  EXPECT_THAT(backend->Upload(seg.tokens16.data(), token_bytes),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("--corpus_budget_bytes")));
  {
    DeviceSegment s = Upload(*backend, seg, true);
    EXPECT_EQ(backend->Memory().front().pinned_bytes,
              static_cast<int64_t>(token_bytes));
    Batch batch;
    batch.dim = 128;
    batch.refs = {s.ref};
    for (int q = 0; q < 3; ++q) batch.AddQuery(RandomQuery(rng, 32, 128), 100);
    ExpectMatchesReference(*backend, batch, DType::kFloat16);
    SearchTiming t;
    std::vector<std::vector<ScoredDoc>> got(3);
    MAXSIMD_ASSERT_OK(backend->Search(batch.Params(), absl::MakeSpan(got), &t));
    EXPECT_GT(t.h2d_ns, 0);
    // A second pin of the same size passes the pinned budget's 16 MiB only
    // once.
    std::vector<char> other(12 << 20, 1);
    EXPECT_THAT(backend->Pin(other.data(), other.size()),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         ::testing::HasSubstr("--pinned_budget_bytes")));
  }
  EXPECT_EQ(backend->Memory().front().pinned_bytes, 0);
  EXPECT_TRUE(backend->healthy());
}

TEST(HostStreamTest, ADocumentLongerThanABufferIsRefusedCleanly) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = StreamingBackend(kSmallBuffer);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  // Documents of 100..120 rows at dim 128: more than the buffer's 96.
  HostSegment seg = RandomSegment(rng, 10, 100, 120, 128, DType::kFloat16, 0);
  DeviceSegment s = Upload(*backend, seg, true);
  Batch batch;
  batch.dim = 128;
  batch.refs = {s.ref};
  batch.AddQuery(RandomQuery(rng, 8, 128), 5);
  std::vector<std::vector<ScoredDoc>> got(1);
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(got), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("stream_buffer_bytes")));
  batch.cand_offsets = {0, 2};
  batch.candidates = {{0, 1}, {0, 4}};
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(got), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("stream_buffer_bytes")));
  EXPECT_TRUE(backend->healthy());
  // Short documents on the same backend still stream.
  HostSegment small = RandomSegment(rng, 50, 1, 30, 128, DType::kFloat16, 0);
  DeviceSegment t = Upload(*backend, small, true);
  Batch ok;
  ok.dim = 128;
  ok.refs = {t.ref};
  ok.AddQuery(RandomQuery(rng, 8, 128), 5);
  ExpectMatchesReference(*backend, ok, DType::kFloat16);
}

TEST(HostStreamTest, PinIsRefusedWithoutStreamBuffers) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  auto backend = StreamingBackend(0);
  ASSERT_NE(backend, nullptr);
  const char byte = 1;
  EXPECT_THAT(backend->Pin(&byte, 1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("stream_buffer_bytes")));
  EXPECT_TRUE(backend->healthy());
}

}  // namespace
}  // namespace maxsimd
