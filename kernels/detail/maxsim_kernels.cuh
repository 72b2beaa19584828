// Kernel templates of the scan and gather launchers (maxsim_scan.h,
// maxsim_gather.h), and the typed launch functions that the dispatchers call.
// Explicit instantiations live in maxsim_{scan,gather}_{fp16,bf16}.cu, one
// translation unit per (dtype, operation) so the build stays parallel.
#ifndef MAXSIMD_KERNELS_DETAIL_MAXSIM_KERNELS_CUH_
#define MAXSIMD_KERNELS_DETAIL_MAXSIM_KERNELS_CUH_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/maxsim_warp.cuh"
#include "kernels/maxsim_gather.h"
#include "kernels/maxsim_scan.h"

namespace maxsimd::detail {

// Documents per scan block: 4 per warp, so a block amortises its pass-tile
// load over 32 documents while a 100k-document chunk still makes thousands
// of blocks (load balance over ragged lengths).
inline constexpr int kScanDocsPerBlock = 4 * kMaxSimWarps;

// Grid: (ceil(num_docs / kScanDocsPerBlock)). Block: kMaxSimWarps warps.
// Each block walks the stacked query rows pass by pass (16 * kMT rows); per
// pass its warps score their documents and add each query's share of the
// pass to scores[query][doc]. Passes run in order inside one block, so the
// += is race-free and deterministic.
template <typename Tag, int kD, int kMT>
__global__ void __launch_bounds__(kMaxSimWarps * 32)
    MaxSimScanKernel(const ScanLaunchParams p) {
  using Storage = typename Tag::Storage;
  extern __shared__ uint4 smem_u4[];
  constexpr int kRows = 16 * kMT;
  char* tile = reinterpret_cast<char*>(smem_u4);
  int* row_q = reinterpret_cast<int*>(tile + kRows * PassRowPitchBytes(p.dpad));
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  float* my_rowmax = reinterpret_cast<float*>(row_q + kRows) + warp * kRows;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kScanDocsPerBlock;
  const int64_t j1 = min(j0 + kScanDocsPerBlock, p.num_docs);
  const Storage* tokens = static_cast<const Storage*>(p.tokens);
  const int dim = kD > 0 ? kD : p.dim;

  for (int64_t row0 = 0; row0 < p.rows_total; row0 += kRows) {
    const int nrows = static_cast<int>(min(static_cast<int64_t>(kRows), p.rows_total - row0));
    __syncthreads();  // every warp is done with the previous pass's tile
    LoadPassTile<Storage, kMT>(static_cast<const Storage*>(p.query), p.dpad,
                               row0, nrows, tile);
    for (int r = threadIdx.x; r < kRows; r += blockDim.x) {
      row_q[r] = r < nrows ? p.row_query[row0 + r] : -1;
    }
    __syncthreads();
    const int active_mt = (nrows + 15) / 16;
    const int q_first = row_q[0];
    const int q_last = row_q[nrows - 1];
    for (int64_t j = j0 + warp; j < j1; j += kMaxSimWarps) {
      const int64_t doc = p.doc_begin + j;
      if (p.tombstones != nullptr &&
          ((p.tombstones[doc >> 5] >> (doc & 31)) & 1u) != 0) {
        continue;
      }
      const int64_t t0 = p.cu_seqlens[doc];
      const int64_t len = p.cu_seqlens[doc + 1] - t0;
      float rowmax[kMT][2];
      WarpMaxSim<Tag, kD, kMT>::Run(tokens + t0 * dim, len, dim, p.dpad, tile,
                                    active_mt, rowmax);
      if (q_first == q_last) {
        const float s = SumRowsOneQuery<kMT>(rowmax, nrows);
        if (lane == 0) p.scores[q_first * p.score_stride + j] += s;
      } else {
        // Several queries share the pass: sum each one's rows in row order
        // (deterministic), one query per lane.
        StoreRowMax<kMT>(rowmax, my_rowmax);
        for (int q = q_first + lane; q <= q_last; q += 32) {
          const int64_t rb = max(p.query_offsets[q], row0) - row0;
          const int64_t re = min(p.query_offsets[q + 1], row0 + nrows) - row0;
          float s = 0.f;
          for (int64_t r = rb; r < re; ++r) s += my_rowmax[r];
          p.scores[q * p.score_stride + j] += s;
        }
        __syncwarp();
      }
    }
  }
}

// Grid: (num_tiles). Block: kMaxSimWarps warps, one record per warp per
// round. The block walks its query's rows pass by pass; record r's warp is
// the same in every pass, so scores[r] += is race-free.
template <typename Tag, int kD, int kMT>
__global__ void __launch_bounds__(kMaxSimWarps * 32)
    MaxSimGatherKernel(const GatherLaunchParams p) {
  using Storage = typename Tag::Storage;
  extern __shared__ uint4 smem_u4[];
  constexpr int kRows = 16 * kMT;
  char* tile = reinterpret_cast<char*>(smem_u4);
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const GatherTile work = p.tiles[blockIdx.x];
  const int64_t r0 = p.query_offsets[work.query];
  const int64_t r1 = p.query_offsets[work.query + 1];
  const int dim = kD > 0 ? kD : p.dim;

  for (int64_t row0 = r0; row0 < r1; row0 += kRows) {
    const int nrows = static_cast<int>(min(static_cast<int64_t>(kRows), r1 - row0));
    __syncthreads();
    LoadPassTile<Storage, kMT>(static_cast<const Storage*>(p.query), p.dpad,
                               row0, nrows, tile);
    __syncthreads();
    const int active_mt = (nrows + 15) / 16;
    for (int64_t r = work.rec_begin + warp; r < work.rec_end;
         r += kMaxSimWarps) {
      const GatherRecord rec = p.records[r];
      float rowmax[kMT][2];
      WarpMaxSim<Tag, kD, kMT>::Run(static_cast<const Storage*>(rec.tokens),
                                    rec.len, dim, p.dpad, tile, active_mt,
                                    rowmax);
      const float s = SumRowsOneQuery<kMT>(rowmax, nrows);
      if (lane == 0) p.scores[r] += s;
    }
  }
}

template <typename Kernel>
absl::Status PrepareSmem(Kernel kernel, int bytes) {
  if (bytes > 48 * 1024) {
    MAXSIMD_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
  return absl::OkStatus();
}

template <typename Tag, int kD, int kMT>
absl::Status LaunchScanTyped(const ScanLaunchParams& p, cudaStream_t stream) {
  if (p.num_docs == 0 || p.rows_total == 0) return absl::OkStatus();
  const int smem = MaxSimSmemBytes(kMT, p.dpad);
  auto kernel = MaxSimScanKernel<Tag, kD, kMT>;
  absl::Status st = PrepareSmem(kernel, smem);
  if (!st.ok()) return st;
  const int64_t blocks =
      (p.num_docs + kScanDocsPerBlock - 1) / kScanDocsPerBlock;
  kernel<<<static_cast<unsigned>(blocks), kMaxSimWarps * 32, smem, stream>>>(p);
  MAXSIMD_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template <typename Tag, int kD, int kMT>
absl::Status LaunchGatherTyped(const GatherLaunchParams& p,
                               cudaStream_t stream) {
  if (p.num_tiles == 0) return absl::OkStatus();
  const int smem = MaxSimSmemBytes(kMT, p.dpad);
  auto kernel = MaxSimGatherKernel<Tag, kD, kMT>;
  absl::Status st = PrepareSmem(kernel, smem);
  if (!st.ok()) return st;
  kernel<<<static_cast<unsigned>(p.num_tiles), kMaxSimWarps * 32, smem,
           stream>>>(p);
  MAXSIMD_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace maxsimd::detail

// Instantiates the typed launchers of one operation for every (dim, rows)
// bucket of one dtype.
#define MAXSIMD_INSTANTIATE_MAXSIM(LAUNCH, PARAMS, TAG)                    \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 0, 2>(const PARAMS&,  \
                                                           cudaStream_t);  \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 0, 8>(const PARAMS&,  \
                                                           cudaStream_t);  \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 64, 2>(const PARAMS&, \
                                                            cudaStream_t); \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 64, 8>(const PARAMS&, \
                                                            cudaStream_t); \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 96, 2>(const PARAMS&, \
                                                            cudaStream_t); \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 96, 8>(const PARAMS&, \
                                                            cudaStream_t); \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 128, 2>(              \
      const PARAMS&, cudaStream_t);                                        \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 128, 8>(              \
      const PARAMS&, cudaStream_t);                                        \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 256, 2>(              \
      const PARAMS&, cudaStream_t);                                        \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 256, 8>(const PARAMS&, \
                                                             cudaStream_t)

#endif  // MAXSIMD_KERNELS_DETAIL_MAXSIM_KERNELS_CUH_
