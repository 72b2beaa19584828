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

// Row `row` of a segment's scales (int8), or null for a layout without.
__device__ __forceinline__ const float* ScalesAt(const float* scales,
                                                 int64_t row) {
  return scales != nullptr ? scales + row : nullptr;
}

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
__global__ void __launch_bounds__(kMaxSimWarps * 32,
                                  WarpMaxSim<Tag, kD, kMT>::kMinBlocks)
    MaxSimScanKernel(const ScanLaunchParams p) {
  using Warp = WarpMaxSim<Tag, kD, kMT>;
  using Storage = typename Tag::Storage;
  using QueryStorage = typename Warp::QueryStorage;
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
    const int nrows =
        static_cast<int>(min(static_cast<int64_t>(kRows), p.rows_total - row0));
    __syncthreads();  // every warp is done with the previous pass's tile
    LoadPassTile<QueryStorage, kMT>(static_cast<const QueryStorage*>(p.query),
                                    p.dpad, row0, nrows, tile);
    for (int r = threadIdx.x; r < kRows; r += blockDim.x) {
      row_q[r] = r < nrows ? p.row_query[row0 + r] : -1;
    }
    __syncthreads();
    const int active_mt = (nrows + 15) / 16;
    const int q_first = row_q[0];
    const int q_last = row_q[nrows - 1];
    // The warp's live documents j0 + warp + 8i, one ahead, so that each
    // document's first loads are issued while the previous one computes.
    auto next_live = [&](int64_t j) {
      for (; j < j1; j += kMaxSimWarps) {
        const int64_t doc = p.doc_begin + j;
        if (p.tombstones == nullptr ||
            ((p.tombstones[doc >> 5] >> (doc & 31)) & 1u) == 0) {
          break;
        }
      }
      return j;
    };
    typename Warp::Buffer next;
    int64_t j = next_live(j0 + warp);
    int64_t t0 = 0, len = 0;
    if (j < j1) {
      t0 = p.cu_seqlens[p.doc_begin + j] - p.row_base;
      len = p.cu_seqlens[p.doc_begin + j + 1] - p.row_base - t0;
      Warp::Prefetch(tokens + t0 * dim, ScalesAt(p.scales, t0), len, next);
    }
    while (j < j1) {
      const int64_t jn = next_live(j + kMaxSimWarps);
      int64_t t0n = 0, lenn = 0;
      if (jn < j1) {
        t0n = p.cu_seqlens[p.doc_begin + jn] - p.row_base;
        lenn = p.cu_seqlens[p.doc_begin + jn + 1] - p.row_base - t0n;
      }
      float rowmax[kMT][2];
      Warp::Run(tokens + t0 * dim, ScalesAt(p.scales, t0), len, dim, p.dpad,
                tile, active_mt, next, jn < j1 ? tokens + t0n * dim : nullptr,
                ScalesAt(p.scales, t0n), lenn, rowmax);
      if (p.q_scales != nullptr) {
        ScaleRowMax<kMT>(rowmax, p.q_scales + row0, nrows);
      }
      if (q_first == q_last) {
        const float s = SumRowsOneQuery<kMT>(rowmax, nrows);
        // The pass holding a query's first row writes, later passes add.
        float* out = &p.scores[q_first * p.score_stride + j];
        if (lane == 0) *out = p.query_offsets[q_first] >= row0 ? s : *out + s;
      } else {
        // Several queries share the pass: sum each one's rows in row order
        // (deterministic), one query per lane.
        StoreRowMax<kMT>(rowmax, my_rowmax);
        for (int q = q_first + lane; q <= q_last; q += 32) {
          const int64_t rb = max(p.query_offsets[q], row0) - row0;
          const int64_t re = min(p.query_offsets[q + 1], row0 + nrows) - row0;
          float s = 0.f;
          for (int64_t r = rb; r < re; ++r) s += my_rowmax[r];
          float* out = &p.scores[q * p.score_stride + j];
          *out = p.query_offsets[q] >= row0 ? s : *out + s;
        }
        __syncwarp();
      }
      j = jn;
      t0 = t0n;
      len = lenn;
    }
  }
}

// Grid: (num_tiles). Block: kMaxSimWarps warps, one record per warp per
// round. The block walks its query's rows pass by pass; record r's warp is
// the same in every pass, so scores[r] += is race-free.
template <typename Tag, int kD, int kMT>
__global__ void __launch_bounds__(kMaxSimWarps * 32,
                                  WarpMaxSim<Tag, kD, kMT>::kMinBlocks)
    MaxSimGatherKernel(const GatherLaunchParams p) {
  using Warp = WarpMaxSim<Tag, kD, kMT>;
  using Storage = typename Tag::Storage;
  using QueryStorage = typename Warp::QueryStorage;
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
    const int nrows =
        static_cast<int>(min(static_cast<int64_t>(kRows), r1 - row0));
    __syncthreads();
    LoadPassTile<QueryStorage, kMT>(static_cast<const QueryStorage*>(p.query),
                                    p.dpad, row0, nrows, tile);
    __syncthreads();
    const int active_mt = (nrows + 15) / 16;
    int64_t r = work.rec_begin + warp;
    typename Warp::Buffer next;
    GatherRecord rec;
    if (r < work.rec_end) {
      rec = p.records[r];
      Warp::Prefetch(static_cast<const Storage*>(rec.tokens), rec.scales,
                     rec.len, next);
    }
    for (; r < work.rec_end; r += kMaxSimWarps) {
      GatherRecord rec_next;
      if (r + kMaxSimWarps < work.rec_end)
        rec_next = p.records[r + kMaxSimWarps];
      float rowmax[kMT][2];
      Warp::Run(static_cast<const Storage*>(rec.tokens), rec.scales, rec.len,
                dim, p.dpad, tile, active_mt, next,
                static_cast<const Storage*>(rec_next.tokens), rec_next.scales,
                rec_next.len, rowmax);
      if (p.q_scales != nullptr) {
        ScaleRowMax<kMT>(rowmax, p.q_scales + row0, nrows);
      }
      const float s = SumRowsOneQuery<kMT>(rowmax, nrows);
      // The first pass writes, later passes add.
      if (lane == 0) p.scores[r] = row0 == r0 ? s : p.scores[r] + s;
      rec = rec_next;
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
#define MAXSIMD_INSTANTIATE_MAXSIM(LAUNCH, PARAMS, TAG)                     \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 0, 2>(const PARAMS&,   \
                                                           cudaStream_t);   \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 0, 8>(const PARAMS&,   \
                                                           cudaStream_t);   \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 64, 2>(const PARAMS&,  \
                                                            cudaStream_t);  \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 64, 8>(const PARAMS&,  \
                                                            cudaStream_t);  \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 96, 2>(const PARAMS&,  \
                                                            cudaStream_t);  \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 96, 8>(const PARAMS&,  \
                                                            cudaStream_t);  \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 128, 2>(const PARAMS&, \
                                                             cudaStream_t); \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 128, 8>(const PARAMS&, \
                                                             cudaStream_t); \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 256, 2>(const PARAMS&, \
                                                             cudaStream_t); \
  template absl::Status maxsimd::detail::LAUNCH<TAG, 256, 8>(const PARAMS&, \
                                                             cudaStream_t)

#endif  // MAXSIMD_KERNELS_DETAIL_MAXSIM_KERNELS_CUH_
