// The query-centroid table of the PlaidMma kernel (maxsim_tma.h,
// LaunchPlaidQueryCentroids): one block per (tile, 64 centroids); the
// tile's 32 rows in shared memory, each thread one centroid and four row
// pairs.
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.cuh"
#include "kernels/maxsim_tma.h"

namespace maxsimd {
namespace {

constexpr int kRows = 32;  // query rows per tile
constexpr int kCentroidsPerBlock = 64;
constexpr int kThreads = 4 * kCentroidsPerBlock;

__global__ void __launch_bounds__(kThreads)
    PlaidQcKernel(const __half* rows, int32_t dim, const float* centroids,
                  int64_t num_centroids, uint32_t* table,
                  const float* q_factors, int32_t* units) {
  extern __shared__ float
      q[];  // [kRows][dim + 4]: rows 16 bytes apart in banks
  const int stride = dim + 4;
  const int64_t tile = blockIdx.y;
  const __half* src = rows + tile * kRows * dim;
  for (int i = threadIdx.x; i < kRows * dim; i += kThreads) {
    q[(i / dim) * stride + i % dim] = __half2float(src[i]);
  }
  __syncthreads();
  const int64_t k = int64_t{blockIdx.x} * kCentroidsPerBlock + threadIdx.x / 4;
  if (k >= num_centroids) return;
  const int j = threadIdx.x % 4;  // row pairs j, j + 4, j + 8, j + 12
  const float* c = centroids + k * dim;
  float acc[8] = {};
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
  uint32_t* out = table + (tile * num_centroids + k) * 16;
  int32_t* uout =
      units == nullptr ? nullptr : units + (tile * num_centroids + k) * 32;
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const __half2 h = __floats2half2_rn(acc[2 * m], acc[2 * m + 1]);
    out[j + 4 * m] = *reinterpret_cast<const uint32_t*>(&h);
    if (uout == nullptr) continue;
    const int pair = j + 4 * m;
    const int r0 = 16 * (pair / 8) + pair % 8;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = r0 + 8 * e;
      const float f = q_factors[tile * kRows + r];
      const float v = __half2float(e == 0 ? __low2half(h) : __high2half(h));
      const float x = f > 0.f ? rintf(v / f) : 0.f;
      uout[(r % 8 / 2) * 8 + (r / 8) * 2 + r % 2] =
          static_cast<int32_t>(fminf(fmaxf(x, -1073741824.f), 1073741824.f));
    }
  }
}

}  // namespace

absl::Status LaunchPlaidQueryCentroids(const uint16_t* rows, int64_t tiles,
                                       int32_t dim, const float* centroids,
                                       int64_t num_centroids, uint32_t* table,
                                       cudaStream_t stream,
                                       const float* q_factors, int32_t* units) {
  if (dim % 4 != 0 || dim <= 0 || dim > 256 || tiles < 0 || tiles > 65535 ||
      num_centroids <= 0 || (units != nullptr && q_factors == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchPlaidQueryCentroids: dim ", dim, ", ", tiles, " tiles, ",
        num_centroids, " centroids are outside its limits"));
  }
  if (tiles == 0) return absl::OkStatus();
  const dim3 grid(
      static_cast<unsigned>((num_centroids + kCentroidsPerBlock - 1) /
                            kCentroidsPerBlock),
      static_cast<unsigned>(tiles));
  const size_t smem = size_t{kRows} * (dim + 4) * sizeof(float);
  if (smem > 48 * 1024) {
    MAXSIMD_CUDA_CHECK(cudaFuncSetAttribute(
        PlaidQcKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(smem)));
  }
  PlaidQcKernel<<<grid, kThreads, smem, stream>>>(
      reinterpret_cast<const __half*>(rows), dim, centroids, num_centroids,
      table, q_factors, units);
  MAXSIMD_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace maxsimd
