// The int8 corpus layout on the GPU backend (through GpuBackend::Search)
// against the scalar oracle, in both query modes of backend.h's int8
// formulas: ragged scans and reranks at widths from 7 to 1024, the formulas
// on hand-worked numbers, and the refusal (UNIMPLEMENTED, backend left
// healthy) of host-placed int8 segments. The TMA kernel serves 64, 128 and
// 256, the mma.sync kernels (codes widened in registers) the others.
// Skips without a CUDA device.
//
// MAXSIMD_TEST_KERNELS=mma (bench/run_gpu.sh's second run) turns the TMA
// kernels off, so that there the mma.sync kernels serve every width, as on
// a GPU before sm_90.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/kernels/gpu_test_util.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::Batch;
using ::maxsimd::testing::CompareRanking;
using ::maxsimd::testing::DeviceSegment;
using ::maxsimd::testing::ExpectMatchesReference;
using ::maxsimd::testing::GpuReferenceSearch;
using ::maxsimd::testing::GpuSearch;
using ::maxsimd::testing::HostSegment;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::RandomSegment;
using ::maxsimd::testing::SharedGpuBackend;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::Upload;
using ::testing::HasSubstr;

// Widths under test: the TMA kernel's three, the mma.sync kernels' fixed
// widths (96, and the others where TMA is off) and general path (multiples
// of 16 and 8, an odd width, up to 1024).
constexpr int32_t kInt8Dims[] = {7, 32, 64, 80, 96, 128, 200, 256, 320, 1024};

// Query rows the TMA kernel stages for `batch`: each query starts on a
// 16-row block.
int64_t StagedRows(const Batch& batch) {
  int64_t rows = 0;
  for (size_t q = 0; q + 1 < batch.offsets.size(); ++q) {
    rows += (batch.offsets[q + 1] - batch.offsets[q] + 15) / 16 * 16;
  }
  return rows;
}

// Checks that a search of `batch` is refused as the contract says:
// UNIMPLEMENTED naming `what`, the backend left healthy.
void ExpectRefused(Backend& backend, const Batch& batch,
                   const ::testing::Matcher<std::string>& what) {
  std::vector<std::vector<ScoredDoc>> out(batch.top_k.size());
  EXPECT_THAT(backend.Search(batch.Params(), absl::MakeSpan(out), nullptr),
              StatusIs(absl::StatusCode::kUnimplemented, what));
  EXPECT_TRUE(backend.healthy());
}

// Three ragged int8 segments of one width and their device copies:
//   0: 100 documents of 0..40 tokens (empty ones among them), 3 deleted;
//   1: 48 documents of 0 or 1 token, 1 deleted;
//   2: 4 documents of 257..520 tokens (more than 256: many copies and
//      running maxima across them), 1 deleted.
struct Int8Corpus {
  std::vector<HostSegment> host;
  std::vector<DeviceSegment> device;

  std::vector<SegmentRef> Refs() const {
    std::vector<SegmentRef> refs;
    for (const DeviceSegment& d : device) refs.push_back(d.ref);
    return refs;
  }
};

constexpr int64_t kDocs[] = {100, 48, 4};
constexpr int64_t kBase[] = {0, 100, 1000};
// Deleted documents, as (segment, row).
constexpr DocRef kDeleted[] = {{0, 0}, {0, 7}, {0, 99}, {1, 1}, {2, 3}};

Int8Corpus MakeInt8Corpus(Backend& backend, std::mt19937_64& rng, int32_t dim) {
  Int8Corpus c;
  c.host.push_back(
      RandomSegment(rng, kDocs[0], 0, 40, dim, DType::kInt8, kBase[0]));
  c.host.push_back(
      RandomSegment(rng, kDocs[1], 0, 1, dim, DType::kInt8, kBase[1]));
  c.host.push_back(
      RandomSegment(rng, kDocs[2], 257, 520, dim, DType::kInt8, kBase[2]));
  for (const DocRef& r : kDeleted) c.host[r.segment].Delete(r.doc);
  for (const HostSegment& s : c.host) c.device.push_back(Upload(backend, s));
  return c;
}

// A scan batch over `corpus`: one query of 32 rows (the one-warpgroup
// kernel: a batch of at most 32 rows), or queries of 3..64 rows, an empty
// one among them, until the staged rows exceed 33 tiles of 64 (the
// two-warpgroup kernel, over more tiles than one launch covers).
Batch ScanBatch(std::mt19937_64& rng, const Int8Corpus& corpus, int32_t dim,
                bool quantize, bool one_query) {
  Batch batch;
  batch.dim = dim;
  batch.quantize_queries = quantize;
  batch.refs = corpus.Refs();
  if (one_query) {
    batch.AddQuery(RandomQuery(rng, 32, dim), 100);
    return batch;
  }
  std::uniform_int_distribution<int> lq(3, 64), k(1, 200);
  batch.AddQuery({}, 9);  // scores 0 against every document
  while (batch.top_k.size() < 40 || StagedRows(batch) <= 33 * 64) {
    batch.AddQuery(RandomQuery(rng, lq(rng), dim), k(rng));
  }
  return batch;
}

// A rerank batch over `corpus` with `nq` queries (1: one query of 32 rows,
// the one-warpgroup kernel; else rows 1..70, query 2 empty). Each query's
// candidates are distinct random documents of all segments; a query with
// duplicates (the lone one, else the odd ones) then gets every long
// document of segment 2 again, (2, 0) twice more, and the deleted
// documents, with a top_k that returns every copy; the others' top_k cuts.
// With 7 queries, the last has only deleted candidates and the one before
// none at all.
Batch RerankBatch(std::mt19937_64& rng, const Int8Corpus& corpus, int32_t dim,
                  bool quantize, int nq) {
  Batch batch;
  batch.dim = dim;
  batch.quantize_queries = quantize;
  batch.refs = corpus.Refs();
  batch.cand_offsets = {0};
  std::vector<DocRef> all;
  for (int32_t s = 0; s < 3; ++s) {
    for (int64_t d = 0; d < kDocs[s]; ++d) all.push_back({s, d});
  }
  std::uniform_int_distribution<int> lq(1, 70), nc(1, 90);
  for (int q = 0; q < nq; ++q) {
    const bool only_deleted = nq > 1 && q == nq - 1;
    const bool none = nq > 2 && q == nq - 2;
    const bool duplicates = !only_deleted && !none && (nq == 1 || q % 2 == 1);
    const int rows = nq == 1 ? 32 : (q == 2 ? 0 : lq(rng));
    batch.AddQuery(RandomQuery(rng, rows, dim),
                   duplicates ? kMaxTopK : 1 + q * 7);
    if (!only_deleted && !none) {
      std::shuffle(all.begin(), all.end(), rng);
      batch.candidates.insert(batch.candidates.end(), all.begin(),
                              all.begin() + nc(rng));
    }
    if (duplicates) {
      for (int64_t d = 0; d < kDocs[2]; ++d) batch.candidates.push_back({2, d});
      batch.candidates.push_back({2, 0});
      batch.candidates.push_back({2, 0});
    }
    if (duplicates || only_deleted) {
      batch.candidates.insert(batch.candidates.end(), std::begin(kDeleted),
                              std::end(kDeleted));
    }
    batch.cand_offsets.push_back(static_cast<int64_t>(batch.candidates.size()));
  }
  return batch;
}

// Searches an int8 `batch`: the oracle's ranking (duplicates allowed).
void ExpectInt8Search(Backend& backend, const Batch& batch) {
  const auto got = GpuSearch(backend, batch.Params());
  const auto want = GpuReferenceSearch(batch, DType::kInt8);
  ASSERT_EQ(got.size(), want.size());
  for (size_t q = 0; q < got.size(); ++q) {
    EXPECT_EQ(CompareRanking(got[q], want[q], 1e-3, /*repeats=*/true), "")
        << "query " << q << " of " << got.size();
  }
}

TEST(GpuInt8Test, SupportsDTypeServesEveryWidth) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  for (int32_t dim : {7, 32, 64, 80, 96, 128, 192, 200, 256, 512, 4096}) {
    EXPECT_TRUE(backend.SupportsDType(DType::kInt8, dim)) << "dim " << dim;
    // The dense layouts are served at every width (mma.sync elsewhere).
    EXPECT_TRUE(backend.SupportsDType(DType::kFloat16, dim)) << "dim " << dim;
    EXPECT_TRUE(backend.SupportsDType(DType::kBFloat16, dim)) << "dim " << dim;
    // Quantised queries by default where they take the int8 tensor cores.
    EXPECT_EQ(
        backend.PrefersQuantizedQueries(dim),
        ::maxsimd::testing::TestOptions().use_tma && (dim == 128 || dim == 256))
        << "dim " << dim;
  }
}

// Scans over ragged segments (empty, one-token, long and deleted
// documents) at every width under test, both query modes, both kernel
// shapes.
TEST(GpuInt8Test, RaggedScanMatchesReferenceInBothQueryModes) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int32_t dim : kInt8Dims) {
    const Int8Corpus corpus = MakeInt8Corpus(backend, rng, dim);
    // The corpus has the edge cases it claims.
    const HostSegment& tiny = corpus.host[1];
    int64_t empty = 0, one = 0;
    for (int64_t d = 0; d < tiny.num_docs(); ++d) {
      const int64_t len = tiny.cu_seqlens[d + 1] - tiny.cu_seqlens[d];
      empty += len == 0;
      one += len == 1;
    }
    ASSERT_GT(empty, 0);
    ASSERT_GT(one, 0);
    for (bool quantize : {false, true}) {
      for (bool one_query : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "dim " << dim << " quantize_queries " << quantize
                     << (one_query ? " one query" : " many queries"));
        const Batch batch = ScanBatch(rng, corpus, dim, quantize, one_query);
        ExpectMatchesReference(backend, batch, DType::kInt8);
        // Deleted documents are never returned (the comparison above
        // would also pass a deleted document tied with a live one).
        const auto got = GpuSearch(backend, batch.Params());
        for (const auto& ranking : got) {
          for (const ScoredDoc& s : ranking) {
            for (const DocRef& r : kDeleted) {
              EXPECT_NE(s.index, kBase[r.segment] + r.doc);
            }
          }
        }
      }
    }
  }
}

// Reranks with candidate lists per query: distinct documents, repeated
// long documents (scored and returned once per copy), deleted candidates
// (skipped), a query with no candidates and one with only deleted ones.
TEST(GpuInt8Test, RerankMatchesReferenceWithDuplicatesAndDeletedCandidates) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int32_t dim : kInt8Dims) {
    const Int8Corpus corpus = MakeInt8Corpus(backend, rng, dim);
    for (bool quantize : {false, true}) {
      for (int nq : {1, 7}) {
        SCOPED_TRACE(::testing::Message()
                     << "dim " << dim << " quantize_queries " << quantize
                     << " queries " << nq);
        const Batch batch = RerankBatch(rng, corpus, dim, quantize, nq);
        ExpectInt8Search(backend, batch);
        // The first query with duplicates gets every copy of long document
        // (2, 0) back, each scored.
        const auto got = GpuSearch(backend, batch.Params());
        const int q = nq == 1 ? 0 : 1;
        const auto given = std::count_if(
            batch.candidates.begin() + batch.cand_offsets[q],
            batch.candidates.begin() + batch.cand_offsets[q + 1],
            [](const DocRef& r) { return r.segment == 2 && r.doc == 0; });
        ASSERT_GE(given, 3);
        EXPECT_EQ(std::count_if(got[q].begin(), got[q].end(),
                                [](const ScoredDoc& s) {
                                  return s.index == kBase[2] + 0;
                                }),
                  given);
        if (nq > 1) {
          EXPECT_TRUE(got[nq - 1].empty()) << "only deleted candidates";
          EXPECT_TRUE(got[nq - 2].empty()) << "no candidates";
        }
      }
    }
  }
}

// The formulas on numbers worked by hand (as in
// CpuBackendTest.Int8ScoresFollowTheStatedFormulas), the rest of each row
// zero. Document: codes {127, -64} scale 0.5 and {10, 20} scale 0.3. One
// query per row, so that each score is one cell, which the formulas fix to
// the bit:
//   {127, -3}: fp16-exact, and its own quantisation (scale 1): the best
//     cell is 0.5 * (127 * 127 + 3 * 64) = 8160.5 exactly in both modes;
//   {0, ...}: 0 in both modes;
//   {1 + 2^-12, 0}: rounds to fp16 1.0, so the fp16 mode's best cell is
//     0.5 * 127 = 63.5 exactly (the unrounded row would give 63.5155);
//     quantised, scale (1 + 2^-12) / 127 and codes {127, 0}: the cell is
//     q_scale * (0.5 * 16129);
//   {3, 8}: the best cell is the second document row: 0.3 * 190 in the
//     fp16 mode; quantised, codes {48, 127} (3 / (8 / 127) = 47.6) and
//     the fitted scale (3 * 48 + 8 * 127) / (48^2 + 127^2) = 1160 / 18433,
//     the cell is q_scale * (0.3 * 3020) = 57.01514..., where the other
//     order, (q_scale * 0.3) * 3020, rounds to 57.015137...
TEST(GpuInt8Test, ScoresFollowTheStatedFormulasExactly) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  const float odd = 1.f + 1.f / 4096.f;
  for (int32_t dim : kInt8Dims) {
    HostSegment seg;
    seg.dim = dim;
    seg.dtype = DType::kInt8;
    seg.cu_seqlens = {0, 2};
    seg.tokens8.assign(2 * static_cast<size_t>(dim), 0);
    seg.tokens8[0] = 127;
    seg.tokens8[1] = -64;
    seg.tokens8[dim] = 10;
    seg.tokens8[dim + 1] = 20;
    seg.scales = {0.5f, 0.3f};
    const DeviceSegment d = Upload(backend, seg);
    const std::vector<std::vector<float>> rows = {
        {127.f, -3.f}, {0.f, 0.f}, {odd, 0.f}, {3.f, 8.f}};
    for (bool quantize : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "dim " << dim << " quantize_queries " << quantize);
      Batch batch;
      batch.dim = dim;
      batch.quantize_queries = quantize;
      batch.refs = {d.ref};
      for (const std::vector<float>& row : rows) {
        std::vector<float> query(static_cast<size_t>(dim), 0.f);
        std::copy(row.begin(), row.end(), query.begin());
        batch.AddQuery(query, 1);
      }
      const std::vector<float> want =
          quantize ? std::vector<float>{8160.5f, 0.f,
                                        (odd / 127.f) * (0.5f * 16129.f),
                                        static_cast<float>(1160.0 / 18433.0) *
                                            (0.3f * 3020.f)}
                   : std::vector<float>{8160.5f, 0.f, 63.5f, 0.3f * 190.f};
      const auto got = GpuSearch(backend, batch.Params());
      for (size_t q = 0; q < rows.size(); ++q) {
        ASSERT_EQ(got[q].size(), 1u) << "query " << q;
        EXPECT_EQ(got[q][0].score, want[q]) << "query " << q;
        EXPECT_EQ(got[q][0].index, 0) << "query " << q;
      }
    }
  }
}

// A host-placed (Backend::Pin) int8 segment has no streaming path: scans
// and reranks that include one, alone or beside resident ones, are
// UNIMPLEMENTED naming the placement; the resident segments alone are then
// still served.
TEST(GpuInt8Test, HostPlacedSegmentsAreUnimplemented) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  constexpr int32_t kDim = 128;
  const Int8Corpus corpus = MakeInt8Corpus(backend, rng, kDim);
  const DeviceSegment streamed = Upload(backend, corpus.host[0], true);
  ASSERT_TRUE(streamed.ref.streamed);
  const ::testing::Matcher<std::string> why = HasSubstr("host");
  const std::vector<SegmentRef> resident = corpus.Refs();
  const std::vector<std::vector<SegmentRef>> mixes = {
      {streamed.ref},
      {streamed.ref, resident[1], resident[2]},
  };
  for (bool quantize : {false, true}) {
    for (const auto& refs : mixes) {
      SCOPED_TRACE(::testing::Message() << "quantize_queries " << quantize
                                        << " segments " << refs.size());
      Batch scan;
      scan.dim = kDim;
      scan.quantize_queries = quantize;
      scan.refs = refs;
      scan.AddQuery(RandomQuery(rng, 32, kDim), 10);
      scan.AddQuery(RandomQuery(rng, 50, kDim), 10);
      ExpectRefused(backend, scan, why);
      Batch rerank = scan;
      rerank.cand_offsets = {0, 2, 3};
      rerank.candidates = {{0, 3}, {0, 5}, {0, 8}};
      ExpectRefused(backend, rerank, why);
    }
  }
  for (bool quantize : {false, true}) {
    ExpectInt8Search(
        backend, ScanBatch(rng, corpus, kDim, quantize, /*one_query=*/true));
  }
}

}  // namespace
}  // namespace maxsimd
