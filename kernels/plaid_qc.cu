// The query-centroid table of the PlaidMma kernel (maxsim_tma.h,
// LaunchPlaidQueryCentroids): one block per (tile, 64 centroids); the
// tile's 32 rows in shared memory, each thread one centroid and four row
// pairs. The scan's table in row-factor units comes with it: int32 in one
// pass, or int16 in two (the first finds each tile's largest value, the
// second writes the values in units of the shift that fits it).
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda_check.cuh"
#include "kernels/maxsim_tma.h"
#include "kernels/plaid_qc.h"

namespace maxsimd {
namespace {

constexpr int kRows = 32;  // query rows per tile
constexpr int kCentroidsPerBlock = 64;
constexpr int kThreads = 4 * kCentroidsPerBlock;

// What a pass of PlaidQcKernel writes.
enum class QcPass {
  kTables,     // the float16 table, and the int32 units table if asked
  kUnitsMax,   // the float16 table, and each tile's largest |unit|
  kUnitsInt16  // the int16 units table, from the tile's largest |unit|
};

// REQUIRES (kUnitsMax): units_max[tile] is 0 before the launch.
template <QcPass kPass>
__global__ void __launch_bounds__(kThreads)
    PlaidQcKernel(const __half* rows, int32_t dim, const float* centroids,
                  int64_t num_centroids, float offset, uint32_t* table,
                  const float* q_factors, int32_t* units, float* units_max) {
  extern __shared__ float
      q[];  // [kRows][dim + 4]: rows 16 bytes apart in banks
  __shared__ float row_sum[kRows];
  const int stride = dim + 4;
  const int64_t tile = blockIdx.y;
  const __half* src = rows + tile * kRows * dim;
  for (int i = threadIdx.x; i < kRows * dim; i += kThreads) {
    q[(i / dim) * stride + i % dim] = __half2float(src[i]);
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    float sum = 0.f;
    for (int d = 0; d < dim; ++d) sum += q[threadIdx.x * stride + d];
    row_sum[threadIdx.x] = sum;
  }
  __syncthreads();
  const int64_t k = int64_t{blockIdx.x} * kCentroidsPerBlock + threadIdx.x / 4;
  const bool live = k < num_centroids;
  const int j = threadIdx.x % 4;  // row pairs j, j + 4, j + 8, j + 12
  float acc[8] = {};
  if (live) {
    const float* c = centroids + k * dim;
    for (int d = 0; d < dim; d += 4) {
      const float4 cv = *reinterpret_cast<const float4*>(c + d);
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int pair = j + 4 * m;
        const int r0 = 16 * (pair / 8) + pair % 8;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float4 a =
              *reinterpret_cast<const float4*>(q + (r0 + 8 * h) * stride + d);
          float& s = acc[2 * m + h];
          s = fmaf(a.x, cv.x, s);
          s = fmaf(a.y, cv.y, s);
          s = fmaf(a.z, cv.z, s);
          s = fmaf(a.w, cv.w, s);
        }
      }
    }
  }
  const int shift =
      kPass == QcPass::kUnitsInt16 ? PlaidUnitsShift(units_max[tile]) : 0;
  const float unit = static_cast<float>(1 << shift);
  float largest = 0.f;
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int pair = j + 4 * m;
    const int r0 = 16 * (pair / 8) + pair % 8;
    // The levels' offset times the row's sum (PlaidOffsetLevels).
    const __half2 h =
        __floats2half2_rn(fmaf(offset, row_sum[r0], acc[2 * m]),
                          fmaf(offset, row_sum[r0 + 8], acc[2 * m + 1]));
    if (kPass != QcPass::kUnitsInt16 && live) {
      table[(tile * num_centroids + k) * 16 + j + 4 * m] =
          *reinterpret_cast<const uint32_t*>(&h);
    }
    if (units == nullptr && kPass == QcPass::kTables) continue;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = r0 + 8 * e;
      const float f = q_factors[tile * kRows + r];
      const float v = __half2float(e == 0 ? __low2half(h) : __high2half(h));
      const float x = fminf(fmaxf(f > 0.f ? rintf(v / f) : 0.f, -1073741824.f),
                            1073741824.f);
      if (!live) continue;
      if constexpr (kPass == QcPass::kTables) {
        units[(tile * num_centroids + k) * 32 + r] = static_cast<int32_t>(x);
      } else if constexpr (kPass == QcPass::kUnitsMax) {
        largest = fmaxf(largest, fabsf(x));
      } else {
        int16_t* row = reinterpret_cast<int16_t*>(units) +
                       (tile * num_centroids * 2 + k) * 32;
        row[(r % 8 / 2) * 8 + (r / 8) * 2 + r % 2] = static_cast<int16_t>(
            fminf(fmaxf(rintf(x / unit), -32767.f), 32767.f));
      }
    }
  }
  if constexpr (kPass == QcPass::kUnitsMax) {
    // Non-negative floats order as their bits do.
    const unsigned bits =
        __reduce_max_sync(0xffffffffu, __float_as_uint(largest));
    if ((threadIdx.x & 31) == 0) {
      atomicMax(reinterpret_cast<unsigned*>(units_max) + tile, bits);
    }
  }
}

}  // namespace

absl::Status LaunchPlaidQueryCentroids(const uint16_t* rows, int64_t tiles,
                                       int32_t dim, const float* centroids,
                                       int64_t num_centroids, float offset,
                                       uint32_t* table, cudaStream_t stream,
                                       const float* q_factors, int32_t* units,
                                       bool units_int16, float* units_max) {
  if (dim % 4 != 0 || dim <= 0 || dim > 256 || tiles < 0 || tiles > 65535 ||
      num_centroids <= 0 || (units != nullptr && q_factors == nullptr) ||
      (units_int16 && (units == nullptr || units_max == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchPlaidQueryCentroids: dim ", dim, ", ", tiles, " tiles, ",
        num_centroids, " centroids", units_int16 ? ", int16 units" : "",
        " are outside its limits"));
  }
  if (tiles == 0) return absl::OkStatus();
  const dim3 grid(
      static_cast<unsigned>((num_centroids + kCentroidsPerBlock - 1) /
                            kCentroidsPerBlock),
      static_cast<unsigned>(tiles));
  const size_t smem = size_t{kRows} * (dim + 4) * sizeof(float);
  const __half* q = reinterpret_cast<const __half*>(rows);
  auto launch = [&](auto kernel) -> absl::Status {
    if (smem > 48 * 1024) {
      MAXSIMD_CUDA_CHECK(cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
          static_cast<int>(smem)));
    }
    kernel<<<grid, kThreads, smem, stream>>>(q, dim, centroids, num_centroids,
                                             offset, table, q_factors, units,
                                             units_max);
    MAXSIMD_CUDA_CHECK_LAUNCH();
    return absl::OkStatus();
  };
  if (!units_int16) return launch(PlaidQcKernel<QcPass::kTables>);
  MAXSIMD_CUDA_CHECK(
      cudaMemsetAsync(units_max, 0, tiles * sizeof(float), stream));
  MAXSIMD_RETURN_IF_ERROR(launch(PlaidQcKernel<QcPass::kUnitsMax>));
  return launch(PlaidQcKernel<QcPass::kUnitsInt16>);
}

}  // namespace maxsimd
