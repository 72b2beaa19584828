// PLAID corpora on the GPU backend (the TMA kernel's fused decode: residual
// rows, centroid ids and scales decoded to float16 in shared memory, never
// to global memory) against the scalar oracle: ragged scans and reranks at
// every nbits and width the kernel serves, in both warpgroup
// configurations (one query of 32 rows; batches of many queries), and the
// refusals (UNIMPLEMENTED, backend left healthy) of other widths, of
// host-placed PLAID segments, of batches mixing codecs, and of the mma.sync
// kernels. Skips without a CUDA device.
//
// The GPU rounds the query and the decoded rows to float16 for its MMAs
// (kernels/backend.h allows it). Each search is checked twice: tightly
// against the oracle on the rows the kernel decodes (float16 centroid plus
// float16 bucket weight, the sum rounded to float16, times the fp32 scale:
// an fp32 corpus of those rows) with the queries rounded to float16, which
// leaves only the order of fp32 sums; and loosely against the exact PLAID
// oracle (fp32 decode, fp32 queries), for the size of the rounding.
//
// At d = 128, batches of one query tile per block (one query of 32 rows)
// take the int8 MMA instead (GpuBackendOptions::plaid_int8_mma): their
// tight oracle is that path's own rounding (PlaidMmaReference), and a
// backend with the option off checks the float16 decode at that width.
//
// MAXSIMD_TEST_KERNELS=mma (bench/run_gpu.sh's second run) turns the TMA
// kernels off, and with them every PLAID width: each test then checks the
// refusal instead.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/base/half.h"
#include "kernels/maxsim_reference.h"
#include "kernels/maxsim_tma.h"
#include "kernels/plaid_bits.h"
#include "kernels/quantize.h"
#include "kernels/topk.h"
#include "tests/kernels/gpu_test_util.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::Batch;
using ::maxsimd::testing::CompareRanking;
using ::maxsimd::testing::DevicePlaid;
using ::maxsimd::testing::GpuReferenceSearch;
using ::maxsimd::testing::GpuSearch;
using ::maxsimd::testing::HostSegment;
using ::maxsimd::testing::MakePlaidSegment;
using ::maxsimd::testing::PlaidSegment;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::SharedGpuBackend;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::UploadPlaid;
using ::testing::HasSubstr;

// Relative tolerances (of max(1, |score|)): against the oracle on the
// kernel's float16 rows, fp32 summation order only; against the exact
// PLAID oracle, float16 rounding of the query and the decoded row (about
// 2^-11 relative per value), summed over up to 128 values and 70 rows.
constexpr double kTol = 1e-3;
constexpr double kExactTol = 2e-2;

// Whether the backend made with TestOptions() scores PLAID segments of
// this width and nbits (TMA kernels only, nbits 1, 2 or 4; maxsim_tma.h's
// rule).
bool PlaidKernelExpected(int32_t dim, int nbits) {
  return ::maxsimd::testing::TestOptions().use_tma && nbits <= 4 &&
         (dim == 64 || dim == 128 || dim == 256) && dim * nbits % 128 == 0;
}

constexpr int64_t kCentroids = 300;
constexpr int64_t kDocs[] = {100, 48, 4};
constexpr int64_t kBase[] = {0, 100, 1000};
constexpr DocRef kDeleted[] = {{0, 0}, {0, 7}, {0, 99}, {1, 1}, {2, 3}};

// Gives `s` the codec of `from` (one codec per corpus) and recomputes its
// scales under it.
void ShareCodec(PlaidSegment& s, const PlaidSegment& from, bool normalize) {
  s.centroids = from.centroids;
  s.centroids_f16 = from.centroids_f16;
  s.bucket_weights = from.bucket_weights;
  const PlaidRowDecoder decoder(s.bucket_weights.data(), s.nbits, s.dim);
  std::vector<float> v(static_cast<size_t>(s.dim));
  for (int64_t t = 0; t < s.num_tokens(); ++t) {
    decoder.DecodeToken(s.View(), t, v.data());
    s.scales[t] = normalize ? PlaidInverseNorm(v.data(), s.dim) : 1.f;
  }
}

// Three ragged PLAID segments of one codec and their device copies:
//   0: 100 documents of 0..40 tokens (empty ones among them), 3 deleted;
//   1: 48 documents of 0 or 1 token, 1 deleted (scales 1: not normalised);
//   2: 4 documents of 257..520 tokens, 1 deleted.
struct PlaidCorpus {
  std::vector<PlaidSegment> host;
  std::vector<DevicePlaid> device;
  std::vector<HostSegment> decoded;  // as the kernel decodes host[s]

  std::vector<SegmentRef> Refs() const {
    std::vector<SegmentRef> refs;
    for (const DevicePlaid& d : device) refs.push_back(d.ref);
    return refs;
  }
};

// The rows of `s` as the kernel decodes them (float16 centroid + float16
// bucket weight, rounded to float16), times their scales, as an fp32
// segment of the same documents.
HostSegment DecodedLikeTheKernel(const PlaidSegment& s, int64_t base_index) {
  HostSegment h;
  h.dim = s.dim;
  h.dtype = DType::kFloat32;
  h.base_index = base_index;
  h.cu_seqlens = s.cu_seqlens;
  h.tombstones = s.tombstones;
  const int64_t row_bytes = int64_t{s.dim} * s.nbits / 8;
  for (int64_t t = 0; t < s.num_tokens(); ++t) {
    const uint8_t* row = s.residuals.data() + t * row_bytes;
    for (int32_t k = 0; k < s.dim; ++k) {
      const double c = HalfToFloat(s.centroids_f16[s.codes[t] * s.dim + k]);
      const double w = HalfToFloat(
          FloatToHalf(s.bucket_weights[PlaidResidualBucket(row, s.nbits, k)]));
      const float v = HalfToFloat(FloatToHalf(static_cast<float>(c + w)));
      h.tokens32.push_back(s.scales[t] * v);
    }
  }
  return h;
}

PlaidCorpus MakeCorpus(Backend& backend, std::mt19937_64& rng, int32_t dim,
                       int nbits, float weight_scale = 1.f) {
  PlaidCorpus c;
  const std::pair<int, int> lens[] = {{0, 40}, {0, 1}, {257, 520}};
  for (int s = 0; s < 3; ++s) {
    std::uniform_int_distribution<int64_t> len(lens[s].first, lens[s].second);
    std::vector<int64_t> doc_lens;
    for (int64_t d = 0; d < kDocs[s]; ++d) doc_lens.push_back(len(rng));
    if (s == 0) doc_lens[3] = 0;
    c.host.push_back(MakePlaidSegment(dim, nbits, kCentroids, doc_lens,
                                      static_cast<uint32_t>(rng())));
    if (s == 0 && weight_scale != 1.f) {
      for (float& w : c.host[0].bucket_weights) w *= weight_scale;
      const PlaidSegment codec = c.host[0];
      ShareCodec(c.host[0], codec, /*normalize=*/true);
    }
    if (s > 0) ShareCodec(c.host[s], c.host[0], /*normalize=*/s != 1);
  }
  for (const DocRef& r : kDeleted) c.host[r.segment].Delete(r.doc);
  for (int s = 0; s < 3; ++s) {
    c.device.push_back(UploadPlaid(backend, c.host[s], kBase[s],
                                   s == 0 ? nullptr : &c.device[0]));
    c.decoded.push_back(DecodedLikeTheKernel(c.host[s], kBase[s]));
  }
  return c;
}

int64_t StagedRows(const Batch& batch) {
  int64_t rows = 0;
  for (size_t q = 0; q + 1 < batch.offsets.size(); ++q) {
    rows += (batch.offsets[q + 1] - batch.offsets[q] + 15) / 16 * 16;
  }
  return rows;
}

// One query of 32 rows (the one-warpgroup kernel), or queries of 3..64
// rows, an empty one among them, past 33 tiles of 64 rows (the
// two-warpgroup kernel, over more tiles than one launch covers).
Batch ScanBatch(std::mt19937_64& rng, const PlaidCorpus& corpus, int32_t dim,
                bool one_query) {
  Batch batch;
  batch.dim = dim;
  batch.refs = corpus.Refs();
  if (one_query) {
    batch.AddQuery(RandomQuery(rng, 32, dim), 160);
    return batch;
  }
  std::uniform_int_distribution<int> lq(3, 64), k(1, 200);
  batch.AddQuery({}, 9);
  while (batch.top_k.size() < 40 || StagedRows(batch) <= 33 * 64) {
    batch.AddQuery(RandomQuery(rng, lq(rng), dim), k(rng));
  }
  return batch;
}

// nq queries (1: 32 rows; else 1..70 rows), each with a list of distinct
// random candidates of all segments plus the deleted documents, and for
// the odd ones every long document of segment 2 again.
Batch RerankBatch(std::mt19937_64& rng, const PlaidCorpus& corpus, int32_t dim,
                  int nq) {
  Batch batch;
  batch.dim = dim;
  batch.refs = corpus.Refs();
  batch.cand_offsets = {0};
  std::vector<DocRef> all;
  for (int32_t s = 0; s < 3; ++s) {
    for (int64_t d = 0; d < kDocs[s]; ++d) all.push_back({s, d});
  }
  std::uniform_int_distribution<int> lq(1, 70), nc(1, 150);
  for (int q = 0; q < nq; ++q) {
    const bool duplicates = nq == 1 || q % 2 == 1;
    batch.AddQuery(RandomQuery(rng, nq == 1 ? 32 : lq(rng), dim),
                   duplicates ? kMaxTopK : 1 + q * 7);
    std::shuffle(all.begin(), all.end(), rng);
    batch.candidates.insert(batch.candidates.end(), all.begin(),
                            all.begin() + nc(rng));
    if (duplicates) {
      for (int64_t d = 0; d < kDocs[2]; ++d) batch.candidates.push_back({2, d});
    }
    batch.candidates.insert(batch.candidates.end(), std::begin(kDeleted),
                            std::end(kDeleted));
    batch.cand_offsets.push_back(static_cast<int64_t>(batch.candidates.size()));
  }
  return batch;
}

// Whether a backend with `options` scores `batch` (PLAID, `nbits`) on the
// int8 MMA: maxsim_tma.h's TmaPlaidUsesMma for one warpgroup, which the
// backend plans for a rerank whose queries have at most 32 rows each, or
// a scan of at most 32 rows in all (queries at 16-row steps); the table of
// these corpora (300 centroids) is far below the option's limit.
bool UsesPlaidMma(const GpuBackendOptions& options, const Batch& batch,
                  int nbits) {
  if (!options.use_tma || !options.plaid_int8_mma || batch.dim != 128 ||
      nbits > 4) {
    return false;
  }
  int64_t widest = 0, packed = 0;
  for (size_t q = 0; q + 1 < batch.offsets.size(); ++q) {
    const int64_t r16 =
        (batch.offsets[q + 1] - batch.offsets[q] + 15) / 16 * 16;
    widest = std::max(widest, r16);
    packed += r16;
  }
  return (batch.cand_offsets.empty() ? packed : widest) <= 32;
}

// The query-centroid value of query row `row` (float16 values, their sum
// row_sum) and centroid c in units of the row's factor, as
// LaunchPlaidQueryCentroids computes it: the fp32 dot in order plus the
// levels' offset times the row's sum by one fma, rounded to float16,
// divided by the factor and rounded, clamped to +-2^30.
float TableUnits(const float* q16, float row_sum, const float* c, int32_t dim,
                 float offset, float factor) {
  float qc = 0.f;
  for (int32_t d = 0; d < dim; ++d) qc = std::fmaf(q16[d], c[d], qc);
  qc = HalfToFloat(FloatToHalf(std::fmaf(offset, row_sum, qc)));
  return std::clamp(std::rint(qc / factor), -1073741824.f, 1073741824.f);
}

// The query rows of `batch` as the int8 MMA path stages them: int8 codes,
// factor (the int8 scale, 1 for a zero row, times the levels' step),
// float16 values and their sum.
struct MmaRow {
  std::vector<int8_t> codes;
  std::vector<float> q16;
  float factor = 1.f, row_sum = 0.f;
};
MmaRow StageMmaRow(const float* row, int32_t dim, float step) {
  MmaRow r;
  r.codes.resize(static_cast<size_t>(dim));
  const float scale = QuantizeInt8Row(row, dim, r.codes.data());
  r.factor = (scale > 0.f ? scale : 1.f) * step;
  for (int32_t d = 0; d < dim; ++d) {
    r.q16.push_back(HalfToFloat(FloatToHalf(row[d])));
    r.row_sum += r.q16.back();
  }
  return r;
}

// The shift of the int16 table of the PLAID scan at 2 bits
// (PlaidUnitsShift) for a batch in one tile: the largest |TableUnits| over
// its rows and the codec's centroids (every segment shares segment 0's).
int ScanTableShift(const Batch& batch) {
  const SegmentView& seg = batch.refs[0].host;
  const int nbits = PlaidNbits(seg.dtype);
  int8_t levels[16];
  float offset = 0.f;
  const float step =
      PlaidMmaLevels(seg.plaid.bucket_weights, nbits, levels, &offset);
  float largest = 0.f;
  for (size_t i = 0; i * batch.dim < batch.tokens.size(); ++i) {
    const MmaRow r =
        StageMmaRow(batch.tokens.data() + i * batch.dim, batch.dim, step);
    for (int64_t k = 0; k < seg.plaid.num_centroids; ++k) {
      largest = std::max(
          largest, std::fabs(TableUnits(r.q16.data(), r.row_sum,
                                        seg.plaid.centroids + k * batch.dim,
                                        batch.dim, offset, r.factor)));
    }
  }
  return PlaidUnitsShift(largest);
}

// The oracle of the int8 MMA path with the kernel's roundings: per query
// row, its int8 codes and scale (QuantizeInt8Row), the row factor = scale
// (1 for a zero row) times the levels' step (PlaidMmaLevels), and its
// float16 values; per cell, the float16 rounding of the row's fp32 dot
// with the token's fp32 centroid (summed in the kernel's order) plus the
// levels' offset times the row's sum (in order), plus the row factor
// times the integer dot of codes and levels, times the token's scale, in
// fp32 as the kernel computes it. Maxima summed in fp64.
// table_shift >= 0: the PLAID scan's form at 2 bits instead, whose table
// holds that value in whole row factors in units of 2^table_shift
// (PlaidUnitsShift; LaunchPlaidQueryCentroids): per cell, the integer
// table value plus the integer dot, as fp32 times the token's scale; the
// row factor times the maximum. (The scan at 4 bits holds the value in
// whole row factors, within half a factor of this oracle's cell.)
std::vector<std::vector<ScoredDoc>> PlaidMmaReference(const Batch& batch,
                                                      int table_shift = -1) {
  const SearchParams p = batch.Params();
  return ReferenceSearchWith(
      p, [&p, table_shift](int32_t q, const SegmentView& seg, int64_t doc) {
        const int32_t dim = seg.dim;
        const int nbits = PlaidNbits(seg.dtype);
        int8_t levels[16];
        float offset = 0.f;
        const float step =
            PlaidMmaLevels(seg.plaid.bucket_weights, nbits, levels, &offset);
        const int64_t lq = p.query_offsets[q + 1] - p.query_offsets[q];
        const int64_t t0 = seg.cu_seqlens[doc], t1 = seg.cu_seqlens[doc + 1];
        if (lq == 0) return 0.0;
        if (t0 == t1) return -std::numeric_limits<double>::infinity();
        const int64_t row_bytes = int64_t{dim} * nbits / 8;
        const float unit = std::ldexp(1.f, std::max(table_shift, 0));
        double total = 0.0;
        for (int64_t i = 0; i < lq; ++i) {
          const MmaRow r = StageMmaRow(
              p.query_tokens + (p.query_offsets[q] + i) * dim, dim, step);
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t t = t0; t < t1; ++t) {
            const float* c = seg.plaid.centroids + int64_t{seg.codes[t]} * dim;
            const uint8_t* res =
                static_cast<const uint8_t*>(seg.tokens) + t * row_bytes;
            int32_t dot = 0;
            for (int32_t d = 0; d < dim; ++d) {
              dot += r.codes[d] * levels[PlaidResidualBucket(res, nbits, d)];
            }
            float cell;
            if (table_shift >= 0) {
              const float x =
                  TableUnits(r.q16.data(), r.row_sum, c, dim, offset, r.factor);
              const int32_t table = static_cast<int32_t>(
                  std::clamp(std::rint(x / unit), -32767.f, 32767.f) * unit);
              cell = static_cast<float>(table + dot) * seg.scales[t];
            } else {
              float qc = 0.f;
              for (int32_t d = 0; d < dim; ++d)
                qc = std::fmaf(r.q16[d], c[d], qc);
              qc = HalfToFloat(FloatToHalf(std::fmaf(offset, r.row_sum, qc)));
              cell = std::fmaf(r.factor, static_cast<float>(dot), qc) *
                     seg.scales[t];
            }
            best = std::max(best, cell);
          }
          total += table_shift >= 0 ? double{r.factor} * best : double{best};
        }
        return total;
      });
}

// How far the int8 MMA path may lie from the exact PLAID score of query q
// (absolute; every segment shares the codec of segment 0): per row, the
// cell error is at most max scale * (the query's int8 rounding against
// the largest |weight - the levels' offset| + the levels' rounding
// (step / 2) against the quantised query + the float16 rounding of the
// query against the largest |centroid value| and |offset| + the table's
// float16 rounding + the scan's int16 rounding of it), and a max or a sum
// of cells errs by no more than its terms.
double PlaidMmaErrorBound(const Batch& batch, int32_t q) {
  const SegmentView& seg = batch.refs[0].host;
  const int32_t dim = seg.dim;
  const int nbits = PlaidNbits(seg.dtype);
  int8_t levels[16];
  float offset = 0.f;
  const float step =
      PlaidMmaLevels(seg.plaid.bucket_weights, nbits, levels, &offset);
  double w_max = 0.0, c_max = 0.0, sc_max = 0.0;
  for (int b = 0; b < (1 << nbits); ++b) {
    w_max = std::max(w_max,
                     std::fabs(double{seg.plaid.bucket_weights[b]} - offset));
  }
  for (int64_t i = 0; i < seg.plaid.num_centroids * dim; ++i) {
    c_max = std::max(c_max, std::fabs(double{seg.plaid.centroids[i]}));
  }
  for (const SegmentRef& r : batch.refs) {
    for (int64_t t = 0; t < r.host.num_tokens; ++t) {
      sc_max = std::max(sc_max, double{r.host.scales[t]});
    }
  }
  const double half_ulp = std::ldexp(1.0, -11);
  std::vector<int8_t> codes(static_cast<size_t>(dim));
  double bound = 0.0;
  for (int64_t i = batch.offsets[q]; i < batch.offsets[q + 1]; ++i) {
    const float* row = batch.tokens.data() + i * dim;
    const double scale = QuantizeInt8Row(row, dim, codes.data());
    double e = 0.0, q_abs = 0.0;
    for (int32_t d = 0; d < dim; ++d) {
      const double x = row[d], xq = scale * codes[d];
      e += std::fabs(x - xq) * w_max + std::fabs(xq) * step / 2;
      q_abs += std::fabs(x);
    }
    // The float16 query (relative 2^-11), the float16 table value
    // (|q . c + offset * sum(q)| <= q_abs * (c_max + |offset|), relative
    // 2^-11) and the scan's int16 table (relative to the largest, 2^-16).
    e += (2 * half_ulp * 1.01 + std::ldexp(1.0, -15)) * q_abs *
         (c_max + std::fabs(offset));
    bound += sc_max * e;
  }
  return bound;
}

void ExpectRefused(Backend& backend, const Batch& batch,
                   const ::testing::Matcher<std::string>& what) {
  std::vector<std::vector<ScoredDoc>> out(batch.top_k.size());
  EXPECT_THAT(backend.Search(batch.Params(), absl::MakeSpan(out), nullptr),
              StatusIs(absl::StatusCode::kUnimplemented, what));
  EXPECT_TRUE(backend.healthy());
}

// The GPU's ranking of a PLAID batch against the oracle of the path that
// scores it (the float16 decode: the oracle on the kernel's float16 rows;
// the int8 MMA: PlaidMmaReference) and against the exact PLAID oracle, or
// the refusal where no kernel serves it. `options`: the backend's.
void ExpectPlaidSearch(
    Backend& backend, const Batch& batch, int nbits, const PlaidCorpus& corpus,
    const GpuBackendOptions& options = ::maxsimd::testing::TestOptions()) {
  if (!PlaidKernelExpected(batch.dim, nbits)) {
    ExpectRefused(backend, batch, HasSubstr("plaid"));
    return;
  }
  const auto got = GpuSearch(backend, batch.Params());
  const bool mma = UsesPlaidMma(options, batch, nbits);
  std::vector<std::vector<ScoredDoc>> want;
  if (mma) {
    // The PLAID scan kernel at 2 bits (plaid_scan.h PlaidScanApplies: one
    // tile, the warp scan on) holds its table as int16.
    const bool scan16 = batch.cand_offsets.empty() && options.plaid_warp_scan &&
                        PlaidUnitsInt16(nbits);
    want = PlaidMmaReference(batch, scan16 ? ScanTableShift(batch) : -1);
  } else {
    Batch as_decoded = batch;
    as_decoded.refs.clear();
    for (const HostSegment& h : corpus.decoded) {
      as_decoded.refs.push_back({h.View(), h.View()});
    }
    want = GpuReferenceSearch(as_decoded, DType::kFloat16);
  }
  const auto exact = ReferenceSearch(batch.Params());
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), exact.size());
  for (size_t q = 0; q < got.size(); ++q) {
    EXPECT_EQ(CompareRanking(got[q], want[q], kTol, /*repeats=*/true), "")
        << "query " << q << " of " << got.size()
        << (mma ? " (int8 MMA path)" : " (float16 rows)");
    // The int8 MMA path: the size of its roundings, bounded per query.
    const double exact_tol =
        kExactTol +
        (mma ? PlaidMmaErrorBound(batch, static_cast<int32_t>(q)) : 0.0);
    EXPECT_EQ(CompareRanking(got[q], exact[q], exact_tol, /*repeats=*/true), "")
        << "query " << q << " of " << got.size() << " (exact decode)";
  }
}

constexpr int kNbits[] = {1, 2, 4, 8};
constexpr int32_t kDims[] = {64, 128, 256};

TEST(GpuPlaidTest, SupportsDTypeNamesExactlyTheKernelWidths) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  for (int nbits : kNbits) {
    for (int32_t dim : {8, 32, 64, 96, 128, 192, 256, 512}) {
      EXPECT_EQ(backend.SupportsDType(PlaidDType(nbits), dim),
                PlaidKernelExpected(dim, nbits))
          << "nbits " << nbits << " dim " << dim;
    }
    // Resident only: the stream buffers carry no ids or scales.
    EXPECT_FALSE(backend.StreamsDType(PlaidDType(nbits)));
  }
}

TEST(GpuPlaidTest, RaggedScanMatchesReference) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int nbits : kNbits) {
    for (int32_t dim : kDims) {
      SCOPED_TRACE(::testing::Message() << "nbits " << nbits << " dim " << dim);
      const PlaidCorpus corpus = MakeCorpus(backend, rng, dim, nbits);
      for (bool one_query : {true, false}) {
        SCOPED_TRACE(one_query ? "one query" : "batch");
        ExpectPlaidSearch(backend, ScanBatch(rng, corpus, dim, one_query),
                          nbits, corpus);
      }
    }
  }
}

TEST(GpuPlaidTest, RerankMatchesReference) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int nbits : kNbits) {
    for (int32_t dim : kDims) {
      SCOPED_TRACE(::testing::Message() << "nbits " << nbits << " dim " << dim);
      const PlaidCorpus corpus = MakeCorpus(backend, rng, dim, nbits);
      for (int nq : {1, 7}) {
        SCOPED_TRACE(::testing::Message() << nq << " queries");
        ExpectPlaidSearch(backend, RerankBatch(rng, corpus, dim, nq), nbits,
                          corpus);
      }
    }
  }
}

// The float16 decode at d = 128 for one query of 32 rows, which the int8
// MMA takes by default: a backend with GpuBackendOptions::plaid_int8_mma
// off, on scans and reranks at every nbits.
TEST(GpuPlaidTest, Float16DecodeAtWidth128WithTheInt8MmaOff) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions options = ::maxsimd::testing::TestOptions();
  options.plaid_int8_mma = false;
  auto backend = ::maxsimd::testing::MakeGpuBackend(options);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int nbits : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "nbits " << nbits);
    const PlaidCorpus corpus = MakeCorpus(*backend, rng, 128, nbits);
    ExpectPlaidSearch(*backend, ScanBatch(rng, corpus, 128, true), nbits,
                      corpus, options);
    ExpectPlaidSearch(*backend, RerankBatch(rng, corpus, 128, 1), nbits, corpus,
                      options);
  }
}

// PlaidMma scans at 2 and 4 bits take the warp kernel (plaid_scan.cu) by
// default; with GpuBackendOptions::plaid_warp_scan off, the TMA kernel's
// PlaidMma path scores them, against the same oracle: one query of 32 rows,
// and two queries sharing the tile.
// Scans in one query tile: one query of 32 rows, and two of 16 and
// `second_rows` rows.
std::vector<Batch> OneTileScans(std::mt19937_64& rng, const PlaidCorpus& corpus,
                                int second_rows) {
  Batch two;
  two.dim = 128;
  two.refs = corpus.Refs();
  two.AddQuery(RandomQuery(rng, 16, 128), 50);
  two.AddQuery(RandomQuery(rng, second_rows, 128), 7);
  return {ScanBatch(rng, corpus, 128, true), two};
}

TEST(GpuPlaidTest, TmaPlaidMmaScanWithTheWarpScanOff) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions options = ::maxsimd::testing::TestOptions();
  options.plaid_warp_scan = false;
  auto backend = ::maxsimd::testing::MakeGpuBackend(options);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int nbits : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "nbits " << nbits);
    const PlaidCorpus corpus = MakeCorpus(*backend, rng, 128, nbits);
    for (const Batch& batch : OneTileScans(rng, corpus, 9)) {
      // (The mma.sync kernels, MAXSIMD_TEST_KERNELS=mma, refuse PLAID.)
      EXPECT_EQ(UsesPlaidMma(options, batch, nbits), options.use_tma);
      ExpectPlaidSearch(*backend, batch, nbits, corpus, options);
    }
  }
}

// The int16 form of the scan's table (2 bits, maxsim_tma.h PlaidUnitsInt16)
// holds round(x / 2^s) with s the smallest shift that fits the tile's
// largest |x| in int16.
TEST(GpuPlaidTest, ScanTableShiftIsTheSmallestThatFitsInt16) {
  EXPECT_TRUE(PlaidUnitsInt16(2));
  EXPECT_FALSE(PlaidUnitsInt16(4));
  const float cases[] = {0.f,     1.f,       32767.f,     32768.f,     65534.f,
                         65535.f, 1048579.f, 536870912.f, 1073709056.f};
  for (float x : cases) {
    SCOPED_TRACE(::testing::Message() << "largest |x| " << x);
    const int s = PlaidUnitsShift(x);
    EXPECT_GE(s, 0);
    EXPECT_LE(s, 15);
    EXPECT_LE(std::rint(x / std::ldexp(1.f, s)), 32767.f);
    if (s > 0) {
      EXPECT_GT(std::rint(x / std::ldexp(1.f, s - 1)), 32767.f);
    }
  }
  EXPECT_EQ(PlaidUnitsShift(32767.f), 0);
  EXPECT_EQ(PlaidUnitsShift(32768.f), 1);
}

// Bucket weights a hundredth of the usual: the levels' step, and with it
// every row factor, shrinks a hundredfold, so the scan's table in factor
// units is a hundred times larger and its int16 form takes a shift of 8
// or more (that of the usual corpora is checked to be smaller). The scan
// at both widths against the oracles, on one query of 32 rows and on two
// in a tile.
TEST(GpuPlaidTest, ScanTableOfLargeUnitsKeepsItsPrecision) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int nbits : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "nbits " << nbits);
    const PlaidCorpus corpus = MakeCorpus(backend, rng, 128, nbits, 0.01f);
    for (const Batch& batch : OneTileScans(rng, corpus, 12)) {
      EXPECT_GE(ScanTableShift(batch), 8);
      ExpectPlaidSearch(backend, batch, nbits, corpus);
    }
  }
  const PlaidCorpus usual = MakeCorpus(backend, rng, 128, 2);
  EXPECT_LT(ScanTableShift(ScanBatch(rng, usual, 128, true)), 8);
}

// Two queries of 16 rows in one scan tile, and reranks of several queries
// of at most 32 rows each: the int8 MMA path with more than one query per
// launch (each rerank query on its own tile, the table per tile).
TEST(GpuPlaidTest, Int8MmaServesSeveralQueriesPerLaunch) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int nbits : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "nbits " << nbits);
    const PlaidCorpus corpus = MakeCorpus(backend, rng, 128, nbits);
    Batch scan;
    scan.dim = 128;
    scan.refs = corpus.Refs();
    scan.AddQuery(RandomQuery(rng, 16, 128), 50);
    scan.AddQuery(RandomQuery(rng, 9, 128), 7);
    // (The mma.sync kernels, MAXSIMD_TEST_KERNELS=mma, refuse PLAID.)
    const bool tma = ::maxsimd::testing::TestOptions().use_tma;
    EXPECT_EQ(UsesPlaidMma(::maxsimd::testing::TestOptions(), scan, nbits),
              tma);
    ExpectPlaidSearch(backend, scan, nbits, corpus);
    Batch rerank = RerankBatch(rng, corpus, 128, 1);
    std::uniform_int_distribution<int> lq(1, 32);
    for (int q = 0; q < 11; ++q) {
      rerank.AddQuery(RandomQuery(rng, lq(rng), 128), 1 + 3 * q);
      for (int64_t d = 0; d < kDocs[q % 3]; d += 1 + q) {
        rerank.candidates.push_back({q % 3, d});
      }
      rerank.cand_offsets.push_back(
          static_cast<int64_t>(rerank.candidates.size()));
    }
    EXPECT_EQ(UsesPlaidMma(::maxsimd::testing::TestOptions(), rerank, nbits),
              tma);
    ExpectPlaidSearch(backend, rerank, nbits, corpus);
  }
}

// The formula on numbers worked by hand (the CPU backend's test of the
// same name): dim 64, nbits 2, every residual byte 0b00'10'01'11 (buckets
// 0, 1, 2, 3 in turn), centroid 0 all zeros but value 0 = 1, bucket weights
// {-0.5, -0.25, 0.25, 0.5}: the token decodes to {0.5, -0.25, 0.25, 0.5,
// -0.5, -0.25, ...}. Query row {1, 2, 3, 4, 0, ...} with scale 2 scores
// 2 * (0.5 - 0.5 + 0.75 + 2) = 5.5, exactly in float16.
TEST(GpuPlaidTest, ScoresFollowTheStatedFormula) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  constexpr int32_t kDim = 64;
  PlaidSegment seg = MakePlaidSegment(kDim, 2, 2, {1, 2}, 7);
  seg.bucket_weights = {-0.5f, -0.25f, 0.25f, 0.5f};
  std::fill(seg.centroids.begin(), seg.centroids.end(), 0.f);
  seg.centroids[0] = 1.f;
  seg.centroids_f16.clear();
  for (float c : seg.centroids) seg.centroids_f16.push_back(FloatToHalf(c));
  std::fill(seg.residuals.begin(), seg.residuals.end(), uint8_t{0b00100111});
  seg.codes = {0, 1, 0};
  seg.scales = {2.f, 1.f, 1.f};
  const DevicePlaid d = UploadPlaid(backend, seg, 0);
  Batch batch;
  batch.dim = kDim;
  batch.refs = {d.ref};
  std::vector<float> q(kDim, 0.f);
  q[0] = 1, q[1] = 2, q[2] = 3, q[3] = 4;
  batch.AddQuery(q, 2);
  if (!PlaidKernelExpected(kDim, 2)) {
    ExpectRefused(backend, batch, HasSubstr("plaid"));
    return;
  }
  const auto got = GpuSearch(backend, batch.Params());
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), 2u);
  // Document 1: the max of token 1 (centroid 1, all zeros: -0.5 - 0.5 +
  // 0.75 + 2 = 1.75) and token 2 (centroid 0, scale 1: 2.75).
  EXPECT_EQ(got[0][0].index, 0);
  EXPECT_EQ(got[0][0].score, 5.5f);
  EXPECT_EQ(got[0][1].index, 1);
  EXPECT_EQ(got[0][1].score, 2.75f);
}

TEST(GpuPlaidTest, WidthsWithoutTheKernelAreUnimplemented) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  const std::pair<int32_t, int> cases[] = {{64, 1}, {96, 2}, {32, 4}, {128, 8}};
  for (const auto& [dim, nbits] : cases) {
    SCOPED_TRACE(::testing::Message() << "nbits " << nbits << " dim " << dim);
    const PlaidSegment seg = MakePlaidSegment(dim, nbits, 5, {3, 0, 4},
                                              static_cast<uint32_t>(rng()));
    const DevicePlaid d = UploadPlaid(backend, seg, 0);
    Batch batch;
    batch.dim = dim;
    batch.refs = {d.ref};
    batch.AddQuery(RandomQuery(rng, 5, dim), 3);
    ExpectRefused(backend, batch,
                  ::testing::AllOf(HasSubstr("layout plaid"),
                                   HasSubstr(absl::StrCat("dim ", dim))));
    batch.cand_offsets = {0, 2};
    batch.candidates = {{0, 0}, {0, 2}};
    ExpectRefused(backend, batch, HasSubstr("layout plaid"));
  }
}

// The mma.sync kernels have no PLAID path: a backend without the TMA
// kernels refuses every PLAID width.
TEST(GpuPlaidTest, MmaKernelsRefusePlaid) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  GpuBackendOptions options = ::maxsimd::testing::TestOptions();
  options.use_tma = false;
  auto backend = ::maxsimd::testing::MakeGpuBackend(options);
  ASSERT_NE(backend, nullptr);
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  for (int nbits : kNbits) {
    EXPECT_FALSE(backend->SupportsDType(PlaidDType(nbits), 128));
  }
  const PlaidSegment seg = MakePlaidSegment(128, 2, 5, {3, 4}, 11);
  const DevicePlaid d = UploadPlaid(*backend, seg, 0);
  Batch batch;
  batch.dim = 128;
  batch.refs = {d.ref};
  batch.AddQuery(RandomQuery(rng, 5, 128), 2);
  ExpectRefused(*backend, batch, HasSubstr("layout plaid"));
}

TEST(GpuPlaidTest, HostPlacedSegmentsAndMixedCodecsAreUnimplemented) {
  MAXSIMD_SKIP_WITHOUT_GPU();
  Backend& backend = SharedGpuBackend();
  std::mt19937_64 rng(::maxsimd::testing::TestSeed());
  const PlaidSegment a = MakePlaidSegment(128, 2, 5, {3, 4}, 12);
  const PlaidSegment b = MakePlaidSegment(128, 2, 5, {2, 6}, 13);
  const DevicePlaid da = UploadPlaid(backend, a, 0);
  DevicePlaid db = UploadPlaid(backend, b, 2);  // a codec of its own
  Batch batch;
  batch.dim = 128;
  batch.refs = {da.ref, db.ref};
  batch.AddQuery(RandomQuery(rng, 5, 128), 4);
  ExpectRefused(backend, batch,
                HasSubstr(PlaidKernelExpected(128, 2) ? "codec" : "plaid"));
  batch.refs = {da.ref};
  batch.refs[0].streamed = true;
  ExpectRefused(backend, batch, HasSubstr("plaid"));
}

}  // namespace
}  // namespace maxsimd
