// The launch shapes and device record layouts of the MaxSim kernels, free
// of CUDA types: what host planning (gpu/search_plan.h) needs to lay out a
// request's inputs, so that CPU tests reach it. The launchers
// (maxsim_scan.h, maxsim_gather.h, maxsim_tma.h) include this header.
//
// Thread-safety: stateless.
#ifndef MAXSIMD_KERNELS_LAUNCH_SHAPES_H_
#define MAXSIMD_KERNELS_LAUNCH_SHAPES_H_

#include <cstddef>
#include <cstdint>

namespace maxsimd {

// Elements per staged query row: dim rounded up to a multiple of 32, the
// k-slab of the kernels; the padding columns are zero.
inline int32_t PaddedDim(int32_t dim) { return (dim + 31) / 32 * 32; }

// One (query, candidate) pair of the mma.sync gather. 24 bytes; the layout
// is shared with the device code.
struct GatherRecord {
  const void* tokens = nullptr;   // device address of the document's token 0
  int32_t len = 0;                // its token count
  uint32_t position = 0;          // internal index minus the query's lowest
                                  // candidate index: the tie-break order
  const float* scales = nullptr;  // int8: the scale of its token 0
};
static_assert(sizeof(GatherRecord) == 24, "device layout");

// A block's work: records [rec_begin, rec_end), all of query `query`.
struct GatherTile {
  int32_t query = 0;
  int32_t unused = 0;
  int64_t rec_begin = 0;
  int64_t rec_end = 0;
};
static_assert(sizeof(GatherTile) == 24, "device layout");

// Records per tile: one per warp of a block, so that a small rerank spreads
// over as many multiprocessors as possible.
inline constexpr int kGatherRecordsPerTile = 8;

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
// (TmaPlaidMmaLayout::plaid_units), for PLAID scans (LaunchPlaidScan): each
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

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_LAUNCH_SHAPES_H_
