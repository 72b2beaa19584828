// The MaxSim core shared by the scan and gather kernels: one warp scores one
// document against the query rows of one "pass" held in shared memory.
//
// Tall-GEMM view: the pass holds up to 16 * kMT stacked query rows (several
// queries of a batch, or part of one long query); the document's tokens are
// the N dimension, streamed from global memory in groups of 8 * kNG tokens
// straight into B fragments (16-byte loads; see mma.cuh for the k
// permutation that makes a 16-byte load a fragment). Each document token is
// read from HBM once per pass and used against every row of the pass. The
// segmented max over the document's tokens stays in registers: each lane
// keeps a running max for its two rows of every m-tile, and the four lanes
// of a quad (which hold different token columns) combine theirs at the end.
//
// Collective preconditions: called by all 32 lanes of a warp with the same
// arguments; `qsm` is the block's pass tile, written and made visible
// (__syncthreads) before the call, and not rewritten until every warp is
// done with it.
#ifndef MAXSIMD_KERNELS_DETAIL_MAXSIM_WARP_CUH_
#define MAXSIMD_KERNELS_DETAIL_MAXSIM_WARP_CUH_

#include <cstdint>

#include "kernels/detail/mma.cuh"

namespace maxsimd::detail {

inline constexpr int kMaxSimWarps = 8;  // warps per block, scan and gather

// Row pitch in bytes of the pass tile in shared memory for `dpad` (a
// multiple of 32) elements: 64 mod 128, so that the 8 lanes of a quarter
// warp (rows g, g+1; offsets 16t) hit 8 distinct 16-byte bank groups.
__host__ __device__ constexpr int PassRowPitchBytes(int dpad) {
  return (dpad * 2) % 128 == 0 ? dpad * 2 + 64 : dpad * 2;
}

// Dynamic shared memory of one MaxSim block: the pass tile, the pass rows'
// query ids, and per-warp row maxima.
__host__ __device__ constexpr int MaxSimSmemBytes(int mt, int dpad) {
  return 16 * mt * PassRowPitchBytes(dpad) + 16 * mt * 4 +
         kMaxSimWarps * 16 * mt * 4;
}

// Copies pass rows [row0, row0 + nrows) of the staged query matrix
// ([*, dpad] row-major, zero-padded columns) into the tile, zero rows after
// nrows. All threads of the block call it; the caller syncs after.
template <typename Storage, int kMT>
__device__ __forceinline__ void LoadPassTile(const Storage* query, int dpad,
                                             int64_t row0, int nrows,
                                             char* tile) {
  const int pitch = PassRowPitchBytes(dpad);
  const int vec_per_row = dpad / 8;
  const int total = 16 * kMT * vec_per_row;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int r = i / vec_per_row;
    const int c = i - r * vec_per_row;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < nrows) {
      v = reinterpret_cast<const uint4*>(query + (row0 + r) * dpad)[c];
    }
    *reinterpret_cast<uint4*>(tile + r * pitch + c * 16) = v;
  }
}

template <typename Tag, int kD, int kMT>
struct WarpMaxSim {
  using Storage = typename Tag::Storage;
  // Token groups of 8 loaded per step (kNG * kD / 8 registers per buffer,
  // two buffers). With 2 m-tiles the kernel is memory-bound: small groups
  // keep registers under 128 so two blocks fit a multiprocessor (latency
  // hiding across 16 warps). With 8 m-tiles it is bound by the MMAs and
  // their A-fragment loads: larger groups reuse each A fragment more.
  static constexpr int kNG =
      kMT == 2 ? (kD >= 256 ? 1 : 2) : ((kD == 0 || kD >= 256) ? 2 : 4);
  static constexpr int kJ = kD / 32;
  // Blocks per multiprocessor the register budget is sized for.
  static constexpr int kMinBlocks = kMT == 2 ? 2 : 1;
  using Buffer = uint4[kNG][kJ > 0 ? kJ : 1];

  // Scores document `doc` ([len, dim] row-major) against the pass tile.
  // On return, rowmax[mt][h] is max over the document's tokens of
  // <row mt*16 + g + 8h, token>, identical in the 4 lanes of a quad; -inf
  // for an empty document. Only m-tiles < active_mt are computed.
  //
  // Fixed widths (kD > 0) software-pipeline the token loads one group ahead,
  // also across documents: `next` holds the first group of `doc` on entry
  // (Prefetch), and on return the first group of `next_doc` (if not null),
  // so a warp walking several documents never drains its loads.
  __device__ __forceinline__ static void Prefetch(const Storage* doc,
                                                  int64_t len, Buffer& next) {
    if constexpr (kD > 0) {
      const int lane = threadIdx.x & 31;
      if (len > 0) LoadGroupFixed(doc, len, 0, lane >> 2, lane & 3, next);
    }
  }

  __device__ __forceinline__ static void Run(
      const Storage* doc, int64_t len, int dim, int dpad, const char* tile,
      int active_mt, Buffer& next, const Storage* next_doc, int64_t next_len,
      float (&rowmax)[kMT][2]) {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int pitch = PassRowPitchBytes(dpad);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      rowmax[mt][0] = -__int_as_float(0x7f800000);
      rowmax[mt][1] = -__int_as_float(0x7f800000);
    }
    if constexpr (kD > 0) {
      RunFixed(doc, len, tile, pitch, active_mt, g, t, next, next_doc, next_len,
               rowmax);
    } else {
      RunGeneral(doc, len, dim, dpad, tile, pitch, active_mt, g, t, rowmax);
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v = rowmax[mt][h];
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
        rowmax[mt][h] = v;
      }
    }
  }

 private:
  // Folds one group's accumulators into the running maxima; columns at or
  // past `rem` (tokens beyond the document's end) are ignored.
  __device__ __forceinline__ static void FoldMax(const float (&acc)[kNG][4],
                                                 int64_t rem, int t,
                                                 float (&rm)[2]) {
    if (rem >= 8 * kNG) {
#pragma unroll
      for (int ng = 0; ng < kNG; ++ng) {
        rm[0] = fmaxf(rm[0], fmaxf(acc[ng][0], acc[ng][1]));
        rm[1] = fmaxf(rm[1], fmaxf(acc[ng][2], acc[ng][3]));
      }
    } else {
#pragma unroll
      for (int ng = 0; ng < kNG; ++ng) {
        const int c = ng * 8 + 2 * t;
        if (c < rem) {
          rm[0] = fmaxf(rm[0], acc[ng][0]);
          rm[1] = fmaxf(rm[1], acc[ng][2]);
        }
        if (c + 1 < rem) {
          rm[0] = fmaxf(rm[0], acc[ng][1]);
          rm[1] = fmaxf(rm[1], acc[ng][3]);
        }
      }
    }
  }

  __device__ __forceinline__ static void LoadGroupFixed(const Storage* doc,
                                                        int64_t len,
                                                        int64_t base, int g,
                                                        int t,
                                                        uint4 (&b)[kNG][kJ]) {
#pragma unroll
    for (int ng = 0; ng < kNG; ++ng) {
      const int64_t tok = base + ng * 8 + g;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        b[ng][j] = tok < len ? LoadStreaming16(doc + tok * kD + 32 * j + 8 * t)
                             : make_uint4(0, 0, 0, 0);
      }
    }
  }

  __device__ __forceinline__ static void RunFixed(
      const Storage* doc, int64_t len, const char* tile, int pitch,
      int active_mt, int g, int t, Buffer& next, const Storage* next_doc,
      int64_t next_len, float (&rowmax)[kMT][2]) {
    if (len == 0 && next_doc != nullptr && next_len > 0) {
      LoadGroupFixed(next_doc, next_len, 0, g, t, next);
    }
    for (int64_t base = 0; base < len; base += 8 * kNG) {
      uint4 cur[kNG][kJ];
#pragma unroll
      for (int ng = 0; ng < kNG; ++ng) {
#pragma unroll
        for (int j = 0; j < kJ; ++j) cur[ng][j] = next[ng][j];
      }
      // Prefetch the next group so that its loads overlap this group's MMAs.
      if (base + 8 * kNG < len) {
        LoadGroupFixed(doc, len, base + 8 * kNG, g, t, next);
      } else if (next_doc != nullptr && next_len > 0) {
        LoadGroupFixed(next_doc, next_len, 0, g, t, next);
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if (mt < active_mt) {
          float acc[kNG][4];
#pragma unroll
          for (int ng = 0; ng < kNG; ++ng) {
            acc[ng][0] = acc[ng][1] = acc[ng][2] = acc[ng][3] = 0.f;
          }
          const char* row_lo = tile + (mt * 16 + g) * pitch + 16 * t;
          const char* row_hi = row_lo + 8 * pitch;
#pragma unroll
          for (int j = 0; j < kJ; ++j) {
            const uint4 alo = *reinterpret_cast<const uint4*>(row_lo + 64 * j);
            const uint4 ahi = *reinterpret_cast<const uint4*>(row_hi + 64 * j);
#pragma unroll
            for (int ng = 0; ng < kNG; ++ng) {
              Mma16816<Tag>(acc[ng], alo.x, ahi.x, alo.y, ahi.y, cur[ng][j].x,
                            cur[ng][j].y);
              Mma16816<Tag>(acc[ng], alo.z, ahi.z, alo.w, ahi.w, cur[ng][j].z,
                            cur[ng][j].w);
            }
          }
          FoldMax(acc, len - base, t, rowmax[mt]);
        }
      }
    }
  }

  // Any dim: elements past `dim` read as zero; 16-byte loads where the row
  // layout allows them, 2-byte loads otherwise.
  __device__ __forceinline__ static uint4 LoadSlabGeneral(const Storage* doc,
                                                          int64_t tok,
                                                          int64_t len, int dim,
                                                          int e0, bool vec) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (tok >= len) return v;
    const uint16_t* row = reinterpret_cast<const uint16_t*>(doc) + tok * dim;
    if (vec && e0 + 8 <= dim) return LoadStreaming16(row + e0);
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t h = e0 + i < dim ? row[e0 + i] : 0u;
      w[i / 2] |= h << (16 * (i % 2));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }

  __device__ __forceinline__ static void RunGeneral(
      const Storage* doc, int64_t len, int dim, int dpad, const char* tile,
      int pitch, int active_mt, int g, int t, float (&rowmax)[kMT][2]) {
    const bool vec = dim % 8 == 0;
    for (int64_t base = 0; base < len; base += 8 * kNG) {
      float acc[kMT][kNG][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int ng = 0; ng < kNG; ++ng) {
          acc[mt][ng][0] = acc[mt][ng][1] = acc[mt][ng][2] = acc[mt][ng][3] =
              0.f;
        }
      }
      for (int j = 0; j < dpad / 32; ++j) {
        uint4 b[kNG];
#pragma unroll
        for (int ng = 0; ng < kNG; ++ng) {
          b[ng] = LoadSlabGeneral(doc, base + ng * 8 + g, len, dim,
                                  32 * j + 8 * t, vec);
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          if (mt < active_mt) {
            const char* row_lo = tile + (mt * 16 + g) * pitch + 16 * t + 64 * j;
            const uint4 alo = *reinterpret_cast<const uint4*>(row_lo);
            const uint4 ahi =
                *reinterpret_cast<const uint4*>(row_lo + 8 * pitch);
#pragma unroll
            for (int ng = 0; ng < kNG; ++ng) {
              Mma16816<Tag>(acc[mt][ng], alo.x, ahi.x, alo.y, ahi.y, b[ng].x,
                            b[ng].y);
              Mma16816<Tag>(acc[mt][ng], alo.z, ahi.z, alo.w, ahi.w, b[ng].z,
                            b[ng].w);
            }
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if (mt < active_mt) FoldMax(acc[mt], len - base, t, rowmax[mt]);
      }
    }
  }
};

// Sum over the valid rows (< nrows) of a pass, for a pass whose rows all
// belong to one query. The result is valid in lane 0 (lanes of quad
// position 0 hold it; the others hold 0).
template <int kMT>
__device__ __forceinline__ float SumRowsOneQuery(const float (&rowmax)[kMT][2],
                                                 int nrows) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  float s = 0.f;
  if ((lane & 3) == 0) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if (mt * 16 + g < nrows) s += rowmax[mt][0];
      if (mt * 16 + g + 8 < nrows) s += rowmax[mt][1];
    }
  }
#pragma unroll
  for (int off = 16; off >= 4; off >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, off);
  }
  return s;
}

// Writes the quad-reduced row maxima of a pass to `out` ([16 * kMT] floats,
// this warp's own slice of shared memory). Followed by __syncwarp.
template <int kMT>
__device__ __forceinline__ void StoreRowMax(const float (&rowmax)[kMT][2],
                                            float* out) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  if ((lane & 3) == 0) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      out[mt * 16 + g] = rowmax[mt][0];
      out[mt * 16 + g + 8] = rowmax[mt][1];
    }
  }
  __syncwarp();
}

}  // namespace maxsimd::detail

#endif  // MAXSIMD_KERNELS_DETAIL_MAXSIM_WARP_CUH_
