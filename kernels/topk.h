// Exact top-k on the GPU, k up to kMaxTopK, in RanksBefore order (score
// descending, ties to the lower internal index, NaN last), deleted documents
// skipped.
//
// Entries travel as 64-bit keys: the score mapped to an order-preserving 32
// bits above, the bitwise NOT of a 32-bit position below (position = the
// document's row in its segment for a scan, internal index minus the query's
// lowest candidate index for a gather). The larger key ranks first, and
// key 0 means "no entry". DecodeTopKKey() turns a key back into a ScoredDoc.
//
// The selection runs in rounds: blocks select the top k of slices of up to
// kTopKSlice entries (radix select over shared memory: the 8-bit digit
// histogram of the remaining candidates, from the top byte down, stopping
// as soon as the boundary digit's bucket is taken whole), writing k keys per
// slice to workspace; rounds repeat until one slice per query remains, and
// a last block per query merges that slice with the previous result and
// sorts it. Workspace is bounded by TopKWorkspaceEntries(), independent of
// corpus size.
//
// Internal to kernels/: this header names cudaStream_t.
// Thread-safety: stateless.
#ifndef MAXSIMD_KERNELS_TOPK_H_
#define MAXSIMD_KERNELS_TOPK_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/types.h"

namespace maxsimd {

// Entries one select block holds in shared memory (plus a prior list of up
// to kMaxTopK). Twice kMaxTopK, so every round at least halves the data.
inline constexpr int64_t kTopKSlice = 2 * kMaxTopK;

// What to select from. Row q of the input (one row per query) is entries
// [row_offsets[q], row_offsets[q + 1]) when row_offsets is set, else
// [q * row_stride, q * row_stride + row_len). Exactly one of `scores` and
// `keys` is set. All pointers are device memory.
struct TopKSource {
  const float* scores = nullptr;        // ranked by score, keyed by position:
  const uint32_t* positions = nullptr;  // positions[i * position_stride], or
  int32_t position_stride = 1;          // position_base + (i - row start)
  uint32_t position_base = 0;
  const uint32_t* tombstones = nullptr;  // bitmap over positions; set = skip
  const uint64_t* keys = nullptr;        // ready-made keys (0 = skip)
  const int64_t* row_offsets = nullptr;
  int64_t row_stride = 0;
  int64_t row_len = 0;
};

// Two ping-pong buffers of `entries` keys each, owned by the caller.
struct TopKWorkspace {
  uint64_t* partial[2] = {nullptr, nullptr};
  int64_t entries = 0;
};

// Keys each workspace buffer needs so that one query's longest row of
// `max_row_len` entries fits (queries are then processed in groups).
int64_t TopKWorkspaceEntries(int64_t max_row_len);

// For each query q of `num_queries`: selects the top top_k[q] (device array)
// entries of source row q, together with out[q * k_stride ..) when
// `merge_with_out` (a previous result; entries past its end are 0), and
// writes them sorted best first to out[q * k_stride ..), padded with 0 to
// k_stride. k_stride >= every top_k[q]. `max_row_len` bounds every row's
// length. Enqueued on `stream`.
absl::Status SelectTopK(const TopKSource& source, int32_t num_queries,
                        int64_t max_row_len, const int32_t* top_k,
                        int32_t k_stride, bool merge_with_out, uint64_t* out,
                        const TopKWorkspace& workspace, cudaStream_t stream);

// The ScoredDoc of a non-zero key: position p becomes index base + p.
ScoredDoc DecodeTopKKey(uint64_t key, int64_t base);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_TOPK_H_
