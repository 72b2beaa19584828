// Launcher of the scan kernel: every live document of one segment chunk
// against every query of a batch, scores into a bounded [queries, chunk]
// block of workspace that the top-k pass (topk.h) consumes.
//
// Internal to kernels/: this header names cudaStream_t, so server/ and
// index/ never include it (they use backend.h / gpu_backend.h).
// Thread-safety: stateless; concurrent launches on different streams are
// fine.
#ifndef MAXSIMD_KERNELS_MAXSIM_SCAN_H_
#define MAXSIMD_KERNELS_MAXSIM_SCAN_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/launch_shapes.h"
#include "kernels/types.h"

namespace maxsimd {

// Embedding widths with a specialised kernel; every other width takes the
// general path (correct for any dim, slower).
inline constexpr int kSpecialisedDims[] = {64, 96, 128, 256};

// Query rows per pass a launch uses (16 * mt). Chosen by the caller from
// the rows it must cover; ChooseRowTiles() picks 8 m-tiles (128 rows) when
// more than 32 rows need scoring and the tile fits shared memory, else 2.
int ChooseRowTiles(int64_t rows, int32_t dpad);

// One scan launch. All pointers are device memory.
struct ScanLaunchParams {
  // The corpus's dtype: float16, bfloat16 or int8 (with `scales`).
  DType dtype = DType::kFloat16;
  int32_t dim = 0;
  int32_t dpad = 0;  // PaddedDim(dim)
  // [rows_total, dpad], zero-padded: of `dtype`, or float16 for int8
  // (rounded, or holding the int8 codes exactly with q_scales).
  const void* query = nullptr;
  // Int8 with quantised queries: each staged row's scale, by which its
  // maxima are multiplied (null: none).
  const float* q_scales = nullptr;
  const int32_t* row_query = nullptr;      // [rows_total]: query of each row
  const int64_t* query_offsets = nullptr;  // [num_queries + 1]
  int64_t rows_total = 0;
  // The segment: tokens [num_tokens, dim], cu_seqlens [num_docs + 1],
  // tombstone bitmap (may be null). Document rows are read at
  // tokens + (cu_seqlens[doc] - row_base) rows: row_base is the segment row
  // that `tokens` starts at (non-zero when a chunk of a host segment was
  // streamed into a buffer that starts with it).
  const void* tokens = nullptr;
  // Int8: the rows' scales, indexed like `tokens` (row_base included).
  const float* scales = nullptr;
  int64_t row_base = 0;
  const int64_t* cu_seqlens = nullptr;
  const uint32_t* tombstones = nullptr;
  // The chunk: documents [doc_begin, doc_begin + num_docs) of the segment.
  int64_t doc_begin = 0;
  int64_t num_docs = 0;
  // Output: scores[q * score_stride + j] = MaxSim(query q, document
  // doc_begin + j), written by the pass holding q's first row and added to
  // by later passes. Entries of deleted documents are left as they were
  // (top-k skips them by the tombstone bitmap), and so are those of empty
  // queries: the caller zeroes the block when the batch has one.
  float* scores = nullptr;
  int64_t score_stride = 0;
  int row_tiles = 2;  // 2 or 8: m-tiles of 16 rows per pass
};

// Enqueues the scan on `stream`. INVALID_ARGUMENT for an unsupported dtype
// or row_tiles; errors of the launch itself come back as CUDA statuses.
absl::Status LaunchMaxSimScan(const ScanLaunchParams& params,
                              cudaStream_t stream);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_MAXSIM_SCAN_H_
