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
#include "kernels/launch_shapes.h"
#include "kernels/maxsim_gather.h"
#include "kernels/types.h"

namespace maxsimd {

// Encodes the tensor map of a segment's tokens ([num_tokens, dim], device
// memory, 16-byte aligned) with boxes of box_rows rows: for float16 and
// bfloat16, boxes of 64 columns in the 128-byte swizzle; for int8 (dim a
// TmaSupportsInt8Dim width) and PLAID (TmaSupportsPlaidDim: tokens holds
// packed residual rows), whole rows, unswizzled. num_tokens == 0 gives a
// map that is never used.
absl::Status EncodeTokenMap(DType dtype, const void* tokens, int64_t num_tokens,
                            int32_t dim, int32_t box_rows, TensorMapBytes* map);

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
