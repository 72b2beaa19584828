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
// An int8 corpus (Int8Widened) reads half the bytes per token: 8-byte loads
// of codes, widened exactly to float16 fragments in registers (WidenI8x4),
// and each cell times its token's scale before the max. The queries are
// float16 rows either way (rounded, or holding their int8 codes exactly,
// whose row scales the caller applies to the row maxima: ScaleRowMax).
//
// Collective preconditions: called by all 32 lanes of a warp with the same
// arguments; `qsm` is the block's pass tile, written and made visible
// (__syncthreads) before the call, and not rewritten until every warp is
// done with it.
#ifndef MAXSIMD_KERNELS_DETAIL_MAXSIM_WARP_CUH_
#define MAXSIMD_KERNELS_DETAIL_MAXSIM_WARP_CUH_

#include <cstdint>
#include <type_traits>

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
  using Mma = typename MmaOperand<Tag>::type;
  // The staged query rows' element type.
  using QueryStorage = typename Mma::Storage;
  static constexpr bool kWiden = std::is_same_v<Tag, Int8Widened>;
  // What one lane loads per 8 elements: 8 codes (int8) or 8 16-bit values.
  using Raw = std::conditional_t<kWiden, uint2, uint4>;
  // Token groups of 8 loaded per step (kNG * kD / 8 registers per buffer,
  // two buffers). With 2 m-tiles the kernel is memory-bound: small groups
  // keep registers under 128 so two blocks fit a multiprocessor (latency
  // hiding across 16 warps). With 8 m-tiles it is bound by the MMAs and
  // their A-fragment loads: larger groups reuse each A fragment more.
  // Int8 codes take half the registers per token, and with 2 m-tiles
  // twice the groups, so that as many bytes are in flight per warp as for
  // 16-bit rows (a warp's loads, not the HBM, bound it otherwise).
  static constexpr int kNG16 =
      kMT == 2 ? (kD >= 256 ? 1 : 2) : ((kD == 0 || kD >= 256) ? 2 : 4);
  static constexpr int kNG = kWiden && kMT == 2 ? 2 * kNG16 : kNG16;
  // Slabs of 32 elements the general path loads before their MMAs.
  static constexpr int kSlabs = 4;
  static constexpr int kJ = kD / 32;
  // Blocks per multiprocessor the register budget is sized for.
  static constexpr int kMinBlocks = kMT == 2 ? 2 : 1;
  // One token group's pieces and (int8) its columns' scales.
  struct Buffer {
    Raw v[kNG][kJ > 0 ? kJ : 1];
    float sc[kWiden ? kNG : 1][2];
  };

  // Scores document `doc` ([len, dim] row-major) against the pass tile.
  // On return, rowmax[mt][h] is max over the document's tokens of
  // <row mt*16 + g + 8h, token> (times the token's scale, scales[token],
  // for an int8 corpus; `scales` is unused otherwise), identical in the 4
  // lanes of a quad; -inf for an empty document. Only m-tiles < active_mt
  // are computed.
  //
  // Fixed widths (kD > 0) software-pipeline the token loads (and scales)
  // one group ahead, also across documents: `next` holds the first group
  // of `doc` on entry (Prefetch), and on return the first group of
  // `next_doc` (if not null), so a warp walking several documents never
  // drains its loads.
  __device__ __forceinline__ static void Prefetch(const Storage* doc,
                                                  const float* scales,
                                                  int64_t len, Buffer& next) {
    if constexpr (kD > 0) {
      const int lane = threadIdx.x & 31;
      if (len > 0) {
        LoadGroupFixed(doc, scales, len, 0, lane >> 2, lane & 3, next);
      }
    }
  }

  __device__ __forceinline__ static void Run(
      const Storage* doc, const float* scales, int64_t len, int dim, int dpad,
      const char* tile, int active_mt, Buffer& next, const Storage* next_doc,
      const float* next_scales, int64_t next_len, float (&rowmax)[kMT][2]) {
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
      RunFixed(doc, scales, len, tile, pitch, active_mt, g, t, next, next_doc,
               next_scales, next_len, rowmax);
    } else {
      RunGeneral(doc, scales, len, dim, dpad, tile, pitch, active_mt, g, t,
                 rowmax);
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
  // 8 elements [e0, e0 + 8) of token row `tok` of `doc` (a fixed width:
  // aligned, in the row).
  __device__ __forceinline__ static Raw LoadRaw(const Storage* doc, int64_t tok,
                                                int row, int e0) {
    if constexpr (kWiden) {
      return LoadStreaming8(doc + tok * row + e0);
    } else {
      return LoadStreaming16(doc + tok * row + e0);
    }
  }

  // A loaded piece as an MMA B fragment: itself, or its codes widened.
  __device__ __forceinline__ static uint4 Fragment(const Raw& r) {
    if constexpr (kWiden) {
      uint4 f;
      WidenI8x4(r.x, f.x, f.y);
      WidenI8x4(r.y, f.z, f.w);
      return f;
    } else {
      return r;
    }
  }

  // The scales of this lane's two columns (tokens base + 8ng + 2t and
  // + 1) of each token group; 0 past the document's end (those columns are
  // never folded).
  __device__ __forceinline__ static void LoadColumnScales(const float* scales,
                                                          int64_t len,
                                                          int64_t base, int t,
                                                          float (&sc)[kNG][2]) {
#pragma unroll
    for (int ng = 0; ng < kNG; ++ng) {
      const int64_t c = base + ng * 8 + 2 * t;
      sc[ng][0] = c < len ? __ldg(scales + c) : 0.f;
      sc[ng][1] = c + 1 < len ? __ldg(scales + c + 1) : 0.f;
    }
  }

  // Cells times their columns' scales (int8 corpora).
  __device__ __forceinline__ static void ScaleColumns(
      float (&acc)[kNG][4], const float (&sc)[kNG][2]) {
#pragma unroll
    for (int ng = 0; ng < kNG; ++ng) {
      acc[ng][0] *= sc[ng][0];
      acc[ng][1] *= sc[ng][1];
      acc[ng][2] *= sc[ng][0];
      acc[ng][3] *= sc[ng][1];
    }
  }

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
                                                        const float* scales,
                                                        int64_t len,
                                                        int64_t base, int g,
                                                        int t, Buffer& b) {
#pragma unroll
    for (int ng = 0; ng < kNG; ++ng) {
      const int64_t tok = base + ng * 8 + g;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        b.v[ng][j] = tok < len ? LoadRaw(doc, tok, kD, 32 * j + 8 * t) : Raw{};
      }
    }
    if constexpr (kWiden) LoadColumnScales(scales, len, base, t, b.sc);
  }

  __device__ __forceinline__ static void RunFixed(
      const Storage* doc, const float* scales, int64_t len, const char* tile,
      int pitch, int active_mt, int g, int t, Buffer& next,
      const Storage* next_doc, const float* next_scales, int64_t next_len,
      float (&rowmax)[kMT][2]) {
    if (len == 0 && next_doc != nullptr && next_len > 0) {
      LoadGroupFixed(next_doc, next_scales, next_len, 0, g, t, next);
    }
    for (int64_t base = 0; base < len; base += 8 * kNG) {
      // Raw pieces, made fragments at each use (int8: widened per m-tile,
      // which costs ALU work the memory-bound shape has to spare, instead
      // of twice the registers).
      const Buffer cur = next;
      // Prefetch the next group so that its loads overlap this group's MMAs.
      if (base + 8 * kNG < len) {
        LoadGroupFixed(doc, scales, len, base + 8 * kNG, g, t, next);
      } else if (next_doc != nullptr && next_len > 0) {
        LoadGroupFixed(next_doc, next_scales, next_len, 0, g, t, next);
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
              const uint4 b = Fragment(cur.v[ng][j]);
              Mma16816<Mma>(acc[ng], alo.x, ahi.x, alo.y, ahi.y, b.x, b.y);
              Mma16816<Mma>(acc[ng], alo.z, ahi.z, alo.w, ahi.w, b.z, b.w);
            }
          }
          if constexpr (kWiden) ScaleColumns(acc, cur.sc);
          FoldMax(acc, len - base, t, rowmax[mt]);
        }
      }
    }
  }

  // Any dim: elements past `dim` read as zero; 16-byte (int8: 8-byte)
  // loads where the row layout allows them, element loads otherwise.
  __device__ __forceinline__ static Raw LoadSlabGeneral(const Storage* doc,
                                                        int64_t tok,
                                                        int64_t len, int dim,
                                                        int e0, bool vec) {
    if (tok >= len) return Raw{};
    if (vec && e0 + 8 <= dim) return LoadRaw(doc, tok, dim, e0);
    using Element =
        std::conditional_t<kWiden, uint8_t, uint16_t>;  // the raw bits
    constexpr int kBits = 8 * sizeof(Element);
    const Element* row = reinterpret_cast<const Element*>(doc) + tok * dim;
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t h = e0 + i < dim ? row[e0 + i] : 0u;
      w[i * kBits / 32] |= h << (i * kBits % 32);
    }
    if constexpr (kWiden) {
      return make_uint2(w[0], w[1]);
    } else {
      return make_uint4(w[0], w[1], w[2], w[3]);
    }
  }

  __device__ __forceinline__ static void RunGeneral(
      const Storage* doc, const float* scales, int64_t len, int dim, int dpad,
      const char* tile, int pitch, int active_mt, int g, int t,
      float (&rowmax)[kMT][2]) {
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
      // The group's scales first (used after all its slabs), then kSlabs
      // slabs' loads before their MMAs, so that several are in flight.
      [[maybe_unused]] float sc[kNG][2];
      if constexpr (kWiden) LoadColumnScales(scales, len, base, t, sc);
      const int slabs = dpad / 32;
      for (int j0 = 0; j0 < slabs; j0 += kSlabs) {
        Raw b[kSlabs][kNG];
#pragma unroll
        for (int sl = 0; sl < kSlabs; ++sl) {
#pragma unroll
          for (int ng = 0; ng < kNG; ++ng) {
            b[sl][ng] = j0 + sl < slabs
                            ? LoadSlabGeneral(doc, base + ng * 8 + g, len, dim,
                                              32 * (j0 + sl) + 8 * t, vec)
                            : Raw{};
          }
        }
#pragma unroll
        for (int sl = 0; sl < kSlabs; ++sl) {
          if (j0 + sl >= slabs) break;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if (mt < active_mt) {
              const char* row_lo =
                  tile + (mt * 16 + g) * pitch + 16 * t + 64 * (j0 + sl);
              const uint4 alo = *reinterpret_cast<const uint4*>(row_lo);
              const uint4 ahi =
                  *reinterpret_cast<const uint4*>(row_lo + 8 * pitch);
#pragma unroll
              for (int ng = 0; ng < kNG; ++ng) {
                const uint4 f = Fragment(b[sl][ng]);
                Mma16816<Mma>(acc[mt][ng], alo.x, ahi.x, alo.y, ahi.y, f.x,
                              f.y);
                Mma16816<Mma>(acc[mt][ng], alo.z, ahi.z, alo.w, ahi.w, f.z,
                              f.w);
              }
            }
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if (mt < active_mt) {
          if constexpr (kWiden) ScaleColumns(acc[mt], sc);
          FoldMax(acc[mt], len - base, t, rowmax[mt]);
        }
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

// Row maxima times their rows' scales (queries quantised like an int8
// corpus's rows): row mt*16 + g + 8h of the pass is row_scales[that], for
// rows < nrows.
template <int kMT>
__device__ __forceinline__ void ScaleRowMax(float (&rowmax)[kMT][2],
                                            const float* row_scales,
                                            int nrows) {
  const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + g + 8 * h;
      if (r < nrows) rowmax[mt][h] *= __ldg(row_scales + r);
    }
  }
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
