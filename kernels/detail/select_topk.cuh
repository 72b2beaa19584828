// The select block of topk.h: radix select of one slice's top k in shared
// memory, optionally merged with a previous result and sorted.
//
// Collective preconditions: 1024 threads per block (kSelectThreads), grid
// (slices, queries of the group); dynamic shared memory SelectSmemBytes().
#ifndef MAXSIMD_KERNELS_DETAIL_SELECT_TOPK_CUH_
#define MAXSIMD_KERNELS_DETAIL_SELECT_TOPK_CUH_

#include <cstdint>
#include <cub/block/block_radix_sort.cuh>

#include "kernels/detail/mma.cuh"
#include "kernels/topk.h"

namespace maxsimd::detail {

inline constexpr int kSelectThreads = 1024;
inline constexpr int kSelectSortItems = kMaxTopK / kSelectThreads;
// Item capacity of a block: a slice plus a prior result.
inline constexpr int64_t kSelectItems = kTopKSlice + kMaxTopK;

inline constexpr int SelectSmemBytes() {
  return static_cast<int>((kSelectItems + kMaxTopK) * sizeof(uint64_t));
}

// Output handling of a select block.
enum class SelectMode {
  kPartial,   // unsorted k keys per slice, zero-padded
  kRankSort,  // sorted by counting ranks: k <= kRankSortMaxK
  kCubSort,   // sorted by cub::BlockRadixSort: any k <= kMaxTopK
};
inline constexpr int kRankSortMaxK = 512;

struct SelectArgs {
  TopKSource src;
  bool src_rows_relative = false;  // source row = blockIdx.y, else q
  int32_t q0 = 0;                  // query of blockIdx.y == 0
  int64_t slice = kTopKSlice;      // source entries per block
  const int32_t* top_k = nullptr;
  const uint64_t* prior = nullptr;  // [q * prior_stride], k entries; block 0
  int32_t prior_stride = 0;
  uint64_t* out = nullptr;
  bool out_rows_relative = false;  // output row = blockIdx.y, else q
  int64_t out_row_stride = 0;      // per query
  int32_t out_slot = 0;            // per slice: keys written per block
};

__device__ __forceinline__ uint64_t LoadSelectKey(const TopKSource& s,
                                                  int64_t i, int64_t local) {
  if (s.keys != nullptr) return s.keys[i];
  const uint32_t pos = s.positions != nullptr
                           ? s.positions[i * s.position_stride]
                           : s.position_base + static_cast<uint32_t>(local);
  if (s.tombstones != nullptr &&
      ((s.tombstones[pos >> 5] >> (pos & 31)) & 1u)) {
    return 0;
  }
  return MakeKey(s.scores[i], pos);
}

template <SelectMode kMode>
__global__ void __launch_bounds__(kSelectThreads)
    SelectTopKKernel(const SelectArgs a) {
  extern __shared__ uint64_t select_smem[];
  uint64_t* items = select_smem;
  uint64_t* sel = select_smem + kSelectItems;
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_valid, s_gt, s_eq, s_need, s_done;
  __shared__ uint64_t s_prefix, s_mask;

  const int tid = threadIdx.x;
  const int y = blockIdx.y;
  const int q = a.q0 + y;
  const int b = blockIdx.x;
  const uint32_t k = static_cast<uint32_t>(a.top_k[q]);

  const int64_t src_row = a.src_rows_relative ? y : q;
  int64_t rb, re;
  if (a.src.row_offsets != nullptr) {
    rb = a.src.row_offsets[src_row];
    re = a.src.row_offsets[src_row + 1];
  } else {
    rb = src_row * a.src.row_stride;
    re = rb + a.src.row_len;
  }
  const int64_t lb = rb + b * a.slice;
  const int64_t n_src = max(int64_t{0}, min(re, lb + a.slice) - lb);
  const int64_t n_prior = (b == 0 && a.prior != nullptr) ? k : 0;
  const int64_t n = n_src + n_prior;

  if (tid == 0) {
    s_valid = 0;
    s_gt = 0;
    s_eq = 0;
  }
  __syncthreads();
  uint32_t local_valid = 0;
  for (int64_t i = tid; i < n; i += kSelectThreads) {
    const uint64_t key =
        i < n_src
            ? LoadSelectKey(a.src, lb + i, lb + i - rb)
            : a.prior[static_cast<int64_t>(q) * a.prior_stride + (i - n_src)];
    items[i] = key;
    local_valid += key != 0;
  }
  local_valid = __reduce_add_sync(0xffffffffu, local_valid);
  if ((tid & 31) == 0) atomicAdd(&s_valid, local_valid);
  __syncthreads();
  const uint32_t n_valid = s_valid;
  const bool take_all = n_valid <= k;

  // Radix select of the k-th largest key: after the loop, keys whose masked
  // bits exceed `prefix` are in, and `need` of those equal to it.
  uint64_t prefix = 0, mask = 0;
  uint32_t need = k;
  if (!take_all) {
    for (int shift = 56; shift >= 0; shift -= 8) {
      if (tid < 256) hist[tid] = 0;
      __syncthreads();
      for (int64_t i = tid; i < n; i += kSelectThreads) {
        const uint64_t key = items[i];
        if (key != 0 && (key & mask) == prefix) {
          atomicAdd(&hist[(key >> shift) & 255], 1u);
        }
      }
      __syncthreads();
      if (tid < 32) {
        // Lane l owns digits 255 - 8l .. 248 - 8l, highest first.
        uint32_t sum = 0;
#pragma unroll
        for (int x = 0; x < 8; ++x) sum += hist[255 - 8 * tid - x];
        uint32_t incl = sum;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const uint32_t v = __shfl_up_sync(0xffffffffu, incl, off);
          if (tid >= off) incl += v;
        }
        const uint32_t excl = incl - sum;
        if (excl < need && need <= incl) {
          uint32_t cum = excl;
          for (int x = 0; x < 8; ++x) {
            const int d = 255 - 8 * tid - x;
            const uint32_t h = hist[d];
            if (cum + h >= need) {
              s_prefix = prefix | (static_cast<uint64_t>(d) << shift);
              s_mask = mask | (0xffull << shift);
              s_need = need - cum;
              s_done = h == need - cum;
              break;
            }
            cum += h;
          }
        }
      }
      __syncthreads();
      prefix = s_prefix;
      mask = s_mask;
      need = s_need;
      if (s_done) break;
    }
  }

  // Gather the selection: [0, k - need) strictly above, then `need` equal.
  const uint32_t n_above = take_all ? 0 : k - need;
  for (int64_t i = tid; i < n; i += kSelectThreads) {
    const uint64_t key = items[i];
    if (key == 0) continue;
    if (take_all || (key & mask) > prefix) {
      sel[atomicAdd(&s_gt, 1u)] = key;
    } else if ((key & mask) == prefix) {
      const uint32_t e = atomicAdd(&s_eq, 1u);
      if (e < need) sel[n_above + e] = key;
    }
  }
  __syncthreads();
  const uint32_t count = take_all ? n_valid : k;

  uint64_t* out = a.out + (a.out_rows_relative ? y : q) * a.out_row_stride +
                  static_cast<int64_t>(b) * a.out_slot;
  if constexpr (kMode == SelectMode::kPartial) {
    for (int i = tid; i < a.out_slot; i += kSelectThreads) {
      out[i] = static_cast<uint32_t>(i) < count ? sel[i] : 0;
    }
  } else if constexpr (kMode == SelectMode::kRankSort) {
    for (uint32_t i = tid; i < count; i += kSelectThreads) {
      const uint64_t key = sel[i];
      uint32_t rank = 0;
      for (uint32_t j = 0; j < count; ++j) {
        const uint64_t other = sel[j];
        rank += other > key || (other == key && j < i);
      }
      out[rank] = key;
    }
    for (int i = count + tid; i < a.out_slot; i += kSelectThreads) out[i] = 0;
  } else {
    using Sort =
        cub::BlockRadixSort<uint64_t, kSelectThreads, kSelectSortItems>;
    // The items array is dead once `sel` is final: reuse it for CUB.
    static_assert(sizeof(typename Sort::TempStorage) <=
                  kSelectItems * sizeof(uint64_t));
    uint64_t keys[kSelectSortItems];
#pragma unroll
    for (int x = 0; x < kSelectSortItems; ++x) {
      const uint32_t i = tid * kSelectSortItems + x;
      keys[x] = i < count ? sel[i] : 0;
    }
    __syncthreads();
    Sort(*reinterpret_cast<typename Sort::TempStorage*>(items))
        .SortDescending(keys);
#pragma unroll
    for (int x = 0; x < kSelectSortItems; ++x) {
      const int i = tid * kSelectSortItems + x;
      if (i < a.out_slot) out[i] = keys[x];
    }
  }
}

}  // namespace maxsimd::detail

#endif  // MAXSIMD_KERNELS_DETAIL_SELECT_TOPK_CUH_
