// PLAID candidate generation's centroid product on the GPU: the fp32 dot
// products of query tokens with every centroid of a codec (Q C^T, step 1
// of index/plaid_search.h). The GPU backend reaches it through
// Backend::ScoreCentroids, in chunks that fit its worker's scratch.
//
// Exactness: every cell is the host's (PlaidCentroidScores, index/
// plaid_search.cc, compiled without fused multiply-adds), bit for bit. The
// host keeps 16 partial sums, lane l over dimensions j = l (mod 16) of the
// first dim - dim % 16 in ascending order, sums the lanes in order 0..15,
// then adds the remaining dimensions in order, each accumulator starting
// at +0. The kernel walks the dimensions in that order too: position p of
// its walk is lane p / G, element p % G (G = dim / 16), that is dimension
// (p % G) * 16 + p / G, then the tail. Two registers per cell suffice: the
// running lane and the running dot product, into which a lane is added
// when it completes. Every product and sum is rounded on its own
// (__fmul_rn / __fadd_rn, which nvcc never fuses), without flushing
// subnormals, so NaN, infinity and signed zeros come out as on the host.
//
// Tiling: a block of 256 threads owns 128 tokens x 128 centroids and walks
// the dimension positions 16 at a time (cp.async into double-buffered
// shared memory, transposed to [position][row]; the copy of step s + 1
// overlaps the arithmetic of step s). Each thread holds an 8 x 8 block of
// cells. The permuted walk reads each row's dimensions 16 apart, so a
// copy touches more sectors than a contiguous one; the rows of a tile are
// revisited from L1 by the steps that follow. The product is a small part
// of a candidate generation (the copy of the scores back to the host
// takes longer), so the kernel stays simple rather than tensor-core fast.
//
// Internal to kernels/: this header names cudaStream_t.
// Thread-safety: stateless; concurrent launches on different streams are
// fine.
#ifndef MAXSIMD_KERNELS_PLAID_CENTROIDS_H_
#define MAXSIMD_KERNELS_PLAID_CENTROIDS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace maxsimd {

// One product. All pointers are device memory.
struct CentroidScoresParams {
  const float* tokens = nullptr;  // [num_tokens, dim], row-major
  int64_t num_tokens = 0;
  const float* centroids = nullptr;  // [num_centroids, dim], row-major
  int64_t num_centroids = 0;
  int32_t dim = 0;
  // [num_tokens, ld_scores], row-major: columns [0, num_centroids) of each
  // row are written, the others untouched.
  float* scores = nullptr;
  int64_t ld_scores = 0;
};

// Most tokens one launch takes (the grid's y extent times the tile).
inline constexpr int64_t kMaxCentroidScoreTokens = int64_t{65535} * 128;

// Enqueues the product on `stream`. INTERNAL for shapes the caller should
// have refused (no tokens or centroids, dim < 1, more than
// kMaxCentroidScoreTokens tokens, ld_scores < num_centroids, null
// pointers); launch errors as CUDA statuses.
absl::Status LaunchCentroidScores(const CentroidScoresParams& params,
                                  cudaStream_t stream);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_PLAID_CENTROIDS_H_
