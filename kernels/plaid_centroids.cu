// The centroid product of PLAID candidate generation (plaid_centroids.h):
// the kernel and its launcher. One instantiation, so the device code lives
// here rather than in detail/.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/tma.cuh"
#include "kernels/plaid_centroids.h"

namespace maxsimd {
namespace {

constexpr int kThreads = 256;
constexpr int kTileRows = 128;  // tokens of a block
constexpr int kTileCols = 128;  // centroids of a block
constexpr int kStep = 16;       // dimension positions of a step
constexpr int kLanes = 16;      // the host's partial sums
// Shared rows are padded by 4 floats: the transposing stores then hit 16
// banks per warp instead of 2, and rows stay 16-byte aligned for the
// float4 reads of the inner loop.
constexpr int kSmemStride = kTileRows + 4;
// Values each thread copies per step, per operand: 128 x 16 / 256.
constexpr int kLoads = kTileRows * kStep / kThreads;
static_assert(kTileRows == kTileCols,
              "the loader moves one token row and one centroid row per slot");
static_assert(kThreads == 16 * 16, "a 16 x 16 grid of 8 x 8 blocks");

// The dimension at position p of the walk (plaid_centroids.h): lane
// p / group, element p % group, for p < body = 16 * group; the tail after.
__device__ __forceinline__ int DimAt(int p, int body, int group) {
  return p < body ? (p % group) * kLanes + p / group : p;
}

// Collective preconditions: blockDim.x == kThreads; every thread runs
// every step (the loop bounds depend on the arguments only), so the
// barriers are reached by all.
__global__ void __launch_bounds__(kThreads, 1)
    CentroidScoresKernel(const CentroidScoresParams a) {
  __shared__ __align__(16) float xs[2][kStep][kSmemStride];
  __shared__ __align__(16) float ys[2][kStep][kSmemStride];

  const int tid = static_cast<int>(threadIdx.x);
  // Compute layout: thread (ty, tx) holds token rows ty * 4 + {0..3} and
  // 64 + ty * 4 + {0..3}, centroid columns tx * 4 + {0..3} and
  // 64 + tx * 4 + {0..3}.
  const int tx = tid % 16;
  const int ty = tid / 16;
  // Load layout: slot i of a thread is row ld_row + 16 * i, position
  // ld_pos of the step.
  const int ld_pos = tid % kStep;
  const int ld_row = tid / kStep;

  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int dim = a.dim;
  const int body = dim - dim % kLanes;
  const int group = body / kLanes;
  const int steps = (dim + kStep - 1) / kStep;
  const int64_t rows_left = a.num_tokens - row0;
  const int64_t cols_left = a.num_centroids - col0;
  const int64_t row_step = int64_t{16} * dim;
  const float* const x_base = a.tokens + (row0 + ld_row) * dim;
  const float* const y_base = a.centroids + (col0 + ld_row) * dim;

  // Shared buffer `buf` <- positions [16 s, 16 s + 16) of the walk, zeros
  // past the last token, centroid or dimension (never read: the walk
  // stops at dim, and rows past the end are not stored).
  auto load = [&](int buf, int s) {
    const int p = s * kStep + ld_pos;
    const bool p_ok = p < dim;
    const int j = p_ok ? DimAt(p, body, group) : 0;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int r = ld_row + 16 * i;
      const bool x_ok = p_ok && r < rows_left;
      const bool y_ok = p_ok && r < cols_left;
      detail::CpAsync4(detail::SmemAddr(&xs[buf][ld_pos][r]),
                       x_ok ? x_base + i * row_step + j : a.tokens,
                       x_ok ? 4u : 0u);
      detail::CpAsync4(detail::SmemAddr(&ys[buf][ld_pos][r]),
                       y_ok ? y_base + i * row_step + j : a.centroids,
                       y_ok ? 4u : 0u);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  auto wait_loads = []() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  };

  float lane[8][8];
  float dot[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) lane[i][j] = dot[i][j] = 0.f;
  }

  load(0, 0);
  wait_loads();
  __syncthreads();
  int in_lane = 0;  // positions of the current lane already summed
  for (int s = 0; s < steps; ++s) {
    const int buf = s & 1;
    if (s + 1 < steps) load(buf ^ 1, s + 1);
#pragma unroll
    for (int kk = 0; kk < kStep; ++kk) {
      const int p = s * kStep + kk;
      if (p >= dim) break;
      const float4 x0 = *reinterpret_cast<const float4*>(&xs[buf][kk][ty * 4]);
      const float4 x1 =
          *reinterpret_cast<const float4*>(&xs[buf][kk][64 + ty * 4]);
      const float4 y0 = *reinterpret_cast<const float4*>(&ys[buf][kk][tx * 4]);
      const float4 y1 =
          *reinterpret_cast<const float4*>(&ys[buf][kk][64 + tx * 4]);
      const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      const float y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
      if (p < body) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            lane[i][j] = __fadd_rn(lane[i][j], __fmul_rn(x[i], y[j]));
          }
        }
        if (++in_lane == group) {  // the lane is complete: add it
          in_lane = 0;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              dot[i][j] = __fadd_rn(dot[i][j], lane[i][j]);
              lane[i][j] = 0.f;
            }
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            dot[i][j] = __fadd_rn(dot[i][j], __fmul_rn(x[i], y[j]));
          }
        }
      }
    }
    wait_loads();
    __syncthreads();
  }

  // Rows of 4 consecutive columns go out as one float4 where the row
  // pitch keeps them aligned (the buffer itself is).
  const bool vec =
      a.ld_scores % 4 == 0 && reinterpret_cast<uintptr_t>(a.scores) % 16 == 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4);
    if (r >= rows_left) continue;
    float* const out = a.scores + (row0 + r) * a.ld_scores + col0;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = half * 64 + tx * 4;
      const float* v = &dot[i][half * 4];
      if (vec && c + 4 <= cols_left) {
        *reinterpret_cast<float4*>(out + c) =
            make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (c + j < cols_left) out[c + j] = v[j];
        }
      }
    }
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::Status LaunchCentroidScores(const CentroidScoresParams& p,
                                  cudaStream_t stream) {
  if (p.num_tokens < 1 || p.num_tokens > kMaxCentroidScoreTokens ||
      p.num_centroids < 1 || p.num_centroids > (int64_t{1} << 31) - 1 ||
      p.dim < 1 || p.ld_scores < p.num_centroids || p.tokens == nullptr ||
      p.centroids == nullptr || p.scores == nullptr) {
    return absl::InternalError(
        absl::StrCat("LaunchCentroidScores: bad shape: ", p.num_tokens,
                     " tokens, ", p.num_centroids, " centroids, dim ", p.dim,
                     ", ld_scores ", p.ld_scores));
  }
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.num_centroids, kTileCols)),
                  static_cast<unsigned>(CeilDiv(p.num_tokens, kTileRows)));
  CentroidScoresKernel<<<grid, kThreads, 0, stream>>>(p);
  MAXSIMD_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace maxsimd
