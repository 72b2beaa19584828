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

// What every TMA launch holds, whatever the layout: the shape, the staged
// query tiles, the tensor maps, the work (a scan or a gather) and the
// output. A launch is this plus its layout's own part (TmaArgs below).
struct TmaLaunch {
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

// The layouts' own parts. Each names what its decode policy
// (detail/tma_decode.cuh) reads; all pointers are device memory, and the
// per-slot arrays are device arrays of device pointers, one entry per map
// slot.

// Float16 and bfloat16 (dtype says which): the rows are the MMA's operands.
struct TmaDenseLayout {};

// Int8 (dtype kInt8): the rows' fp32 scales. With quantised queries,
// q_scales holds the scale of every staged query row (padding rows 1): a
// row's maxima are multiplied by it before the sum over the query's rows;
// at widths TmaInt8UsesMma takes, both operands then go to the int8 MMA.
struct TmaInt8Layout {
  const float* const* scales = nullptr;
  const float* q_scales = nullptr;
};

// PLAID (dtype kPlaid1/2/4) decoded to float16: the rows' scales and
// centroid ids, and the launch's one codec: float16 centroids
// [num_centroids, dim] and the 1 << nbits bucket weights (fp32).
struct TmaPlaidLayout {
  const float* const* scales = nullptr;
  const int32_t* const* codes = nullptr;
  const uint16_t* centroids_f16 = nullptr;
  const float* bucket_weights = nullptr;
  int64_t num_centroids = 0;
};

// PLAID on the int8 MMA (TmaPlaidUsesMma): the rows' scales and centroid
// ids; the table of every staged query row against every centroid,
// [tiles][num_centroids][16] float16 pairs, pair 8w + g holding tile rows
// 16w + g and 16w + g + 8 (LaunchPlaidQueryCentroids), and the int8 level
// of each bucket (PlaidMmaLevels: at 4 bits all in [0, 127], their offset
// times each row's sum in the table); q_scales holds each row's factor,
// its int8 scale times the levels' step.
//
// Scans at 2 and 4 bits may take the warp kernel of plaid_scan.h
// (PlaidScanApplies), which reads: the table above in units of each row's
// factor, [tiles][num_centroids][32] int32 or, where PlaidUnitsInt16,
// int16 in the first half of each tile's region (LaunchPlaidQueryCentroids'
// `units`) with the tiles' largest |values| in plaid_units_max; and the
// packed residual rows of map slot map_slot (null for a streamed slot).
struct TmaPlaidMmaLayout {
  const float* const* scales = nullptr;
  const int32_t* const* codes = nullptr;
  int64_t num_centroids = 0;
  const uint32_t* plaid_qc = nullptr;
  int8_t plaid_levels[16] = {};
  const float* q_scales = nullptr;
  const int32_t* plaid_units = nullptr;
  const float* plaid_units_max = nullptr;
  const void* plaid_rows = nullptr;
};

// One launch: the common fields and a layout's part, read by the kernel as
// one parameter block.
template <typename Layout>
struct TmaArgs : TmaLaunch, Layout {
  TmaArgs() = default;
  explicit TmaArgs(const TmaLaunch& common) : TmaLaunch(common) {}
};
using TmaDenseArgs = TmaArgs<TmaDenseLayout>;
using TmaInt8Args = TmaArgs<TmaInt8Layout>;
using TmaPlaidArgs = TmaArgs<TmaPlaidLayout>;
using TmaPlaidMmaArgs = TmaArgs<TmaPlaidMmaLayout>;

// One launcher per layout: INVALID_ARGUMENT naming the field where a
// required pointer is null or the shape has no kernel.
absl::Status LaunchMaxSimTma(const TmaDenseArgs& args, cudaStream_t stream);
absl::Status LaunchMaxSimTma(const TmaInt8Args& args, cudaStream_t stream);
absl::Status LaunchMaxSimTma(const TmaPlaidArgs& args, cudaStream_t stream);
absl::Status LaunchMaxSimTma(const TmaPlaidMmaArgs& args, cudaStream_t stream);

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
