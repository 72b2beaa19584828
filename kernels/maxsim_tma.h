// Launcher of the Hopper MaxSim kernel (sm_90a): document tokens streamed
// through shared memory by the tensor copy engine (TMA), scored with wgmma
// against tiles of stacked query rows, segmented max per document in the
// epilogue. One kernel serves the scan (a contiguous range of a segment's
// documents per block) and the gather (a list of candidate records per
// block); see detail/maxsim_tma_kernel.cuh for the design.
//
// The host stages the query rows in the kernel's tile layout
// (StageTmaQueryRow), two tensor maps per segment (EncodeTokenMap), and the
// work plan. Widths 64..256 that are multiples of 8 take this path; the
// others take the mma.sync kernels of maxsim_scan.h / maxsim_gather.h.
//
// Internal to kernels/: this header names cudaStream_t.
// Thread-safety: stateless.
#ifndef MAXSIMD_KERNELS_MAXSIM_TMA_H_
#define MAXSIMD_KERNELS_MAXSIM_TMA_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/maxsim_gather.h"
#include "kernels/types.h"

namespace maxsimd {

// An encoded tensor map (CUtensorMap): 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMapBytes {
  uint8_t bytes[128];
};

// Whether the TMA kernel handles this embedding width.
inline bool TmaSupportsDim(int32_t dim) {
  return dim >= 64 && dim <= 256 && dim % 8 == 0;
}
// Int8 corpora (widened to float16 in shared memory, one int8 row per
// copy-engine row): the widths whose rows fill the padded width exactly.
inline bool TmaSupportsInt8Dim(int32_t dim) {
  return dim == 64 || dim == 128 || dim == 256;
}
// Int8 corpora with quantised queries at these widths take the int8 MMA
// (no widening): the rows go through the copy engine as float16 rows of
// dim / 2 elements (EncodeTokenMap(kFloat16, .., dim / 2, ..)), and the
// query codes are staged the same way (StageTmaQueryRow of dim / 2 16-bit
// units, dpad / 2). The launch is told by a non-null q_scales.
inline bool TmaInt8UsesMma(int32_t dim, bool quantized_queries) {
  return quantized_queries && (dim == 128 || dim == 256);
}
// PLAID corpora (decoded to float16 in shared memory): 1, 2 or 4 bits (8
// bits would need more shared memory than the int8 shape leaves, and
// PLAID indexes use 1, 2 or 4), at the widths the kernel is compiled for
// whose packed residual rows (dim * nbits / 8 bytes) are a multiple of 16
// bytes, the copy engine's row granularity.
inline bool TmaSupportsPlaidDim(int32_t dim, int nbits) {
  return (dim == 64 || dim == 128 || dim == 256) &&
         (nbits == 1 || nbits == 2 || nbits == 4) && dim * nbits % 128 == 0;
}
// PLAID corpora at d = 128 scored one query tile per block (tiles of 32
// rows) may take the int8 MMA instead of the float16 decode (PlaidMma in
// detail/maxsim_tma_kernel.cuh): the query rows are staged as int8 codes as
// for TmaInt8UsesMma, and a table of each staged row against each centroid
// (4 bytes per row pair and centroid, per tile) comes first.
inline bool TmaPlaidUsesMma(int32_t dim, int nbits, int32_t warpgroups) {
  return dim == 128 && warpgroups == 1 &&
         (nbits == 1 || nbits == 2 || nbits == 4);
}
// Bytes of the PlaidMma query-centroid table of `tiles` tiles.
inline int64_t PlaidQcTableBytes(int64_t tiles, int64_t num_centroids) {
  return tiles * num_centroids * 64;
}
// Bytes of the same table in units of each row's factor
// (TmaLaunchParams::plaid_units), for PLAID scans (LaunchPlaidScan): each
// tile's table in a region of 128 bytes per centroid, then one float per
// tile (the largest |value| of its int16 form, PlaidUnitsInt16).
inline int64_t PlaidUnitsTableBytes(int64_t tiles, int64_t num_centroids) {
  return tiles * num_centroids * 128 + (tiles * 4 + 15) / 16 * 16;
}
// Whether the scan's table at `nbits` is int16 (a row of 32 values in 64
// bytes, in units of 2^s row factors, s the tile's PlaidUnitsShift) rather
// than int32. At 2 bits the scan waits on the table's loads, and half the
// bytes, loaded two tiles ahead, pay for the widening; at 4 bits it is
// bound by the decode's ALU work and the widening did not pay (NOTES s13).
constexpr bool PlaidUnitsInt16(int nbits) { return nbits == 2; }
// The shift s of a tile's int16 table whose int32 values are at most
// max_abs in magnitude (at most 2^30): the smallest that brings max_abs
// within int16, so that round(x / 2^s) is within 2^(s - 1) of x.
constexpr int PlaidUnitsShift(float max_abs) {
  int s = 0;
  while (s < 15 && max_abs > 32767.f * static_cast<float>(1 << s)) ++s;
  return s;
}

// Elements per staged query row: dim rounded up to 64 (one 128-byte
// swizzle row); the columns past dim are zero, and so are the corpus
// columns past dim (the copy engine fills outside the tensor with zeros).
inline int32_t TmaPaddedDim(int32_t dim) {
  const int32_t p = (dim + 63) / 64 * 64;
  return p == 192 ? 256 : p;
}

// Query rows per tile: 32 with one consumer warpgroup per block (a batch
// of at most 32 rows; two blocks per multiprocessor), 64 with two.
inline int32_t TmaTileRows(int32_t warpgroups) {
  return warpgroups == 1 ? 32 : 64;
}
// Tiles one launch covers (the rows a block keeps running maxima for).
inline int32_t TmaMaxTiles(int32_t warpgroups) {
  return warpgroups == 1 ? 1 : 32;
}
// Blocks per multiprocessor: four for the int8 MMA at d = 128 with one
// warpgroup (int8_mma_dim: the launch's dim when TmaInt8UsesMma, else 0).
inline int32_t TmaBlocksPerSm(int32_t warpgroups, int32_t int8_mma_dim = 0) {
  if (warpgroups != 1) return 1;
  return int8_mma_dim == 128 ? 4 : 2;
}
// Bytes of one staged query tile.
inline int64_t TmaTileBytes(int32_t warpgroups, int32_t dpad) {
  return int64_t{TmaTileRows(warpgroups)} * dpad * 2;
}

// Writes query row `row` (dim 16-bit elements, already in the corpus
// dtype) into the staged tiles: tile row / rows, in the 128-byte swizzle
// layout that wgmma reads. The rest of the tile buffer must be zero.
void StageTmaQueryRow(const uint16_t* src, int32_t dim, int32_t dpad,
                      int64_t row, int32_t tile_rows, uint8_t* tiles);

// Each segment has two tensor maps, maps[2 * slot + i]: its tokens in boxes
// of kTmaBoxRows[i] rows (16 rows: record pieces at 16-row granularity; 64
// rows: long runs, four times fewer copies).
inline constexpr int32_t kTmaMapsPerSlot = 2;
inline constexpr int32_t kTmaBoxRows[2] = {16, 64};

// Encodes the tensor map of a segment's tokens ([num_tokens, dim], device
// memory, 16-byte aligned) with boxes of box_rows rows: for float16 and
// bfloat16, boxes of 64 columns in the 128-byte swizzle; for int8 (dim a
// TmaSupportsInt8Dim width) and PLAID (TmaSupportsPlaidDim: tokens holds
// packed residual rows), whole rows, unswizzled. num_tokens == 0 gives a
// map that is never used.
absl::Status EncodeTokenMap(DType dtype, const void* tokens, int64_t num_tokens,
                            int32_t dim, int32_t box_rows, TensorMapBytes* map);

// A gather record of the TMA path: rows [row, row + len) of the segment
// whose tensor maps are maps[kTmaMapsPerSlot * slot ..]. `position` sits
// where GatherRecord has it, so the top-k pass reads either array alike.
struct TmaRecord {
  int32_t row = 0;
  int32_t len = 0;
  int32_t slot = 0;
  uint32_t position = 0;
};
static_assert(sizeof(TmaRecord) == 16, "device layout");
static_assert(offsetof(TmaRecord, position) == offsetof(GatherRecord, position),
              "top-k reads positions of both record kinds");

struct TmaLaunchParams {
  DType dtype = DType::kFloat16;
  int32_t dim = 0;
  int32_t dpad = 0;        // TmaPaddedDim(dim)
  int32_t warpgroups = 1;  // 1 or 2
  // Staged query tiles; this launch covers tiles [tile_begin, tile_begin +
  // num_tiles). A block keeps running maxima for at most
  // TmaMaxTiles(warpgroups) tiles: a scan's num_tiles must not exceed it; a
  // gather block works on its own query's tiles only, so there the limit
  // holds for each query's tiles within the launch.
  const void* q_tiles = nullptr;
  int32_t tile_begin = 0;
  int32_t num_tiles = 0;
  // Row blocks (16 rows) of each query: query q owns blocks
  // [query_blocks[q], query_blocks[q + 1]). Every query starts on a block.
  const int32_t* query_blocks = nullptr;
  const TensorMapBytes* maps = nullptr;  // device, kTmaMapsPerSlot per slot
  // Int8 and PLAID corpora: the scales of the segment of each map slot
  // (device array of device pointers); null otherwise.
  const float* const* scales = nullptr;
  // PLAID corpora: the centroid ids of the segment of each map slot (device
  // array of device pointers; scales as for int8), and the launch's one
  // codec: float16 centroids [num_centroids, dim] and the 1 << nbits bucket
  // weights (fp32), device memory. Null otherwise.
  const int32_t* const* codes = nullptr;
  const uint16_t* centroids_f16 = nullptr;
  const float* bucket_weights = nullptr;
  int64_t num_centroids = 0;
  // PlaidMma (TmaPlaidUsesMma; LaunchMaxSimTma takes that kernel when
  // plaid_qc is set): the table of every staged query row against every
  // centroid, [tiles][num_centroids][16] float16 pairs, pair 8w + g holding
  // tile rows 16w + g and 16w + g + 8 (LaunchPlaidQueryCentroids), and the
  // int8 level of each bucket (PlaidMmaLevels: at 4 bits all in [0, 127],
  // their offset times each row's sum in the table); q_scales then holds
  // each row's factor, its int8 scale times the levels' step.
  const uint32_t* plaid_qc = nullptr;
  int8_t plaid_levels[16] = {};
  // PlaidMma scans at 2 and 4 bits (PlaidScanApplies), which take
  // LaunchPlaidScan: the table above in units of each row's factor,
  // [tiles][num_centroids][32] int32 or, where PlaidUnitsInt16, int16 in
  // the first half of each tile's region (LaunchPlaidQueryCentroids'
  // `units`) with the tiles' largest |values| in plaid_units_max, and the
  // packed residual rows of map slot map_slot, device memory.
  const int32_t* plaid_units = nullptr;
  const float* plaid_units_max = nullptr;
  const void* plaid_rows = nullptr;
  // Int8 corpora with quantised queries: the scale of every staged query
  // row (padding rows 1); null otherwise. A row's maxima are multiplied by
  // it before the sum over the query's rows.
  const float* q_scales = nullptr;
  // Scan (records == nullptr): documents [doc_begin, doc_begin + num_docs)
  // of the segment of map slot map_slot, docs_per_unit per block, scored
  // against queries [q_begin, q_end) (those with rows in the tiles).
  int32_t map_slot = 0;
  int32_t scan_box_rows = 64;  // a kTmaBoxRows value
  const int64_t* cu_seqlens = nullptr;
  // The segment row that row 0 of the map slot holds: document rows are
  // copied from map row cu_seqlens[doc] - row_base (non-zero for a chunk of
  // a host segment streamed into a buffer).
  int64_t row_base = 0;
  const uint32_t* tombstones = nullptr;
  int64_t doc_begin = 0;
  int64_t num_docs = 0;
  int64_t docs_per_unit = 1;
  int32_t q_begin = 0;
  int32_t q_end = 0;
  // Gather: block u scores records [units[u].rec_begin, rec_end) of query
  // units[u].query, whose tiles are [query_tiles[q], query_tiles[q + 1]).
  const TmaRecord* records = nullptr;
  const GatherTile* units = nullptr;
  int64_t num_units = 0;
  const int32_t* query_tiles = nullptr;
  // Output: scores[q * score_stride + j] for scan document j (relative to
  // doc_begin), scores[r] for gather record r (score_stride 0). The launch
  // holding a query's first row block writes, later launches add. Deleted
  // documents are not written.
  float* scores = nullptr;
  int64_t score_stride = 0;
};

absl::Status LaunchMaxSimTma(const TmaLaunchParams& params,
                             cudaStream_t stream);

// Whether a launch is a PlaidMma scan that the warp kernel of
// plaid_scan.cu takes (LaunchMaxSimTma dispatches it there): d = 128, 2 or
// 4 bits, one tile, with the unit table, the slot's rows and the row
// factors.
inline bool PlaidScanApplies(const TmaLaunchParams& p) {
  const int nbits = PlaidNbits(p.dtype);
  return p.records == nullptr && (nbits == 2 || nbits == 4) && p.dim == 128 &&
         p.warpgroups == 1 && p.num_tiles == 1 && p.plaid_units != nullptr &&
         (!PlaidUnitsInt16(nbits) || p.plaid_units_max != nullptr) &&
         p.plaid_rows != nullptr && p.codes != nullptr && p.scales != nullptr &&
         p.q_scales != nullptr;
}

// The PLAID scan of plaid_scan.cu: REQUIRES PlaidScanApplies(params) (else
// INVALID_ARGUMENT). Scores as LaunchMaxSimTma does.
absl::Status LaunchPlaidScan(const TmaLaunchParams& params,
                             cudaStream_t stream);

// The PlaidMma query-centroid table (TmaLaunchParams::plaid_qc): for tile
// t, centroid k and row pair 8w + g, the float16 pair (row 16w + g, row
// 16w + g + 8) of q_row . centroids[k] + offset * (the sum of q_row),
// summed in fp32 (the row's sum in order, then added by one fma) and
// rounded once. offset: the levels' (PlaidMmaLevels), 0 below 4 bits.
// rows: float16 query rows [tiles * 32, dim], row-major, device memory;
// centroids: [num_centroids, dim] fp32, device memory; table:
// PlaidQcTableBytes(tiles, num_centroids) bytes. When `units` is not
// null, it gets the same table in units of each row's factor
// (PlaidUnitsTableBytes): for tile t, centroid k and row r, the value
// x = round(float16 dot / factor), the factor q_factors[32 t + r] (0 where
// the factor is not positive), clamped to +-2^30. Where units_int16 is
// false, the int32 at [t][k][r] (int32 elements); where it is true, the
// int16 round(x / 2^s), s = PlaidUnitsShift(units_max[t]) with units_max[t]
// the tile's largest |x| (written here), at int16 element
// 64 t num_centroids + 32 k + 8 (r % 8 / 2) + 2 (r / 8) + r % 2 (a lane's
// eight columns of the mma.sync accumulator together), in two passes.
// REQUIRES: dim a multiple of 4, at most 256.
absl::Status LaunchPlaidQueryCentroids(
    const uint16_t* rows, int64_t tiles, int32_t dim, const float* centroids,
    int64_t num_centroids, float offset, uint32_t* table, cudaStream_t stream,
    const float* q_factors = nullptr, int32_t* units = nullptr,
    bool units_int16 = false, float* units_max = nullptr);

// Whether the code the driver loaded for the current device holds the TMA
// kernels' bodies (sm_90a machine code, or compute_90a PTX), so that they
// run there. False on a GPU other than Hopper, and on Hopper when the build
// carries no sm_90a code: a build for compute_80 PTX alone, which the
// driver compiles at load, has only the trap that stands in for them
// (detail/tma.cuh, MAXSIMD_TMA_DEVICE_CODE). Launches one one-thread kernel
// on `stream` and waits for it.
absl::StatusOr<bool> TmaKernelsLoaded(cudaStream_t stream);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_MAXSIM_TMA_H_
