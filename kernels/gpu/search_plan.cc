#include "kernels/gpu/search_plan.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/element.h"
#include "kernels/plaid_bits.h"
#include "kernels/quantize.h"

namespace maxsimd {
namespace {

constexpr size_t kAlign = 256;

size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Each query's lowest candidate index; a query's candidates must lie
// within 2^32 - 1 of it (positions are 32-bit).
absl::Status PlanQueryBases(const SearchParams& p, SearchPlan* plan) {
  plan->query_base.assign(plan->nq, 0);
  for (int32_t q = 0; q < plan->nq; ++q) {
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
    for (int64_t c = p.candidate_offsets[q]; c < p.candidate_offsets[q + 1];
         ++c) {
      const SegmentView& v = p.segments[p.candidates[c].segment].host;
      const int64_t idx = v.base_index + p.candidates[c].doc;
      lo = std::min(lo, idx);
      hi = std::max(hi, idx);
    }
    if (lo <= hi && hi - lo >= int64_t{0xffffffff}) {
      return absl::InvalidArgumentError(
          absl::StrCat("GpuBackend::Search: the candidates of query ", q,
                       " span internal indexes ", lo, "..", hi,
                       "; one query's candidates must lie within 2^32 - 1"));
    }
    plan->query_base[q] = lo <= hi ? lo : 0;
  }
  return absl::OkStatus();
}

// PLAID at d = 128 with one query tile per block: the int8 MMA
// (TmaPlaidUsesMma), when its query-centroid table fits the worker's (its
// size is per tile and centroid) and the staged rows fit the query buffer:
// the int8 codes as for int8_mma, then the rows in float16, row-major, for
// the table.
PlaidMmaPlan PlanPlaidMma(const SearchParams& p, const SearchPlan& plan,
                          const PlanConfig& config) {
  PlaidMmaPlan mma;
  const int nbits = PlaidNbits(plan.dtype);
  if (!plan.plaid || !plan.tma.on || config.plaid_table_bytes <= 0 ||
      !TmaPlaidUsesMma(plan.dim, nbits, plan.tma.warpgroups)) {
    return mma;
  }
  const TmaPlan& tma = plan.tma;
  const int64_t centroids = p.segments[0].resident.plaid.num_centroids;
  const bool units =
      !plan.gather && config.plaid_warp_scan && (nbits == 2 || nbits == 4);
  const int64_t qc_bytes = PlaidQcTableBytes(tma.tiles, centroids);
  const int64_t table =
      qc_bytes + (units ? PlaidUnitsTableBytes(tma.tiles, centroids) : 0);
  const int64_t codes = tma.tiles * TmaTileBytes(1, tma.dpad) / 2;
  const int64_t staged = codes + tma.tiles * tma.tile_rows * plan.dim * 2;
  if (table > config.plaid_table_bytes ||
      staged > config.max_query_elements * 2) {
    return mma;
  }
  mma.on = true;
  mma.units = units;
  mma.units_offset = qc_bytes;
  if (units && PlaidUnitsInt16(nbits)) {
    mma.units_max_offset = qc_bytes + tma.tiles * centroids * 128;
  }
  mma.rows_offset = codes;
  mma.staged_bytes = staged;
  mma.step = PlaidMmaLevels(p.segments[0].host.plaid.bucket_weights, nbits,
                            mma.levels, &mma.offset);
  return mma;
}

// Records per gather unit: the TMA kernel spreads a small rerank over
// every block slot of the device (one wave), a large one in units of up to
// 64 records; the mma.sync kernel takes one record per warp.
int64_t RecordsPerUnit(const SearchPlan& plan, const PlanConfig& config) {
  if (!plan.tma.on) return kGatherRecordsPerTile;
  const int64_t slots =
      int64_t{config.sm_count} *
      TmaBlocksPerSm(plan.tma.warpgroups, plan.int8_mma ? plan.dim : 0);
  int64_t per_unit =
      std::clamp<int64_t>((plan.total_candidates + slots - 1) / slots, 1, 64);
  const int64_t cap_tiles = MaxTiles(config.limits) - plan.nq;
  return std::max(per_unit, (plan.total_candidates + cap_tiles - 1) /
                                std::max<int64_t>(cap_tiles, 1));
}

// Quantises query row `src` [dim] like an int8 corpus's rows into `codes`
// and returns the multiplier of its row maxima: its scale, or 1 for a zero
// row (its codes are zeros: any multiplier gives 0). With `as_float`, the
// codes are also written there as fp32 values, for staging as float16.
float QuantizeQueryRow(const float* src, int32_t dim, int8_t* codes,
                       float* as_float) {
  const float scale = QuantizeInt8Row(src, dim, codes);
  if (as_float != nullptr) std::copy(codes, codes + dim, as_float);
  return scale > 0.f ? scale : 1.f;
}

// Stages the query rows in the TMA kernel's swizzled tiles (as the corpus
// dtype, or as int8 codes with a scale per row), with each query's first
// block and tile.
void StageTmaQueries(const SearchParams& p, const SearchPlan& plan, char* in) {
  const InputLayout& cap = plan.layout;
  const TmaPlan& tma = plan.tma;
  const int32_t dim = plan.dim;
  std::memset(in + cap.query, 0, plan.query_bytes);
  std::vector<uint16_t> row_buf(dim);
  std::vector<float> code_row(plan.q_scaled ? dim : 0);
  std::vector<int8_t> codes(plan.q_scaled ? dim : 0);
  float* q_scales = reinterpret_cast<float*>(in + cap.q_scales);
  // Padding rows hold zeros; a multiplier of 1 keeps an empty document's
  // -inf maxima from turning into NaN there.
  std::fill(q_scales, q_scales + plan.q_scale_rows, 1.f);
  int32_t* blocks = reinterpret_cast<int32_t*>(in + cap.query_blocks);
  int32_t* qtiles = reinterpret_cast<int32_t*>(in + cap.query_tiles);
  uint8_t* tiles = reinterpret_cast<uint8_t*>(in + cap.query);
  for (int32_t q = 0; q <= plan.nq; ++q) {
    blocks[q] = static_cast<int32_t>(tma.place[q] / 16);
    qtiles[q] = static_cast<int32_t>(tma.place[q] / tma.tile_rows);
    if (q == plan.nq) break;
    for (int64_t i = 0; i < p.query_offsets[q + 1] - p.query_offsets[q]; ++i) {
      const float* src = p.query_tokens + (p.query_offsets[q] + i) * dim;
      const int64_t row = tma.place[q] + i;
      if (plan.q_scaled) {
        // The int8 MMA reads the codes themselves; the float16 MMA their
        // values.
        const bool codes_only = plan.int8_mma || plan.plaid_mma.on;
        q_scales[row] = QuantizeQueryRow(
            src, dim, codes.data(), codes_only ? nullptr : code_row.data());
        if (plan.plaid_mma.on) {
          // The row's factor, and its float16 values for the table.
          q_scales[row] *= plan.plaid_mma.step;
          ConvertFromFloat(src, dim, DType::kFloat16,
                           reinterpret_cast<uint16_t*>(
                               in + cap.query + plan.plaid_mma.rows_offset) +
                               row * dim);
        }
        if (codes_only) {
          StageTmaQueryRow(reinterpret_cast<const uint16_t*>(codes.data()),
                           dim / 2, tma.dpad / 2, row, tma.tile_rows, tiles);
          continue;
        }
        src = code_row.data();
      }
      ConvertFromFloat(src, dim, plan.query_dtype, row_buf.data());
      StageTmaQueryRow(row_buf.data(), dim, tma.dpad, row, tma.tile_rows,
                       tiles);
    }
  }
}

// The per-slot pointers of the TMA path (a segment's scales and codes; a
// stream buffer's slot has none, int8 and PLAID segments are never
// streamed), and its tensor map slots zeroed.
void StageTmaSlots(const SearchParams& p, const SearchPlan& plan, char* in) {
  const InputLayout& cap = plan.layout;
  for (int64_t s = 0; s < plan.map_slots; ++s) {
    const bool buffer = s >= plan.nseg;
    std::memset(
        reinterpret_cast<TensorMapBytes*>(in + cap.maps) + kTmaMapsPerSlot * s,
        0, kTmaMapsPerSlot * sizeof(TensorMapBytes));
    reinterpret_cast<const float**>(in + cap.slot_scales)[s] =
        buffer ? nullptr : p.segments[s].resident.scales;
    reinterpret_cast<const int32_t**>(in + cap.slot_codes)[s] =
        buffer ? nullptr : p.segments[s].resident.codes;
  }
}

// Row-major query rows padded to dpad with zeros, and each row's query,
// for the mma.sync kernels: in the query dtype, or (int8 with quantised
// queries) as float16 holding each row's int8 codes, with its scale.
void StageRowMajorQueries(const SearchParams& p, const SearchPlan& plan,
                          char* in) {
  const InputLayout& cap = plan.layout;
  const int32_t dim = plan.dim, dpad = plan.dpad;
  uint16_t* qdst = reinterpret_cast<uint16_t*>(in + cap.query);
  float* q_scales = reinterpret_cast<float*>(in + cap.q_scales);
  std::vector<int8_t> codes(plan.q_scaled ? dim : 0);
  std::vector<float> code_row(plan.q_scaled ? dim : 0);
  for (int64_t row = 0; row < plan.rows; ++row) {
    const float* src = p.query_tokens + row * dim;
    if (plan.q_scaled) {
      q_scales[row] = QuantizeQueryRow(src, dim, codes.data(), code_row.data());
      src = code_row.data();
    }
    ConvertFromFloat(src, dim, plan.query_dtype, qdst + row * dpad);
    std::memset(qdst + row * dpad + dim, 0, (dpad - dim) * 2);
  }
  int32_t* row_query = reinterpret_cast<int32_t*>(in + cap.row_query);
  for (int32_t q = 0; q < plan.nq; ++q) {
    for (int64_t row = p.query_offsets[q]; row < p.query_offsets[q + 1];
         ++row) {
      row_query[row] = q;
    }
  }
}

// The gather records of the live candidates, each query's contiguous, and
// the work units over them; host-placed candidates are listed in
// out->streamed_recs, then split into rounds, and their records pointed
// into the stream buffers.
absl::Status StageRecords(const SearchParams& p, const SearchPlan& plan,
                          char* in,
                          const char* const stream_buffers[kStreamBuffers],
                          StagedInputs* out) {
  const InputLayout& cap = plan.layout;
  const bool tma = plan.tma.on;
  std::vector<StreamedRecord>& streamed_recs = out->streamed_recs;
  int64_t* rec_offsets = reinterpret_cast<int64_t*>(in + cap.rec_offsets);
  GatherRecord* recs = reinterpret_cast<GatherRecord*>(in + cap.records);
  TmaRecord* tma_recs = reinterpret_cast<TmaRecord*>(in + cap.records);
  GatherTile* tiles = reinterpret_cast<GatherTile*>(in + cap.tiles);
  int64_t num_records = 0, num_tiles = 0;
  rec_offsets[0] = 0;
  size_t next_streamed = 0;  // streamed_recs entry of the next unit record
  for (int32_t q = 0; q < plan.nq; ++q) {
    const int64_t first = num_records;
    for (int64_t c = p.candidate_offsets[q]; c < p.candidate_offsets[q + 1];
         ++c) {
      const SegmentRef& seg = p.segments[p.candidates[c].segment];
      const int64_t doc = p.candidates[c].doc;
      if (IsTombstoned(seg.host.tombstones, doc)) continue;
      const int64_t t0 = seg.host.cu_seqlens[doc];
      const int32_t len =
          static_cast<int32_t>(seg.host.cu_seqlens[doc + 1] - t0);
      const uint32_t position =
          static_cast<uint32_t>(seg.host.base_index + doc - plan.query_base[q]);
      if (seg.streamed) {
        // Placed in a stream buffer once the rounds are known.
        const int64_t row =
            streamed_recs.empty()
                ? 0
                : streamed_recs.back().row + streamed_recs.back().len;
        streamed_recs.push_back({num_records,
                                 static_cast<const char*>(seg.resident.tokens) +
                                     t0 * plan.row_bytes,
                                 len, row});
      }
      if (tma) {
        TmaRecord& rec = tma_recs[num_records++];
        rec.row = static_cast<int32_t>(t0);
        rec.len = len;
        rec.slot = static_cast<int32_t>(p.candidates[c].segment);
        rec.position = position;
      } else {
        GatherRecord& rec = recs[num_records++];
        rec.tokens =
            static_cast<const char*>(seg.resident.tokens) +
            t0 * plan.dim * static_cast<int64_t>(DTypeSize(plan.dtype));
        rec.len = len;
        rec.position = position;
        rec.scales =
            seg.resident.scales != nullptr ? seg.resident.scales + t0 : nullptr;
      }
    }
    rec_offsets[q + 1] = num_records;
    out->max_row = std::max(out->max_row, num_records - first);
    // Units of up to per_unit records; with host-placed candidates also of
    // at most one stream buffer of their rows (a longer record goes alone,
    // and PlanStreamedRounds refuses it).
    for (int64_t b = first; b < num_records;) {
      int64_t e = b, unit_rows = 0;
      while (e < num_records && e - b < plan.per_unit) {
        const bool on_host = next_streamed < streamed_recs.size() &&
                             streamed_recs[next_streamed].record == e;
        const int64_t len = on_host ? streamed_recs[next_streamed].len : 0;
        if (e > b && unit_rows + len > plan.stream_rows && on_host) break;
        unit_rows += len;
        next_streamed += on_host ? 1 : 0;
        ++e;
      }
      GatherTile& t = tiles[num_tiles++];
      t.query = q;
      t.rec_begin = b;
      t.rec_end = e;
      b = e;
    }
  }
  out->num_records = num_records;
  out->num_units = num_tiles;
  if (streamed_recs.empty()) return absl::OkStatus();
  // Rounds of about 16 MiB: the first copy starts early, and packing the
  // next round overlaps it.
  const int64_t target_rows = std::min(
      plan.stream_rows, std::max<int64_t>(1, (16 << 20) / plan.row_bytes));
  MAXSIMD_RETURN_IF_ERROR(PlanStreamedRounds(tiles, num_tiles, plan.stream_rows,
                                             target_rows, streamed_recs,
                                             &out->rounds));
  for (size_t r = 0; r < out->rounds.size(); ++r) {
    const int b = static_cast<int>(r % kStreamBuffers);
    const StreamRound& round = out->rounds[r];
    for (size_t k = round.rec_begin; k < round.rec_end; ++k) {
      const StreamedRecord& sr = streamed_recs[k];
      const int64_t row = sr.row - round.row_begin;
      if (tma) {
        tma_recs[sr.record].row = static_cast<int32_t>(row);
        tma_recs[sr.record].slot = static_cast<int32_t>(plan.nseg + b);
      } else {
        recs[sr.record].tokens = stream_buffers[b] + row * plan.row_bytes;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

InputLayout InputLayout::Make(int64_t query_bytes, int64_t rows, int32_t nq,
                              int64_t slots, int64_t q_scale_rows,
                              int64_t records, int64_t tiles,
                              int64_t record_bytes) {
  InputLayout l;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = AlignUp(at + bytes);
    return here;
  };
  l.query = take(query_bytes);
  l.row_query = take(rows * sizeof(int32_t));
  l.query_offsets = take((nq + 1) * sizeof(int64_t));
  l.top_k = take(nq * sizeof(int32_t));
  l.query_blocks = take((nq + 1) * sizeof(int32_t));
  l.query_tiles = take((nq + 1) * sizeof(int32_t));
  l.maps = take(slots * kTmaMapsPerSlot * sizeof(TensorMapBytes));
  l.slot_scales = take(slots * sizeof(const float*));
  l.slot_codes = take(slots * sizeof(const int32_t*));
  l.q_scales = take(q_scale_rows * sizeof(float));
  l.rec_offsets = take((nq + 1) * sizeof(int64_t));
  l.records = take(records * record_bytes);
  l.tiles = take(tiles * sizeof(GatherTile));
  l.end = at;
  return l;
}

InputLayout InputLayout::Capacity(const BackendLimits& limits,
                                  int64_t max_query_elements) {
  return Make(
      max_query_elements * 2, limits.max_batch_query_tokens,
      limits.max_batch_queries, kMaxTmaSegments + kStreamBuffers,
      // TMA rows: at least 64 elements each; mma.sync rows: one
      // per query token.
      std::max<int64_t>(max_query_elements / 64, limits.max_batch_query_tokens),
      limits.max_batch_candidates, MaxTiles(limits));
}

int64_t MaxTiles(const BackendLimits& limits) {
  return limits.max_batch_candidates / kGatherRecordsPerTile +
         limits.max_batch_queries;
}

TmaPlan PlanTma(const SearchParams& p, bool gather, const PlanConfig& config) {
  TmaPlan plan;
  if (!config.use_tma || !TmaSupportsDim(p.dim) ||
      static_cast<int64_t>(p.segments.size()) > kMaxTmaSegments) {
    return plan;
  }
  // The compressed layouts at the widths the TMA kernel decodes whole (the
  // mma.sync kernels take int8 at the others).
  const DType dtype = p.segments[0].resident.dtype;
  if ((dtype == DType::kInt8 && !TmaSupportsInt8Dim(p.dim)) ||
      (PlaidNbits(dtype) > 0 &&
       !TmaSupportsPlaidDim(p.dim, PlaidNbits(dtype)))) {
    return plan;
  }
  for (const SegmentRef& seg : p.segments) {
    if (!seg.streamed && seg.resident.num_tokens >= (int64_t{1} << 31)) {
      return plan;
    }
  }
  const int32_t nq = p.num_queries;
  auto rows_of = [&p](int32_t q) {
    return p.query_offsets[q + 1] - p.query_offsets[q];
  };
  // A scan packs the queries at 16-row boundaries (a warp's 16 rows are one
  // query's); a gather starts each query on a tile, since a block scores one
  // query's candidates against that query's tiles only.
  int64_t widest = 0, packed = 0;
  for (int32_t q = 0; q < nq; ++q) {
    const int64_t r16 = (rows_of(q) + 15) / 16 * 16;
    widest = std::max(widest, r16);
    packed += r16;
  }
  plan.warpgroups = (gather ? widest : packed) <= 32 ? 1 : 2;
  plan.tile_rows = TmaTileRows(plan.warpgroups);
  plan.dpad = TmaPaddedDim(p.dim);
  const int64_t align = gather ? plan.tile_rows : 16;
  plan.place.assign(nq + 1, 0);
  for (int32_t q = 0; q < nq; ++q) {
    plan.place[q + 1] =
        plan.place[q] + (rows_of(q) + align - 1) / align * align;
  }
  plan.tiles = (plan.place[nq] + plan.tile_rows - 1) / plan.tile_rows;
  const int64_t bytes = plan.tiles * TmaTileBytes(plan.warpgroups, plan.dpad);
  plan.on = bytes <= config.max_query_elements * 2;
  return plan;
}

absl::Status PlanStreamedRounds(const GatherTile* units, int64_t num_units,
                                int64_t buffer_rows, int64_t target_rows,
                                const std::vector<StreamedRecord>& recs,
                                std::vector<StreamRound>* rounds) {
  StreamRound cur;
  size_t k = 0;
  for (int64_t u = 0; u < num_units; ++u) {
    size_t end = k;
    int64_t rows = 0;
    while (end < recs.size() && recs[end].record < units[u].rec_end) {
      rows += recs[end++].len;
    }
    if (rows > buffer_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GpuBackend::Search: one work unit's host-placed candidates hold ",
          rows, " token rows, a stream buffer ", buffer_rows,
          " (stream_buffer_bytes / (2 x dim))"));
    }
    if (cur.rows > 0 && cur.rows + rows > target_rows) {
      cur.unit_end = u;
      cur.rec_end = k;
      rounds->push_back(cur);
      cur = StreamRound();
      cur.unit_begin = u;
      cur.rec_begin = k;
      cur.row_begin = recs[k].row;
    }
    cur.rows += rows;
    k = end;
  }
  cur.unit_end = num_units;
  cur.rec_end = k;
  rounds->push_back(cur);
  return absl::OkStatus();
}

absl::StatusOr<SearchPlan> PlanSearch(const SearchParams& p,
                                      const PlanConfig& config) {
  SearchPlan plan;
  plan.dtype = p.segments[0].resident.dtype;
  plan.nq = p.num_queries;
  plan.dim = p.dim;
  plan.dpad = PaddedDim(p.dim);
  plan.rows = p.query_offsets[plan.nq];
  plan.gather = p.candidate_offsets != nullptr;
  plan.nseg = static_cast<int64_t>(p.segments.size());
  plan.any_streamed =
      std::any_of(p.segments.begin(), p.segments.end(),
                  [](const SegmentRef& ref) { return ref.streamed; });
  plan.row_bytes = int64_t{p.dim} * 2;
  plan.stream_rows =
      plan.any_streamed ? config.stream_buffer_bytes / plan.row_bytes : 0;
  for (int32_t q = 0; q < plan.nq; ++q) {
    plan.kmax = std::max(plan.kmax, p.top_k[q]);
    plan.empty_query |= p.query_offsets[q + 1] == p.query_offsets[q];
  }
  if (plan.gather) {
    MAXSIMD_RETURN_IF_ERROR(PlanQueryBases(p, &plan));
  } else {
    plan.query_base.assign(plan.nq, 0);
  }
  plan.tma = PlanTma(p, plan.gather, config);
  plan.int8 = plan.dtype == DType::kInt8;
  plan.plaid = PlaidNbits(plan.dtype) > 0;
  if (plan.plaid && !plan.tma.on) {
    return absl::UnimplementedError(absl::StrCat(
        "GpuBackend::Search: a ", LayoutOfDType(plan.dtype),
        " batch needs the TMA kernel, which this batch exceeds (at most ",
        kMaxTmaSegments, " segments, 2^31 tokens per segment, ",
        config.max_query_elements, " staged query elements)"));
  }
  // Int8 off the TMA kernel: the mma.sync kernels widen the codes; they
  // read resident segments only (host placement keeps int8 corpora on the
  // device, index/placement).
  if (plan.int8 && !plan.tma.on && plan.any_streamed) {
    return absl::UnimplementedError(
        "GpuBackend::Search: an int8 batch streamed from host memory needs "
        "the TMA kernel");
  }
  // Int8: queries go to the MMAs as float16, rounded (quantize_queries
  // false) or holding their int8 codes exactly (true), whose row scales the
  // kernel applies. PLAID: queries go as float16, as for float16 corpora.
  plan.query_dtype = plan.int8 || plan.plaid ? DType::kFloat16 : plan.dtype;
  // Int8 with quantised queries at 128 or 256: the int8 MMA, which reads
  // both operands' codes as float16 rows of half the width (maxsim_tma.h).
  plan.int8_mma = plan.int8 && TmaInt8UsesMma(p.dim, p.quantize_queries);
  plan.plaid_mma = PlanPlaidMma(p, plan, config);
  plan.q_scaled = (plan.int8 && p.quantize_queries) || plan.plaid_mma.on;
  plan.q_scale_rows = !plan.q_scaled ? 0
                      : plan.tma.on  ? plan.tma.tiles * plan.tma.tile_rows
                                     : plan.rows;
  plan.total_candidates = plan.gather ? p.candidate_offsets[plan.nq] : 0;
  plan.per_unit = RecordsPerUnit(plan, config);
  plan.query_bytes =
      plan.plaid_mma.on ? plan.plaid_mma.staged_bytes
      : plan.tma.on
          ? plan.tma.tiles * TmaTileBytes(plan.tma.warpgroups, plan.tma.dpad)
          : plan.rows * plan.dpad * 2;
  plan.map_slots = plan.nseg + (plan.any_streamed ? kStreamBuffers : 0);
  // No larger than the capacity layout in every region, and compact, so
  // the one H2D copy moves little beyond the data.
  plan.layout = InputLayout::Make(
      plan.query_bytes, plan.rows, plan.nq, plan.tma.on ? plan.map_slots : 0,
      plan.q_scale_rows, plan.total_candidates,
      plan.gather ? plan.total_candidates / plan.per_unit + plan.nq : 0,
      plan.tma.on ? sizeof(TmaRecord) : sizeof(GatherRecord));
  return plan;
}

absl::StatusOr<StagedInputs> StageRequest(
    const SearchParams& p, const SearchPlan& plan, char* blob,
    const char* const stream_buffers[kStreamBuffers]) {
  StagedInputs out;
  const InputLayout& cap = plan.layout;
  if (plan.tma.on) {
    StageTmaQueries(p, plan, blob);
    StageTmaSlots(p, plan, blob);
  } else {
    StageRowMajorQueries(p, plan, blob);
  }
  std::memcpy(blob + cap.query_offsets, p.query_offsets,
              (plan.nq + 1) * sizeof(int64_t));
  std::memcpy(blob + cap.top_k, p.top_k, plan.nq * sizeof(int32_t));
  // One copy up to the last used byte; the only gaps are alignment and the
  // records of deleted candidates.
  out.used = plan.tma.on || plan.q_scaled
                 ? cap.q_scales + plan.q_scale_rows * sizeof(float)
                 : cap.top_k + plan.nq * sizeof(int32_t);
  if (plan.gather) {
    MAXSIMD_RETURN_IF_ERROR(StageRecords(p, plan, blob, stream_buffers, &out));
    out.used = out.num_units > 0
                   ? cap.tiles + out.num_units * sizeof(GatherTile)
                   : cap.rec_offsets + (plan.nq + 1) * sizeof(int64_t);
  }
  return out;
}

}  // namespace maxsimd
