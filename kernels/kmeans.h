// The assignment step of k-means on the GPU: each of m fp32 tokens goes to
// the centroid of largest dot product, the lowest index on a tie. The
// PLAID codec trainer (index/plaid_train.h) reaches it through
// Backend::AssignNearestCentroids.
//
// Exactness: every dot product is the host trainer's, bit for bit. The host
// (AssignNearestCentroidsOnHost, index/plaid_train.cc, compiled with
// -ffp-contract=off) sums the products in dimension order into an fp32
// accumulator that starts at +0, rounding each product and each sum to
// fp32 separately; the kernel does the same with __fmul_rn / __fadd_rn,
// which nvcc never fuses into an FMA, and without flushing subnormals. The
// tiles only change which thread computes a dot product, never its order
// of operations, so the codes equal the host's for every input, NaN and
// infinity included (a NaN dot product never wins; a token whose products
// are all NaN or -inf goes to centroid 0, as on the host).
//
// Tiling: a block of 256 threads owns 128 tokens and walks its share of
// the centroids in tiles of 128, through the dimension 16 values at a time
// (cp.async into double-buffered shared memory, one barrier per step:
// the copy of step s + 1 overlaps the arithmetic of step s); each thread
// accumulates an 8 x 8 block of dot products in registers, then folds each
// finished tile into a running best per token. The 16 threads that share
// a token merge their bests with warp shuffles at the end. When the tokens
// fill too few blocks to occupy the device, the centroids are split over
// blockIdx.y and a second kernel merges the splits' bests per token. The
// inner step is 4 shared-memory loads for 64 multiplies and 64 adds.
//
// Internal to kernels/: this header names cudaStream_t.
// Thread-safety: stateless; concurrent launches on different streams are
// fine.
#ifndef MAXSIMD_KERNELS_KMEANS_H_
#define MAXSIMD_KERNELS_KMEANS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace maxsimd {

// Centroid indices travel as int32 inside the kernels.
inline constexpr int64_t kMaxAssignCentroids = (int64_t{1} << 31) - 1;

// One assignment. All pointers are device memory.
struct AssignNearestParams {
  const float* tokens = nullptr;  // [num_tokens, dim], row-major
  int64_t num_tokens = 0;
  const float* centroids = nullptr;  // [num_centroids, dim], row-major
  int64_t num_centroids = 0;
  int32_t dim = 0;
  int64_t* codes = nullptr;  // [num_tokens], written
};

// Device workspace LaunchAssignNearest needs for this shape on a device of
// `sm_count` multiprocessors: 0 unless the centroids are split, else 8
// bytes per (split, token).
size_t AssignNearestWorkspaceBytes(int64_t num_tokens, int64_t num_centroids,
                                   int sm_count);

// Enqueues the assignment on `stream`; `workspace` holds at least
// AssignNearestWorkspaceBytes(num_tokens, num_centroids, sm_count) bytes
// (may be null when that is 0). INTERNAL for shapes the caller should have
// refused (no tokens or centroids, dim < 1, more than kMaxAssignCentroids
// centroids, too little workspace); launch errors as CUDA statuses.
absl::Status LaunchAssignNearest(const AssignNearestParams& params,
                                 void* workspace, size_t workspace_bytes,
                                 int sm_count, cudaStream_t stream);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_KMEANS_H_
