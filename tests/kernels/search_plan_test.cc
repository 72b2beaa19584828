// The GPU backend's host planning (kernels/gpu/search_plan.h) on the CPU:
// kernel choice, the staging blob's layout and contents, gather records and
// units, streamed rounds, and the PlaidMma plan.
#include "kernels/gpu/search_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/base/half.h"
#include "kernels/topk_cpu.h"

namespace maxsimd {
namespace {

// One segment of `docs` documents of `len` tokens each, its views pointing
// at host arrays the fixture owns.
struct FakeSegment {
  std::vector<int64_t> cu;
  std::vector<uint16_t> tokens;
  std::vector<uint32_t> tombstones;
  std::vector<float> scales;
  std::vector<int32_t> codes;
  SegmentRef ref;

  FakeSegment(int64_t docs, int64_t len, int32_t dim, int64_t base,
              DType dtype = DType::kFloat16) {
    for (int64_t d = 0; d <= docs; ++d) cu.push_back(d * len);
    tokens.assign(docs * len * dim, 0);
    tombstones.assign((docs + 31) / 32, 0);
    scales.assign(docs * len, 1.f);
    codes.assign(docs * len, 0);
    SegmentView v;
    v.tokens = tokens.data();
    v.cu_seqlens = cu.data();
    v.tombstones = tombstones.data();
    v.num_docs = docs;
    v.num_tokens = docs * len;
    v.dim = dim;
    v.dtype = dtype;
    v.base_index = base;
    if (dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
      v.scales = scales.data();
      v.codes = codes.data();
    }
    ref.host = v;
    ref.resident = v;
  }
  void Delete(int64_t doc) { tombstones[doc / 32] |= 1u << (doc % 32); }
};

// A batch of `rows_per_query` query rows per query, value q + 1 in every
// element of query q's rows.
SearchBatch Queries(int32_t dim, const std::vector<int64_t>& rows_per_query,
                    int32_t k = 10) {
  SearchBatch b;
  b.dim = dim;
  for (size_t q = 0; q < rows_per_query.size(); ++q) {
    b.AddQuery(
        std::vector<float>(rows_per_query[q] * dim, static_cast<float>(q + 1)),
        k);
  }
  return b;
}

PlanConfig Config(bool tma) {
  PlanConfig c;
  c.sm_count = 132;
  c.use_tma = tma;
  c.max_query_elements = int64_t{1} << 20;
  c.plaid_table_bytes = int64_t{64} << 20;
  c.plaid_warp_scan = true;
  c.stream_buffer_bytes = int64_t{1} << 20;
  return c;
}

const char* const kNoBuffers[kStreamBuffers] = {nullptr, nullptr};

TEST(SearchPlanTest, ScanWithoutTmaStagesPaddedRowMajorRows) {
  FakeSegment seg(4, 3, 96, 0);
  SearchBatch b = Queries(96, {2, 3});
  b.refs = {seg.ref};
  const SearchParams p = b.Params();
  absl::StatusOr<SearchPlan> plan = PlanSearch(p, Config(false));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->tma.on);
  EXPECT_FALSE(plan->gather);
  EXPECT_EQ(plan->dpad, 96);
  EXPECT_EQ(plan->rows, 5);
  EXPECT_EQ(plan->query_bytes, 5 * 96 * 2);
  std::vector<char> blob(plan->layout.end, 0x55);
  absl::StatusOr<StagedInputs> staged =
      StageRequest(p, *plan, blob.data(), kNoBuffers);
  ASSERT_TRUE(staged.ok()) << staged.status();
  const uint16_t* q =
      reinterpret_cast<const uint16_t*>(blob.data() + plan->layout.query);
  EXPECT_EQ(HalfToFloat(q[0]), 1.f);
  EXPECT_EQ(HalfToFloat(q[2 * 96]), 2.f);  // query 1's first row
  const int32_t* row_query =
      reinterpret_cast<const int32_t*>(blob.data() + plan->layout.row_query);
  EXPECT_EQ(std::vector<int32_t>(row_query, row_query + 5),
            (std::vector<int32_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(staged->used, plan->layout.top_k + 2 * sizeof(int32_t));
}

TEST(SearchPlanTest, OddWidthPadsWithZeros) {
  FakeSegment seg(2, 2, 40, 0);
  SearchBatch b = Queries(40, {1});
  b.refs = {seg.ref};
  const SearchParams p = b.Params();
  absl::StatusOr<SearchPlan> plan = PlanSearch(p, Config(true));
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->tma.on);  // 40 is below the TMA kernel's widths
  EXPECT_EQ(plan->dpad, 64);
  std::vector<char> blob(plan->layout.end, 0x55);
  ASSERT_TRUE(StageRequest(p, *plan, blob.data(), kNoBuffers).ok());
  const uint16_t* q =
      reinterpret_cast<const uint16_t*>(blob.data() + plan->layout.query);
  for (int c = 40; c < 64; ++c) EXPECT_EQ(q[c], 0) << c;
}

TEST(SearchPlanTest, TmaScanPacksQueriesAt16RowsAndPicksWarpgroups) {
  FakeSegment seg(4, 3, 128, 0);
  SearchBatch small = Queries(128, {5, 9});  // 16 + 16 rows: one warpgroup
  small.refs = {seg.ref};
  absl::StatusOr<SearchPlan> plan = PlanSearch(small.Params(), Config(true));
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(plan->tma.on);
  EXPECT_EQ(plan->tma.warpgroups, 1);
  EXPECT_EQ(plan->tma.place, (std::vector<int64_t>{0, 16, 32}));
  EXPECT_EQ(plan->tma.tiles, 1);
  SearchBatch wide = Queries(128, {20, 20});  // 32 + 32 rows: two
  wide.refs = {seg.ref};
  plan = PlanSearch(wide.Params(), Config(true));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->tma.warpgroups, 2);
  EXPECT_EQ(plan->tma.tile_rows, 64);
  EXPECT_EQ(plan->tma.place, (std::vector<int64_t>{0, 32, 64}));
  EXPECT_EQ(plan->query_bytes, TmaTileBytes(2, 128));
}

TEST(SearchPlanTest, TmaOffWhenTheTilesExceedTheQueryBuffer) {
  FakeSegment seg(4, 3, 128, 0);
  SearchBatch b = Queries(128, {64, 64});
  b.refs = {seg.ref};
  PlanConfig c = Config(true);
  c.max_query_elements = 64 * 128;  // half the staged tiles
  absl::StatusOr<SearchPlan> plan = PlanSearch(b.Params(), c);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->tma.on);
}

// PLAID without the TMA kernel is UNIMPLEMENTED; int8 takes the mma.sync
// kernels there (and at widths the TMA kernel does not widen, 96 here):
// row-major float16 rows, with quantised queries holding their codes and
// each row's scale in the copied part of the blob, and gather records
// pointing at each candidate's codes and scales.
TEST(SearchPlanTest, Int8WithoutTheTmaKernelTakesTheMmaSyncKernels) {
  FakeSegment plaid(4, 3, 128, 0, DType::kPlaid2);
  SearchBatch pb = Queries(128, {4});
  pb.refs = {plaid.ref};
  absl::StatusOr<SearchPlan> refused = PlanSearch(pb.Params(), Config(false));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("TMA kernel"), std::string::npos)
      << refused.status();

  for (const auto& [dim, tma] : {std::pair<int32_t, bool>{128, false},
                                 std::pair<int32_t, bool>{96, true}}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim << " tma " << tma);
    FakeSegment seg(6, 3, dim, 40, DType::kInt8);
    for (size_t i = 0; i < seg.scales.size(); ++i) seg.scales[i] = 0.5f + i;
    SearchBatch b = Queries(dim, {2, 3});
    b.quantize_queries = true;
    b.refs = {seg.ref};
    b.cand_offsets = {0, 1, 2};
    b.candidates = {{0, 4}, {0, 1}};
    const SearchParams p = b.Params();
    absl::StatusOr<SearchPlan> plan = PlanSearch(p, Config(tma));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_FALSE(plan->tma.on);
    EXPECT_TRUE(plan->q_scaled);
    EXPECT_EQ(plan->q_scale_rows, 5);
    EXPECT_EQ(plan->query_dtype, DType::kFloat16);
    std::vector<char> blob(plan->layout.end, 0);
    absl::StatusOr<StagedInputs> staged =
        StageRequest(p, *plan, blob.data(), kNoBuffers);
    ASSERT_TRUE(staged.ok()) << staged.status();
    // Query q's rows are q + 1 everywhere: codes 127, scale (q + 1) / 127.
    const float* q_scales =
        reinterpret_cast<const float*>(blob.data() + plan->layout.q_scales);
    EXPECT_FLOAT_EQ(q_scales[0], 1.f / 127.f);
    EXPECT_FLOAT_EQ(q_scales[4], 2.f / 127.f);
    const uint16_t* rows =
        reinterpret_cast<const uint16_t*>(blob.data() + plan->layout.query);
    EXPECT_EQ(HalfToFloat(rows[3 * plan->dpad]), 127.f);
    EXPECT_EQ(HalfToFloat(rows[3 * plan->dpad + dim - 1]), 127.f);
    EXPECT_GE(staged->used, plan->layout.q_scales + 5 * sizeof(float));
    const GatherRecord* recs = reinterpret_cast<const GatherRecord*>(
        blob.data() + plan->layout.records);
    EXPECT_EQ(recs[0].tokens,
              reinterpret_cast<const char*>(seg.tokens.data()) + 12 * dim);
    EXPECT_EQ(recs[0].scales, seg.scales.data() + 12);
    EXPECT_EQ(recs[1].scales, seg.scales.data() + 3);
    EXPECT_EQ(recs[1].len, 3);
  }
}

TEST(SearchPlanTest, GatherRecordsSkipDeletedCandidatesAndUsePositions) {
  FakeSegment seg0(10, 4, 128, 100);
  FakeSegment seg1(10, 2, 128, 500);
  seg1.Delete(3);
  SearchBatch b = Queries(128, {4, 4});
  b.refs = {seg0.ref, seg1.ref};
  // Query 0: seg0 doc 7, seg1 doc 3 (deleted), seg1 doc 1; query 1: seg0
  // doc 2.
  b.cand_offsets = {0, 3, 4};
  b.candidates = {{0, 7}, {1, 3}, {1, 1}, {0, 2}};
  const SearchParams p = b.Params();
  for (bool tma : {false, true}) {
    SCOPED_TRACE(tma ? "tma" : "mma.sync");
    absl::StatusOr<SearchPlan> plan = PlanSearch(p, Config(tma));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->tma.on, tma);
    EXPECT_EQ(plan->query_base, (std::vector<int64_t>{107, 102}));
    std::vector<char> blob(plan->layout.end, 0);
    absl::StatusOr<StagedInputs> staged =
        StageRequest(p, *plan, blob.data(), kNoBuffers);
    ASSERT_TRUE(staged.ok()) << staged.status();
    EXPECT_EQ(staged->num_records, 3);
    EXPECT_EQ(staged->max_row, 2);
    const int64_t* rec_offsets = reinterpret_cast<const int64_t*>(
        blob.data() + plan->layout.rec_offsets);
    EXPECT_EQ(std::vector<int64_t>(rec_offsets, rec_offsets + 3),
              (std::vector<int64_t>{0, 2, 3}));
    // Positions: index - the query's lowest candidate index, in records of
    // the path's kind.
    const GatherRecord* recs = reinterpret_cast<const GatherRecord*>(
        blob.data() + plan->layout.records);
    auto position = [&](int i) {
      return tma ? reinterpret_cast<const TmaRecord*>(recs)[i].position
                 : recs[i].position;
    };
    EXPECT_EQ(position(0), 0u);          // 107 - 107
    EXPECT_EQ(position(1), 501u - 107);  // seg1 doc 1
    EXPECT_EQ(position(2), 0u);          // 102 - 102
    if (tma) {
      const TmaRecord* t = reinterpret_cast<const TmaRecord*>(recs);
      EXPECT_EQ(t[0].row, 28);
      EXPECT_EQ(t[0].len, 4);
      EXPECT_EQ(t[1].slot, 1);
      EXPECT_EQ(t[1].row, 2);
    } else {
      EXPECT_EQ(recs[0].tokens, seg0.tokens.data() + 28 * 128);
      EXPECT_EQ(recs[1].len, 2);
    }
    const GatherTile* units =
        reinterpret_cast<const GatherTile*>(blob.data() + plan->layout.tiles);
    // Units of up to per_unit records, never across queries: the TMA
    // kernel spreads this small rerank one record a unit.
    const int64_t units_expected = tma ? 3 : 2;
    ASSERT_EQ(staged->num_units, units_expected);
    EXPECT_EQ(units[0].query, 0);
    EXPECT_EQ(units[0].rec_end, tma ? 1 : 2);
    EXPECT_EQ(units[units_expected - 1].query, 1);
    EXPECT_EQ(units[units_expected - 1].rec_begin, 2);
    EXPECT_EQ(staged->used,
              plan->layout.tiles + units_expected * sizeof(GatherTile));
    EXPECT_LE(staged->used, plan->layout.end);
  }
}

TEST(SearchPlanTest, CandidatesSpanningMoreThan32BitsAreRefused) {
  FakeSegment seg0(4, 1, 128, 0);
  FakeSegment seg1(4, 1, 128, int64_t{1} << 33);
  SearchBatch b = Queries(128, {2});
  b.refs = {seg0.ref, seg1.ref};
  b.cand_offsets = {0, 2};
  b.candidates = {{0, 0}, {1, 0}};
  absl::StatusOr<SearchPlan> plan = PlanSearch(b.Params(), Config(true));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("2^32 - 1"), std::string::npos);
}

TEST(SearchPlanTest, UnitsCutAtPerUnitRecords) {
  FakeSegment seg(200, 2, 128, 0);
  SearchBatch b = Queries(128, {4});
  b.refs = {seg.ref};
  b.cand_offsets = {0, 200};
  for (int64_t d = 0; d < 200; ++d) b.candidates.push_back({0, d});
  const SearchParams p = b.Params();
  absl::StatusOr<SearchPlan> plan = PlanSearch(p, Config(false));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->per_unit, kGatherRecordsPerTile);
  std::vector<char> blob(plan->layout.end, 0);
  absl::StatusOr<StagedInputs> staged =
      StageRequest(p, *plan, blob.data(), kNoBuffers);
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(staged->num_units, 200 / kGatherRecordsPerTile);
  // The TMA kernel: one wave of 132 x 2 block slots, so one record a unit.
  plan = PlanSearch(p, Config(true));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->per_unit, 1);
}

TEST(SearchPlanTest, StreamedCandidatesGoInRoundsIntoTheStreamBuffers) {
  const int32_t dim = 128;
  FakeSegment seg(64, 100, dim, 0);
  seg.ref.streamed = true;
  SearchBatch b = Queries(dim, {4});
  b.refs = {seg.ref};
  b.cand_offsets = {0, 64};
  for (int64_t d = 0; d < 64; ++d) b.candidates.push_back({0, d});
  const SearchParams p = b.Params();
  PlanConfig c = Config(false);
  c.stream_buffer_bytes = 1000 * dim * 2;  // 1,000 rows: ten documents
  absl::StatusOr<SearchPlan> plan = PlanSearch(p, c);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->stream_rows, 1000);
  std::vector<char> buf0(1), buf1(1);
  const char* buffers[kStreamBuffers] = {buf0.data(), buf1.data()};
  std::vector<char> blob(plan->layout.end, 0);
  absl::StatusOr<StagedInputs> staged =
      StageRequest(p, *plan, blob.data(), buffers);
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_EQ(staged->streamed_recs.size(), 64u);
  ASSERT_GE(staged->rounds.size(), 7u);
  int64_t rows = 0;
  for (size_t r = 0; r < staged->rounds.size(); ++r) {
    EXPECT_LE(staged->rounds[r].rows, 1000) << r;
    EXPECT_EQ(staged->rounds[r].row_begin, rows);
    rows += staged->rounds[r].rows;
  }
  EXPECT_EQ(rows, 6400);
  // Each record points into the buffer of its round.
  const GatherRecord* recs =
      reinterpret_cast<const GatherRecord*>(blob.data() + plan->layout.records);
  const StreamRound& second = staged->rounds[1];
  const StreamedRecord& sr = staged->streamed_recs[second.rec_begin];
  EXPECT_EQ(recs[sr.record].tokens, buf1.data());
}

TEST(SearchPlanTest, AStreamedDocumentPastTheBufferIsRefused) {
  const int32_t dim = 128;
  FakeSegment seg(2, 600, dim, 0);
  seg.ref.streamed = true;
  SearchBatch b = Queries(dim, {4});
  b.refs = {seg.ref};
  b.cand_offsets = {0, 1};
  b.candidates = {{0, 1}};
  const SearchParams p = b.Params();
  PlanConfig c = Config(false);
  c.stream_buffer_bytes = 500 * dim * 2;
  absl::StatusOr<SearchPlan> plan = PlanSearch(p, c);
  ASSERT_TRUE(plan.ok());
  std::vector<char> blob(plan->layout.end, 0);
  absl::StatusOr<StagedInputs> staged =
      StageRequest(p, *plan, blob.data(), kNoBuffers);
  ASSERT_FALSE(staged.ok());
  EXPECT_EQ(staged.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(staged.status().message().find("stream_buffer_bytes"),
            std::string::npos);
}

TEST(SearchPlanTest, PlaidTakesTheInt8MmaWhenItsTableFitsTheWorkers) {
  const int32_t dim = 128;
  FakeSegment seg(8, 4, dim, 0, DType::kPlaid2);
  std::vector<float> weights = {-0.1f, -0.03f, 0.03f, 0.1f};
  seg.ref.host.plaid.bucket_weights = weights.data();
  seg.ref.host.plaid.num_centroids = 1000;
  seg.ref.resident.plaid = seg.ref.host.plaid;
  SearchBatch b = Queries(dim, {8});
  b.refs = {seg.ref};
  const SearchParams p = b.Params();
  absl::StatusOr<SearchPlan> plan = PlanSearch(p, Config(true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->plaid_mma.on);
  EXPECT_TRUE(plan->q_scaled);
  EXPECT_TRUE(plan->plaid_mma.units);  // a scan at 2 bits: the warp kernel
  EXPECT_EQ(plan->plaid_mma.units_offset, PlaidQcTableBytes(1, 1000));
  EXPECT_EQ(plan->plaid_mma.units_max_offset,
            PlaidQcTableBytes(1, 1000) + 1000 * 128);
  // A worker table too small for it: the float16 decode, not an error.
  PlanConfig small = Config(true);
  small.plaid_table_bytes = PlaidQcTableBytes(1, 1000) - 1;
  plan = PlanSearch(p, small);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->plaid_mma.on);
  EXPECT_FALSE(plan->q_scaled);
  // No table at all (plaid_int8_mma off, or no TMA kernels).
  small.plaid_table_bytes = 0;
  plan = PlanSearch(p, small);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->plaid_mma.on);
}

TEST(SearchPlanTest, EveryRequestFitsTheCapacityLayout) {
  BackendLimits lim;
  lim.max_batch_queries = 4;
  lim.max_batch_query_tokens = 64;
  lim.max_batch_candidates = 64;
  PlanConfig c = Config(true);
  c.limits = lim;
  c.max_query_elements = 64 * 128;
  const InputLayout cap = InputLayout::Capacity(lim, c.max_query_elements);
  FakeSegment seg(64, 3, 128, 0);
  SearchBatch b = Queries(128, {16, 16, 16, 16});
  b.refs = {seg.ref};
  b.cand_offsets = {0, 16, 32, 48, 64};
  for (int64_t d = 0; d < 64; ++d) b.candidates.push_back({0, d});
  for (bool tma : {false, true}) {
    c.use_tma = tma;
    absl::StatusOr<SearchPlan> plan = PlanSearch(b.Params(), c);
    ASSERT_TRUE(plan.ok());
    EXPECT_LE(plan->layout.end, cap.end);
    EXPECT_LE(plan->layout.tiles, cap.tiles);
    EXPECT_LE(plan->layout.records, cap.records);
  }
}

TEST(SearchPlanTest, PlanStreamedRoundsKeepsTheTargetAndTheBuffer) {
  std::vector<GatherTile> units(4);
  std::vector<StreamedRecord> recs;
  for (int u = 0; u < 4; ++u) {
    units[u].rec_begin = u;
    units[u].rec_end = u + 1;
    recs.push_back({u, nullptr, 40, 40 * u});
  }
  std::vector<StreamRound> rounds;
  ASSERT_TRUE(PlanStreamedRounds(units.data(), 4, 100, 80, recs, &rounds).ok());
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0].unit_end, 2);
  EXPECT_EQ(rounds[0].rows, 80);
  EXPECT_EQ(rounds[1].row_begin, 80);
  rounds.clear();
  EXPECT_FALSE(PlanStreamedRounds(units.data(), 4, 30, 30, recs, &rounds).ok());
}

TEST(MergeRankedTest, KeepsTheBestKInOrder) {
  std::vector<ScoredDoc> into = {{0.9f, 5}, {0.5f, 1}};
  MergeRanked(&into, {{0.9f, 2}, {0.7f, 9}, {0.1f, 3}}, 3);
  EXPECT_EQ(into, (std::vector<ScoredDoc>{{0.9f, 2}, {0.9f, 5}, {0.7f, 9}}));
  std::vector<ScoredDoc> empty;
  MergeRanked(&empty, {{0.2f, 1}}, 3);
  EXPECT_EQ(empty, (std::vector<ScoredDoc>{{0.2f, 1}}));
}

}  // namespace
}  // namespace maxsimd
