// Host planning of one GPU search: which kernel family and shape score it,
// where each input goes in the staging blob, the gather records and work
// units of a rerank, the rounds of its host-placed candidates, and the
// staged query rows. Everything a search decides before it touches the
// device, so that CPU tests reach it (tests/kernels/search_plan_test.cc).
//
//   PlanSearch()    SearchParams + PlanConfig -> SearchPlan (no writes)
//   StageRequest()  SearchPlan -> the staging blob (queries, records,
//                   units, per-slot pointers) + the streamed rounds
//
// The pipelines (scan_pipeline.cu, gather_pipeline.cu) then encode the
// tensor maps into the blob, copy it to the device in one H2D copy and
// launch. This header carries no CUDA types.
//
// Thread-safety: stateless functions.
#ifndef MAXSIMD_KERNELS_GPU_SEARCH_PLAN_H_
#define MAXSIMD_KERNELS_GPU_SEARCH_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/launch_shapes.h"
#include "kernels/types.h"

namespace maxsimd {

// Segments one search may touch on the TMA path (a tensor map each).
inline constexpr int64_t kMaxTmaSegments = 1024;
// Buffers per worker for streaming host-placed tokens (double buffering).
inline constexpr int kStreamBuffers = 2;

// The facts about the device and the worker that a plan depends on.
struct PlanConfig {
  BackendLimits limits;
  int32_t sm_count = 1;
  bool use_tma = false;  // the TMA kernels are loaded and enabled
  int64_t max_query_elements = 0;
  // Bytes of the worker's PlaidMma table (0: none, the float16 decode).
  int64_t plaid_table_bytes = 0;
  bool plaid_warp_scan = false;
  int64_t stream_buffer_bytes = 0;
};

// Offsets of one request's inputs inside the staging blob; the pinned and
// device blobs share the layout, so one H2D copy moves them all.
struct InputLayout {
  size_t query = 0, row_query = 0, query_offsets = 0, top_k = 0;
  size_t query_blocks = 0, query_tiles = 0, maps = 0, slot_scales = 0;
  size_t slot_codes = 0;
  size_t q_scales = 0;
  size_t rec_offsets = 0, records = 0, tiles = 0, end = 0;

  // record_bytes: a gather record's, sizeof(TmaRecord) on the TMA path,
  // sizeof(GatherRecord) on the mma.sync path and in the capacity layout.
  static InputLayout Make(int64_t query_bytes, int64_t rows, int32_t nq,
                          int64_t slots, int64_t q_scale_rows, int64_t records,
                          int64_t tiles,
                          int64_t record_bytes = sizeof(GatherRecord));
  // The capacity layout a worker's blobs are sized for.
  static InputLayout Capacity(const BackendLimits& limits,
                              int64_t max_query_elements);
};

// Work units a worker's blob holds: one per kGatherRecordsPerTile records,
// plus one partial unit per query.
int64_t MaxTiles(const BackendLimits& limits);

// The TMA path's plan of one request.
struct TmaPlan {
  bool on = false;
  int32_t warpgroups = 1;
  int32_t tile_rows = 32;
  int32_t dpad = 0;
  std::vector<int64_t> place;  // [nq + 1]: staged row of each query's row 0
  int64_t tiles = 0;           // staged tiles
};

// Decides whether the TMA kernel scores this request, and where each
// query's rows go in its staged tiles.
TmaPlan PlanTma(const SearchParams& p, bool gather, const PlanConfig& config);

// How a PLAID batch runs on the int8 MMA (TmaPlaidUsesMma), if it does.
struct PlaidMmaPlan {
  bool on = false;
  int64_t rows_offset = 0;   // the float16 rows, after the int8 codes
  int64_t staged_bytes = 0;  // both, in the query region
  float step = 1.f;          // PlaidMmaLevels
  float offset = 0.f;
  int8_t levels[16] = {};
  // A scan at 2 or 4 bits on the warp kernel (plaid_warp_scan): the table
  // in row-factor units follows the float16 one, at this offset.
  bool units = false;
  int64_t units_offset = 0;
  // The tiles' largest |value| of an int16 table in row-factor units
  // (PlaidUnitsInt16) follows both tables, at this offset; -1: none.
  int64_t units_max_offset = -1;
};

// A rerank candidate of a host-placed segment: gather record `record`,
// whose `len` rows at `src` (pinned host memory) take rows [row, row + len)
// of the packed order of all such candidates' rows.
struct StreamedRecord {
  int64_t record = 0;
  const char* src = nullptr;
  int64_t len = 0;
  int64_t row = 0;
};

// Work units [unit_begin, unit_end) of a rerank whose host-placed rows,
// streamed_recs [rec_begin, rec_end) = packed rows [row_begin, row_begin +
// rows), fit one stream buffer.
struct StreamRound {
  int64_t unit_begin = 0, unit_end = 0;
  size_t rec_begin = 0, rec_end = 0;
  int64_t row_begin = 0, rows = 0;
};

// Splits the work units (each a contiguous run of records, in record
// order) into rounds of about `target_rows` host-placed rows, never more
// than `buffer_rows` (a unit past the target goes alone).
absl::Status PlanStreamedRounds(const GatherTile* units, int64_t num_units,
                                int64_t buffer_rows, int64_t target_rows,
                                const std::vector<StreamedRecord>& recs,
                                std::vector<StreamRound>* rounds);

// One request's plan. REQUIRES of its SearchParams: validated
// (ValidateSearchParams and the backend's own checks), one dtype.
struct SearchPlan {
  DType dtype = DType::kFloat16;
  int32_t nq = 0;
  int32_t dim = 0;
  int32_t dpad = 0;  // PaddedDim(dim): the mma.sync kernels' staged width
  int64_t rows = 0;  // query rows of the batch
  bool gather = false;
  int64_t nseg = 0;
  // Host-placed segments stream through the worker's buffers, whose
  // tensor maps take the slots after the segments' (nseg + b).
  bool any_streamed = false;
  int64_t row_bytes = 0;    // of a streamed token row (float16/bfloat16)
  int64_t stream_rows = 0;  // token rows a stream buffer holds
  int32_t kmax = 1;
  bool empty_query = false;  // its scores are 0, which no kernel writes
  // Gather: each query's lowest candidate index (positions are relative).
  std::vector<int64_t> query_base;

  TmaPlan tma;
  bool int8 = false;
  bool plaid = false;
  // The dtype the queries are staged in: float16 for int8 and PLAID.
  DType query_dtype = DType::kFloat16;
  // Int8 with quantised queries at 128 or 256: the int8 MMA.
  bool int8_mma = false;
  PlaidMmaPlan plaid_mma;
  // Queries staged as int8 codes with a scale per staged row.
  bool q_scaled = false;
  int64_t q_scale_rows = 0;
  int64_t total_candidates = 0;
  int64_t per_unit = kGatherRecordsPerTile;  // records per gather unit
  int64_t query_bytes = 0;                   // of the query region
  int64_t map_slots = 0;                     // tensor map slots (TMA)
  InputLayout layout;
};

// Plans `p` (REQUIRES: p.num_queries > 0, segments not empty). Errors:
// INVALID_ARGUMENT when one query's candidates span more than 2^32 - 1
// internal indexes; UNIMPLEMENTED for an int8 or PLAID batch the TMA
// kernel cannot take.
absl::StatusOr<SearchPlan> PlanSearch(const SearchParams& p,
                                      const PlanConfig& config);

// What StageRequest wrote besides the blob's fixed regions.
struct StagedInputs {
  size_t used = 0;  // bytes of the blob the H2D copy moves
  int64_t num_records = 0;
  int64_t num_units = 0;
  int64_t max_row = 0;  // a query's most records (the top-k row length)
  std::vector<StreamedRecord> streamed_recs;
  std::vector<StreamRound> rounds;
};

// Writes the request's inputs into `blob` (plan.layout, at least
// plan.layout.end bytes): the query rows (row-major padded to dpad, or in
// the TMA tiles with their scales), offsets and k, the gather records and
// units, the per-slot scale and code pointers, and zeroed tensor map
// slots for the caller to encode. `stream_buffers` are the device
// addresses of the worker's stream buffers, which the records of
// host-placed candidates point into on the mma.sync path. Errors:
// INVALID_ARGUMENT when one work unit's host-placed rows exceed a stream
// buffer.
absl::StatusOr<StagedInputs> StageRequest(
    const SearchParams& p, const SearchPlan& plan, char* blob,
    const char* const stream_buffers[kStreamBuffers]);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_GPU_SEARCH_PLAN_H_
