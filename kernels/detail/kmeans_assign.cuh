// Device code of the k-means assignment (kernels/kmeans.h): a tiled fp32
// product of tokens and centroids whose epilogue keeps, per token, the best
// (dot product, centroid index) pair instead of storing the products.
//
// Collective preconditions: blockDim.x == kAssignThreads; every thread of a
// block runs every step (the loop bounds depend on blockIdx only), so the
// barriers and the full-warp shuffles are reached by all.
#ifndef MAXSIMD_KERNELS_DETAIL_KMEANS_ASSIGN_CUH_
#define MAXSIMD_KERNELS_DETAIL_KMEANS_ASSIGN_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace maxsimd::detail {

inline constexpr int kAssignThreads = 256;
inline constexpr int kAssignTileTokens = 128;     // rows of a block
inline constexpr int kAssignTileCentroids = 128;  // columns of a step
inline constexpr int kAssignTileDims = 16;        // dimensions of a step
// Shared rows are padded by 4 floats: the transposing stores then hit 16
// banks per warp instead of 2, and rows stay 16-byte aligned for the float4
// reads of the inner loop.
inline constexpr int kAssignSmemStride = kAssignTileTokens + 4;
// Values each thread moves from global to shared memory per step, per
// operand: 128 x 16 / 256.
inline constexpr int kAssignLoads =
    kAssignTileTokens * kAssignTileDims / kAssignThreads;
static_assert(kAssignTileTokens == kAssignTileCentroids,
              "the loader moves one token row and one centroid row per slot");
static_assert(kAssignThreads == 16 * 16, "a 16 x 16 grid of 8 x 8 blocks");

struct AssignArgs {
  const float* tokens = nullptr;     // [num_tokens, dim]
  const float* centroids = nullptr;  // [num_centroids, dim]
  int64_t num_tokens = 0;
  int64_t num_centroids = 0;
  int32_t dim = 0;
  // Centroids per blockIdx.y, a multiple of kAssignTileCentroids.
  int64_t split_centroids = 0;
  // gridDim.y == 1: the codes. Otherwise each split's best per token,
  // [gridDim.y, num_tokens], merged by MergeAssignSplitsKernel.
  int64_t* codes = nullptr;
  float* split_dot = nullptr;
  int32_t* split_index = nullptr;
};

// Whether (dot, index) ranks before (best_dot, best_index): the larger dot
// product, the lower index on a tie. A NaN never ranks before anything, so
// a running best that starts at (-inf, 0) is never NaN, and merging bests
// in any order gives the same result as the host's scan in index order.
__device__ __forceinline__ bool AssignBeats(float dot, int32_t index,
                                            float best_dot,
                                            int32_t best_index) {
  return dot > best_dot || (dot == best_dot && index < best_index);
}

// cp.async of one float, global to shared; `valid` false writes +0 and
// reads nothing (src-size 0), though `src` must still be a global address.
__device__ __forceinline__ void AssignCopy4(float* dst, const float* src,
                                            bool valid) {
  const unsigned smem = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem),
               "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}

__global__ void __launch_bounds__(kAssignThreads, 2)
    AssignNearestKernel(const AssignArgs a) {
  __shared__ __align__(16) float xs[2][kAssignTileDims][kAssignSmemStride];
  __shared__ __align__(16) float ys[2][kAssignTileDims][kAssignSmemStride];

  const int tid = static_cast<int>(threadIdx.x);
  // Compute layout: thread (ty, tx) holds token rows ty * 4 + {0..3} and
  // 64 + ty * 4 + {0..3}, centroid columns tx * 4 + {0..3} and
  // 64 + tx * 4 + {0..3}, both in ascending order.
  const int tx = tid % 16;
  const int ty = tid / 16;
  // Load layout: slot i of a thread is row ld_row + 16 * i, dimension
  // ld_dim of the step, so a warp reads two 64-byte row segments per slot.
  const int ld_dim = tid % kAssignTileDims;
  const int ld_row = tid / kAssignTileDims;

  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kAssignTileTokens;
  const int64_t c_begin = static_cast<int64_t>(blockIdx.y) * a.split_centroids;
  const int64_t c_end = min(a.num_centroids, c_begin + a.split_centroids);
  const int dim = a.dim;
  const int d_steps = (dim + kAssignTileDims - 1) / kAssignTileDims;
  const int64_t c_tiles =
      (c_end - c_begin + kAssignTileCentroids - 1) / kAssignTileCentroids;
  const int64_t steps = c_tiles * d_steps;

  // Slot i of the loader copies token row0 + ld_row + 16 i and centroid
  // c0 + ld_row + 16 i: one base pointer per operand, rows 16 * dim apart.
  const int64_t rows_left = a.num_tokens - row0;
  const float* const x_base = a.tokens + (row0 + ld_row) * dim + ld_dim;
  const float* const y_base = a.centroids + (c_begin + ld_row) * dim + ld_dim;
  const int64_t row_step = int64_t{16} * dim;
  // Shared buffer `buf` <- step (tile c_tile, dimensions d0 ..), straight
  // from global memory (no staging registers), transposed to [dim][row];
  // zeros past the last token, centroid or dimension. A zero dimension
  // adds +0 * +0 = +0 to both operands' dot products, which leaves the
  // fp32 sum unchanged (it starts at +0 and so is never -0).
  auto load = [&](int buf, int64_t c_tile, int d0) {
    const bool d_ok = d0 + ld_dim < dim;
    const int64_t cols_left = c_end - c_begin - c_tile * kAssignTileCentroids;
    const float* const x = x_base + d0;
    const float* const y = y_base + c_tile * kAssignTileCentroids * dim + d0;
#pragma unroll
    for (int i = 0; i < kAssignLoads; ++i) {
      const int r = ld_row + 16 * i;
      const bool x_ok = d_ok && r < rows_left;
      const bool y_ok = d_ok && r < cols_left;
      AssignCopy4(&xs[buf][ld_dim][r], x_ok ? x + i * row_step : a.tokens,
                  x_ok);
      AssignCopy4(&ys[buf][ld_dim][r], y_ok ? y + i * row_step : a.centroids,
                  y_ok);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  auto wait_loads = []() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  };

  float best_dot[8];
  int32_t best_index[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    best_dot[i] = -__int_as_float(0x7f800000);  // -inf
    best_index[i] = 0;
  }
  float acc[8][8];

  if (steps > 0) load(0, 0, 0);
  wait_loads();
  __syncthreads();
  int64_t c_tile = 0;
  int d_step = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const int buf = static_cast<int>(s & 1);
    // Copy the next step into the other buffer while this one computes.
    int64_t next_tile = c_tile;
    int next_d = d_step + 1;
    if (next_d == d_steps) {
      next_d = 0;
      ++next_tile;
    }
    const bool more = s + 1 < steps;
    if (more) load(buf ^ 1, next_tile, next_d * kAssignTileDims);
    if (d_step == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kAssignTileDims; ++kk) {
      const float4 x0 = *reinterpret_cast<const float4*>(&xs[buf][kk][ty * 4]);
      const float4 x1 =
          *reinterpret_cast<const float4*>(&xs[buf][kk][64 + ty * 4]);
      const float4 y0 = *reinterpret_cast<const float4*>(&ys[buf][kk][tx * 4]);
      const float4 y1 =
          *reinterpret_cast<const float4*>(&ys[buf][kk][64 + tx * 4]);
      const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      const float y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          // Rounded separately, never fused: the host's arithmetic.
          acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(x[i], y[j]));
        }
      }
    }
    if (d_step == d_steps - 1) {
      // The tile's dot products are complete: fold them in, columns in
      // ascending index order.
      const int64_t c0 = c_begin + c_tile * kAssignTileCentroids;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t c = c0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + (j - 4));
        if (c < c_end) {
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            if (AssignBeats(acc[i][j], static_cast<int32_t>(c), best_dot[i],
                            best_index[i])) {
              best_dot[i] = acc[i][j];
              best_index[i] = static_cast<int32_t>(c);
            }
          }
        }
      }
    }
    wait_loads();
    __syncthreads();
    c_tile = next_tile;
    d_step = next_d;
  }

  // The 16 threads of a row group (lanes of one half-warp) merge.
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int offset = 8; offset > 0; offset /= 2) {
      const float other_dot = __shfl_xor_sync(0xffffffffu, best_dot[i], offset);
      const int32_t other_index =
          __shfl_xor_sync(0xffffffffu, best_index[i], offset);
      if (AssignBeats(other_dot, other_index, best_dot[i], best_index[i])) {
        best_dot[i] = other_dot;
        best_index[i] = other_index;
      }
    }
  }
  if (tx != 0) return;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t t = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
    if (t >= a.num_tokens) continue;
    if (gridDim.y == 1) {
      a.codes[t] = best_index[i];
    } else {
      const int64_t at = static_cast<int64_t>(blockIdx.y) * a.num_tokens + t;
      a.split_dot[at] = best_dot[i];
      a.split_index[at] = best_index[i];
    }
  }
}

// codes[t] = the best of the `splits` bests of token t.
__global__ void MergeAssignSplitsKernel(const float* split_dot,
                                        const int32_t* split_index,
                                        int64_t num_tokens, int32_t splits,
                                        int64_t* codes) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  float best_dot = split_dot[t];
  int32_t best_index = split_index[t];
  for (int32_t s = 1; s < splits; ++s) {
    const float dot = split_dot[s * num_tokens + t];
    const int32_t index = split_index[s * num_tokens + t];
    if (AssignBeats(dot, index, best_dot, best_index)) {
      best_dot = dot;
      best_index = index;
    }
  }
  codes[t] = best_index;
}

}  // namespace maxsimd::detail

#endif  // MAXSIMD_KERNELS_DETAIL_KMEANS_ASSIGN_CUH_
