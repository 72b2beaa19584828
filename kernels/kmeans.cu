// Host side of the GPU k-means assignment: picks the centroid split and
// launches the kernels of detail/kmeans_assign.cuh.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/kmeans_assign.cuh"
#include "kernels/kmeans.h"

namespace maxsimd {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Resident blocks per multiprocessor the kernel is built for
// (__launch_bounds__), times two waves: fewer token blocks than this leave
// multiprocessors idle, so the centroids are split to make up the count.
constexpr int64_t kTargetBlocksPerSm = 4;
// gridDim.y's limit.
constexpr int64_t kMaxSplits = 65535;

struct Split {
  int64_t splits = 1;
  int64_t centroids = 0;  // per split, a multiple of the tile width
};

Split ChooseSplit(int64_t num_tokens, int64_t num_centroids, int sm_count) {
  const int64_t token_blocks =
      CeilDiv(std::max<int64_t>(num_tokens, 1), detail::kAssignTileTokens);
  const int64_t tiles = CeilDiv(std::max<int64_t>(num_centroids, 1),
                                detail::kAssignTileCentroids);
  const int64_t want = kTargetBlocksPerSm * std::max(sm_count, 1);
  int64_t splits = std::clamp<int64_t>(CeilDiv(want, token_blocks), 1,
                                       std::min(tiles, kMaxSplits));
  Split s;
  s.centroids = CeilDiv(tiles, splits) * detail::kAssignTileCentroids;
  s.splits = CeilDiv(std::max<int64_t>(num_centroids, 1), s.centroids);
  return s;
}

}  // namespace

size_t AssignNearestWorkspaceBytes(int64_t num_tokens, int64_t num_centroids,
                                   int sm_count) {
  const Split s = ChooseSplit(num_tokens, num_centroids, sm_count);
  if (s.splits == 1) return 0;
  return static_cast<size_t>(s.splits * num_tokens) *
         (sizeof(float) + sizeof(int32_t));
}

absl::Status LaunchAssignNearest(const AssignNearestParams& p, void* workspace,
                                 size_t workspace_bytes, int sm_count,
                                 cudaStream_t stream) {
  if (p.num_tokens < 1 || p.num_centroids < 1 ||
      p.num_centroids > kMaxAssignCentroids || p.dim < 1 ||
      p.tokens == nullptr || p.centroids == nullptr || p.codes == nullptr) {
    return absl::InternalError(
        absl::StrCat("LaunchAssignNearest: bad shape: ", p.num_tokens,
                     " tokens, ", p.num_centroids, " centroids, dim ", p.dim));
  }
  const Split s = ChooseSplit(p.num_tokens, p.num_centroids, sm_count);
  const size_t need =
      AssignNearestWorkspaceBytes(p.num_tokens, p.num_centroids, sm_count);
  if (workspace_bytes < need || (need > 0 && workspace == nullptr)) {
    return absl::InternalError(
        absl::StrCat("LaunchAssignNearest: workspace of ", workspace_bytes,
                     " bytes, this shape needs ", need));
  }
  detail::AssignArgs a;
  a.tokens = p.tokens;
  a.centroids = p.centroids;
  a.num_tokens = p.num_tokens;
  a.num_centroids = p.num_centroids;
  a.dim = p.dim;
  a.split_centroids = s.centroids;
  a.codes = p.codes;
  if (s.splits > 1) {
    a.split_dot = static_cast<float*>(workspace);
    a.split_index =
        reinterpret_cast<int32_t*>(a.split_dot + s.splits * p.num_tokens);
  }
  const int64_t token_blocks = CeilDiv(p.num_tokens, detail::kAssignTileTokens);
  if (token_blocks > int64_t{0x7fffffff}) {
    return absl::InternalError(
        absl::StrCat("LaunchAssignNearest: ", p.num_tokens,
                     " tokens are more than one launch covers"));
  }
  const dim3 grid(static_cast<unsigned>(token_blocks),
                  static_cast<unsigned>(s.splits));
  detail::AssignNearestKernel<<<grid, detail::kAssignThreads, 0, stream>>>(a);
  MAXSIMD_CUDA_CHECK_LAUNCH();
  if (s.splits > 1) {
    constexpr int kMergeThreads = 256;
    const int64_t blocks = CeilDiv(p.num_tokens, kMergeThreads);
    detail::MergeAssignSplitsKernel<<<static_cast<unsigned>(blocks),
                                      kMergeThreads, 0, stream>>>(
        a.split_dot, a.split_index, p.num_tokens,
        static_cast<int32_t>(s.splits), p.codes);
    MAXSIMD_CUDA_CHECK_LAUNCH();
  }
  return absl::OkStatus();
}

}  // namespace maxsimd
