// The decode policies of the Hopper MaxSim kernel (maxsim_tma_kernel.cuh):
// one type per corpus layout, holding everything the kernel does
// differently for it. TmaBlock<Decode, kDP, kWG> is the pipeline (producer,
// widening warps, consumers, epilogue); it asks the policy
//   - its shape's knobs (kI8, kPlaidBits, kS8: TmaShape), its MMA operand
//     tag and accumulator type, and its launch parameters' layout part
//     (Layout, maxsim_tma.h);
//   - BuildTables: shared tables built once per block (PLAID: residual
//     byte -> bucket values);
//   - CopyRowData: the producer's per-row side data of a chunk (scales,
//     centroid ids), beside the copy engine's rows;
//   - WidenChunk: the widening warps' work on one chunk (widened layouts:
//     compressed rows -> the MMA's operand stage);
//   - ScaleCells, RowScales, ScaleRowMaxima: the epilogue's scaling of
//     cells (by column) and of row maxima (by query row).
//
// Adding a layout means a policy here, its layout part in maxsim_tma.h, its
// instantiation file (maxsim_tma_<layout>.cu) and its dispatch entry in
// maxsim_tma.cu (kernels/README.md, "Adding a layout").
#ifndef MAXSIMD_KERNELS_DETAIL_TMA_DECODE_CUH_
#define MAXSIMD_KERNELS_DETAIL_TMA_DECODE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/detail/mma.cuh"
#include "kernels/detail/tma.cuh"
#include "kernels/maxsim_tma.h"

namespace maxsimd::detail {

struct TmaChunkHeader;  // maxsim_tma_kernel.cuh

// PLAID: the residual table, by the whole block: entry b holds
// value_of(bucket) for the 8 / nbits values of residual byte b, in value
// order (kernels/plaid_bits.h gives the bit order).
template <int kNbits, typename T, typename F>
__device__ __forceinline__ void BuildPlaidLut(T* lut, F value_of) {
  constexpr int kPerByte = 8 / kNbits;
  for (int i = threadIdx.x; i < 256 * kPerByte; i += blockDim.x) {
    const int byte = i / kPerByte;
    const int top = 7 - (i % kPerByte) * kNbits;
    int bucket = 0;
    for (int t = 0; t < kNbits; ++t) bucket |= ((byte >> (top - t)) & 1) << t;
    lut[i] = value_of(bucket);
  }
}

// What the policies share: no tables, no row data, no widening, cells and
// row maxima as they are. A policy derives from it and replaces what its
// layout needs.
struct TmaDecodeBase {
  static constexpr bool kI8 = false;
  static constexpr int kPlaidBits = 0;
  static constexpr bool kS8 = false;
  // The widening warps index each chunk (IndexMasks, IndexParts) instead
  // of the producer.
  static constexpr bool kWidenerIndex = false;
  // Chunks carry per-row data the producer copies (CopyRowData).
  static constexpr bool kRowData = false;

  template <typename P>
  __device__ __forceinline__ static void BuildTables(uint8_t*, const P&) {}

  template <typename B>
  __device__ __forceinline__ static void CopyRowData(B&, uint32_t, int, int,
                                                     int, int64_t, int) {}

  // Not widened: the widening warps do not exist.
  template <typename B>
  __device__ __forceinline__ static void WidenChunk(B&, int, uint32_t, uint8_t*,
                                                    float*, TmaChunkHeader*,
                                                    int, int) {}

  template <typename S, int kCols, int kI0, int kI1, typename A>
  __device__ __forceinline__ static void ScaleCells(A (&)[kCols / 2],
                                                    const float*,
                                                    const uint32_t*, int, float,
                                                    float) {}

  template <typename P>
  __device__ __forceinline__ static void RowScales(const P&, int, float& qs0,
                                                   float& qs1) {
    qs0 = 1.f;
    qs1 = 1.f;
  }

  __device__ __forceinline__ static void ScaleRowMaxima(float&, float&, float,
                                                        float) {}
};

// Shared by the scaled policies: the fp32 scale of every staged query row,
// where the launch has them (q_scales), else 1.
struct TmaQueryRowScales {
  template <typename P>
  __device__ __forceinline__ static void RowScales(const P& p, int at,
                                                   float& qs0, float& qs1) {
    qs0 = 1.f;
    qs1 = 1.f;
    if (p.q_scales != nullptr) {
      qs0 = __ldg(p.q_scales + at);
      qs1 = __ldg(p.q_scales + at + 8);
    }
  }
};

// The float16-widened layouts' epilogue: each column (a document token)
// times its token's scale (column j of the pass is sc[j]), in 8-column
// blocks [kI0, kI1).
struct TmaFloatColumnScales {
  template <typename S, int kCols, int kI0, int kI1>
  __device__ __forceinline__ static void ScaleCells(float (&acc)[kCols / 2],
                                                    const float* sc,
                                                    const uint32_t*, int, float,
                                                    float) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int i = kI0; i < kI1; ++i) {
      const float2 f = *reinterpret_cast<const float2*>(sc + 8 * i + 2 * t);
      acc[4 * i] *= f.x;
      acc[4 * i + 1] *= f.y;
      acc[4 * i + 2] *= f.x;
      acc[4 * i + 3] *= f.y;
    }
  }
};

// The widening warps' store of one row's 16-value piece column c (values
// 16c .. 16c + 7 in lo, 16c + 8 .. 16c + 15 in hi) into its 128-byte line
// of a float16 stage: piece j of a row lies at slot (j % 8) ^ x, x = the
// row % 8. Pieces 2c and 2c + 1 share a line; lanes whose line index is
// odd (swap) store the second first, so that the eight lanes of a store
// phase hit eight different bank groups.
__device__ __forceinline__ void StorePieces(uint8_t* line, int c, int x,
                                            bool swap, const uint4& lo,
                                            const uint4& hi) {
  const int p0 = ((2 * c) & 7) ^ x, p1 = ((2 * c + 1) & 7) ^ x;
  *reinterpret_cast<uint4*>(line + (swap ? p1 : p0) * 16) = swap ? hi : lo;
  *reinterpret_cast<uint4*>(line + (swap ? p0 : p1) * 16) = swap ? lo : hi;
}

// The scales (and, with ids, the centroid ids) of n rows of slot `slot`
// from segment row `row` into chunk columns [col, col + n).
template <bool kIds, typename B>
__device__ __forceinline__ void CopyScalesAndIds(B& b, uint32_t c, int s,
                                                 int col, int slot, int64_t row,
                                                 int n) {
  b.CopyScales(B::ScaleSlot(c), col, b.p.scales[slot] + row, n);
  if constexpr (kIds) b.CopyCodes(s, col, b.p.codes[slot] + row, n);
}

// The producer's per-row data of the scaled layouts: each row's scale,
// and with kIds its centroid id (CopyScalesAndIds).
template <bool kIds>
struct TmaRowScalesData {
  static constexpr bool kRowData = true;
  template <typename B>
  __device__ __forceinline__ static void CopyRowData(B& b, uint32_t c, int s,
                                                     int col, int slot,
                                                     int64_t row, int n) {
    CopyScalesAndIds<kIds>(b, c, s, col, slot, row, n);
  }
};

// Row maxima times the query row's scale (quantised queries).
struct TmaScaledRowMaxima {
  __device__ __forceinline__ static void ScaleRowMaxima(float& m0, float& m1,
                                                        float qs0, float qs1) {
    m0 *= qs0;
    m1 *= qs1;
  }
};

// ---- float16 and bfloat16: the copy engine's rows are the operands.
template <typename Tag>
struct DenseDecode : TmaDecodeBase {
  using Layout = TmaDenseLayout;
  using MmaTag = Tag;
  using Acc = float;
};

// ---- int8: widened exactly to float16 in shared memory, cells times their
// columns' scales, row maxima times a quantised query's row scales.
struct Int8Decode : TmaDecodeBase,
                    TmaRowScalesData<false>,
                    TmaQueryRowScales,
                    TmaFloatColumnScales,
                    TmaScaledRowMaxima {
  using Layout = TmaInt8Layout;
  using MmaTag = Fp16;
  using Acc = float;
  static constexpr bool kI8 = true;
  using TmaRowScalesData<false>::kRowData;
  using TmaRowScalesData<false>::CopyRowData;
  using TmaFloatColumnScales::ScaleCells;
  using TmaQueryRowScales::RowScales;
  using TmaScaledRowMaxima::ScaleRowMaxima;

  // Widens int8 stage s into the float16 stage `out` (the 128-byte swizzle
  // layout the copy engine writes for float16 corpora) and copies its
  // scales to `to`.
  template <typename B>
  __device__ static void WidenChunk(B& b, int s, uint32_t, uint8_t* out,
                                    float* to, TmaChunkHeader*, int, int) {
    using S = typename B::S;
    constexpr int kPerRow = S::kDPad / 16;  // 16-byte pieces per int8 row
    // Each thread keeps one piece column c of rows r0, r0 + kRowStep, ...:
    // its addresses move by constants from pass to pass.
    static_assert(S::kWideners % kPerRow == 0, "whole rows per pass");
    constexpr int kRowStep = S::kWideners / kPerRow;
    static_assert(S::kN % kRowStep == 0, "whole passes");
    const int tid = threadIdx.x - (S::kConsumers + 32);
    const int c = tid % kPerRow;  // k = 16c .. 16c + 15
    const int r0 = tid / kPerRow;
    const uint8_t* src = b.i8sm + s * S::kI8StageBytes + tid * 16;
    // 16-byte piece j of a float16 row lies in 128-byte line j / 8 of its
    // part (StorePieces).
    uint8_t* base = out + (c / 4) * S::kHalfStageBytes + r0 * 128;
    const bool swap = (c / 4) & 1;
#pragma unroll 4
    for (int k = 0; k < S::kN / kRowStep; ++k) {
      const int x = kRowStep % 8 == 0 ? (r0 & 7) : ((r0 + k * kRowStep) & 7);
      const uint4 v =
          *reinterpret_cast<const uint4*>(src + k * S::kWideners * 16);
      uint4 lo, hi;  // k 16c .. 16c + 7 and 16c + 8 .. 16c + 15
      WidenI8x4(v.x, lo.x, lo.y);
      WidenI8x4(v.y, lo.z, lo.w);
      WidenI8x4(v.z, hi.x, hi.y);
      WidenI8x4(v.w, hi.z, hi.w);
      StorePieces(base + k * kRowStep * 128, c, x, swap, lo, hi);
    }
    b.CopyWideScales(s, to);
  }
};

// ---- int8 with quantised queries (widths 128 and 256): both operands are
// int8 codes, read by the int8 MMA where the copy engine lands them (the
// block of the float16 width dim / 2); each int32 cell becomes fp32 times
// its column's scale, row maxima times the row's scale.
struct Int8MmaDecode : TmaDecodeBase,
                       TmaRowScalesData<false>,
                       TmaQueryRowScales,
                       TmaScaledRowMaxima {
  using Layout = TmaInt8Layout;
  using MmaTag = Int8Mma;
  using Acc = int32_t;
  static constexpr bool kS8 = true;
  using TmaRowScalesData<false>::kRowData;
  using TmaRowScalesData<false>::CopyRowData;
  using TmaQueryRowScales::RowScales;
  using TmaScaledRowMaxima::ScaleRowMaxima;

  // Each int32 cell becomes fp32 times its column's scale (column j of the
  // pass is sc[j]), left in place as fp32 bits (TmaBlock::Cell reads them).
  template <typename S, int kCols, int kI0, int kI1>
  __device__ __forceinline__ static void ScaleCells(int32_t (&acc)[kCols / 2],
                                                    const float* sc,
                                                    const uint32_t*, int, float,
                                                    float) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int i = kI0; i < kI1; ++i) {
      const float2 g = *reinterpret_cast<const float2*>(sc + 8 * i + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[4 * i + e] = __float_as_int(__int2float_rn(acc[4 * i + e]) *
                                        (e % 2 == 0 ? g.x : g.y));
      }
    }
  }
};

// ---- PLAID of kNbits-bit residuals, decoded to float16: the widening warps
// add each piece's centroid (float16, from the codec table in global memory,
// L2-resident) and its residuals' bucket weights (a shared table: byte value ->
// 8 / nbits float16 weights); the epilogue scales the columns as for int8.
template <int kNbits>
struct PlaidDecode : TmaDecodeBase,
                     TmaRowScalesData<true>,
                     TmaFloatColumnScales {
  using Layout = TmaPlaidLayout;
  using MmaTag = Fp16;
  using Acc = float;
  static constexpr int kPlaidBits = kNbits;
  using TmaRowScalesData<true>::kRowData;
  using TmaRowScalesData<true>::CopyRowData;
  using TmaFloatColumnScales::ScaleCells;

  template <typename P>
  __device__ __forceinline__ static void BuildTables(uint8_t* lut, const P& p) {
    BuildPlaidLut<kNbits>(reinterpret_cast<uint16_t*>(lut), [&p](int b) {
      return __half_as_ushort(__float2half_rn(p.bucket_weights[b]));
    });
  }

  __device__ __forceinline__ static uint32_t Hadd2(uint32_t a, uint32_t b) {
    const __half2 r = __hadd2(*reinterpret_cast<const __half2*>(&a),
                              *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  }

  // The bucket weights of 16 values (2 * nbits residual bytes at src) as
  // eight float16x2 words, from the residual table.
  __device__ __forceinline__ static void Residuals(const uint16_t* lut,
                                                   const uint8_t* src,
                                                   uint32_t (&w)[8]) {
    if constexpr (kNbits == 1) {
      const uint32_t x = *reinterpret_cast<const uint16_t*>(src);
      const uint4 a = reinterpret_cast<const uint4*>(lut)[x & 0xff];
      const uint4 b = reinterpret_cast<const uint4*>(lut)[x >> 8];
      w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
      w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    } else if constexpr (kNbits == 2) {
      const uint32_t x = *reinterpret_cast<const uint32_t*>(src);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint2 e =
            reinterpret_cast<const uint2*>(lut)[(x >> (8 * i)) & 0xff];
        w[2 * i] = e.x;
        w[2 * i + 1] = e.y;
      }
    } else if constexpr (kNbits == 4) {
      const uint2 x = *reinterpret_cast<const uint2*>(src);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        w[i] = reinterpret_cast<const uint32_t*>(lut)[(x.x >> (8 * i)) & 0xff];
        w[4 + i] =
            reinterpret_cast<const uint32_t*>(lut)[(x.y >> (8 * i)) & 0xff];
      }
    } else {
      const uint4 x = *reinterpret_cast<const uint4*>(src);
      const uint32_t v[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t word = v[i / 2] >> (16 * (i % 2));
        w[i] = uint32_t{lut[word & 0xff]} |
               (uint32_t{lut[(word >> 8) & 0xff]} << 16);
      }
    }
  }

  // Decodes compressed stage s into the float16 stage `out` (the layout
  // Int8Decode writes) and copies its scales to `to`. Each thread keeps one
  // 16-value piece column c, as there: per piece, the centroid id from
  // shared memory, the centroid's 16 float16 values from the codec table
  // (two 16-byte loads, L2-resident), plus the residuals. The ids of rows
  // past the chunk's tokens are stale: they are clamped into the table and
  // their columns are never read by the epilogue.
  template <typename B>
  __device__ static void WidenChunk(B& b, int s, uint32_t, uint8_t* out,
                                    float* to, TmaChunkHeader*, int, int) {
    using S = typename B::S;
    constexpr int kDP = S::kDPad;
    constexpr int kPerRow = kDP / 16;
    static_assert(S::kWideners % kPerRow == 0, "whole rows per pass");
    constexpr int kRowStep = S::kWideners / kPerRow;
    static_assert(S::kN % kRowStep == 0, "whole passes");
    constexpr int kPieceBytes = 2 * kNbits;
    const int tid = threadIdx.x - (S::kConsumers + 32);
    const int c = tid % kPerRow;
    const int r0 = tid / kPerRow;
    const uint8_t* res =
        b.i8sm + s * S::kI8StageBytes + r0 * S::kRawRowBytes + c * kPieceBytes;
    const int32_t* ids = b.codesm + s * S::kN + r0;
    const uint16_t* cent = b.p.centroids_f16 + c * 16;
    const uint32_t last = static_cast<uint32_t>(b.p.num_centroids - 1);
    uint8_t* base = out + (c / 4) * S::kHalfStageBytes + r0 * 128;
    const bool swap = (c / 4) & 1;
#pragma unroll 4
    for (int k = 0; k < S::kN / kRowStep; ++k) {
      const int x = kRowStep % 8 == 0 ? (r0 & 7) : ((r0 + k * kRowStep) & 7);
      const uint32_t id = min(static_cast<uint32_t>(ids[k * kRowStep]), last);
      const uint4* cp =
          reinterpret_cast<const uint4*>(cent + static_cast<int64_t>(id) * kDP);
      const uint4 c0 = __ldg(cp), c1 = __ldg(cp + 1);
      uint32_t r[8];
      Residuals(b.lut, res + k * kRowStep * S::kRawRowBytes, r);
      uint4 lo, hi;
      lo.x = Hadd2(c0.x, r[0]);
      lo.y = Hadd2(c0.y, r[1]);
      lo.z = Hadd2(c0.z, r[2]);
      lo.w = Hadd2(c0.w, r[3]);
      hi.x = Hadd2(c1.x, r[4]);
      hi.y = Hadd2(c1.y, r[5]);
      hi.z = Hadd2(c1.z, r[6]);
      hi.w = Hadd2(c1.w, r[7]);
      StorePieces(base + k * kRowStep * 128, c, x, swap, lo, hi);
    }
    b.CopyWideScales(s, to);
  }
};

// ---- PLAID on the int8 MMA (d = 128, one warpgroup): each cell is split as q
// . (C[id] + r) = (q . C)[id] + q . r. The widening warps fetch each token's
// row of the query-centroid table (the first term) and widen the residuals to
// their int8 levels, which the int8 MMA scores against the quantised query
// rows; the epilogue combines the two per cell with the row factors and the
// column scales.
template <int kNbits>
struct PlaidMmaDecode : TmaDecodeBase,
                        TmaRowScalesData<true>,
                        TmaQueryRowScales {
  using Layout = TmaPlaidMmaLayout;
  using MmaTag = Int8Mma;
  using Acc = int32_t;
  static constexpr int kPlaidBits = kNbits;
  static constexpr bool kS8 = true;
  using TmaRowScalesData<true>::kRowData;
  using TmaRowScalesData<true>::CopyRowData;
  // At 1 and 2 bits, whose producer bounded the scans, the widening warps
  // index each chunk. At 4 bits, where they have twice the residuals to
  // widen, it measured no faster (bench/NOTES.md, s9).
  static constexpr bool kWidenerIndex = kNbits < 4;
  using TmaQueryRowScales::RowScales;

  template <typename P>
  __device__ __forceinline__ static void BuildTables(uint8_t* lut, const P& p) {
    // The buckets' int8 levels.
    BuildPlaidLut<kNbits>(reinterpret_cast<int8_t*>(lut),
                          [&p](int b) { return p.plaid_levels[b]; });
  }

  // The int8 levels of 16 values (2 * nbits residual bytes at src) as one
  // 16-byte piece, value k in byte k, from the level table (residual byte
  // -> its 8 / nbits levels).
  __device__ __forceinline__ static uint4 Levels(const uint16_t* lut,
                                                 const uint8_t* src) {
    const uint8_t* table = reinterpret_cast<const uint8_t*>(lut);
    if constexpr (kNbits == 1) {
      const uint32_t x = *reinterpret_cast<const uint16_t*>(src);
      const uint2 a = reinterpret_cast<const uint2*>(table)[x & 0xff];
      const uint2 b = reinterpret_cast<const uint2*>(table)[x >> 8];
      return make_uint4(a.x, a.y, b.x, b.y);
    } else if constexpr (kNbits == 2) {
      const uint32_t x = *reinterpret_cast<const uint32_t*>(src);
      const uint32_t* w = reinterpret_cast<const uint32_t*>(table);
      return make_uint4(w[x & 0xff], w[(x >> 8) & 0xff], w[(x >> 16) & 0xff],
                        w[x >> 24]);
    } else {
      static_assert(kNbits == 4, "PlaidMma serves 1, 2 and 4 bits");
      const uint2 x = *reinterpret_cast<const uint2*>(src);
      const uint16_t* h = reinterpret_cast<const uint16_t*>(table);
      auto two = [h](uint32_t w) {
        return uint32_t{h[w & 0xff]} | (uint32_t{h[(w >> 8) & 0xff]} << 16);
      };
      return make_uint4(two(x.x), two(x.x >> 16), two(x.y), two(x.y >> 16));
    }
  }

  // Has each token's row of the query-centroid table (the block's tile,
  // the token's centroid) of compressed stage s copied to the table slot
  // `qc_to` (16-byte cp.async, four lanes per row; the caller waits with
  // CpAsyncWaitAll). The ids of rows past the chunk's tokens are clamped
  // into the table (their columns are never read).
  template <typename B>
  __device__ __forceinline__ static void FetchTable(const B& b, int s,
                                                    uint8_t* qc_to) {
    using S = typename B::S;
    const int tid = threadIdx.x - (S::kConsumers + 32);
    const int32_t* ids = b.codesm + s * S::kN;
    const uint32_t last = static_cast<uint32_t>(b.p.num_centroids - 1);
    const uint8_t* table = reinterpret_cast<const uint8_t*>(b.p.plaid_qc) +
                           static_cast<int64_t>(b.ta) * b.p.num_centroids * 64;
    for (int i = tid; i < S::kN * 4; i += S::kWideners) {
      const uint32_t id = min(static_cast<uint32_t>(ids[i / 4]), last);
      CpAsync16(qc_to + (i / 4) * S::kQcStride + (i % 4) * 16,
                table + static_cast<int64_t>(id) * 64 + (i % 4) * 16);
    }
  }

  // Widens compressed stage s into the int8 stage `out` (the 128-byte
  // swizzle layout the copy engine writes for Int8Mma rows). Each thread
  // keeps one 16-value piece column c of rows r0, r0 + kRowStep, ..., as in
  // Int8Decode.
  template <typename B>
  __device__ static void DecodeLevels(const B& b, int s, uint8_t* out) {
    using S = typename B::S;
    constexpr int kPerRow = S::kDim / 16;
    static_assert(S::kWideners % kPerRow == 0, "whole rows per pass");
    constexpr int kRowStep = S::kWideners / kPerRow;
    static_assert(S::kN % kRowStep == 0, "whole passes");
    const int tid = threadIdx.x - (S::kConsumers + 32);
    const int c = tid % kPerRow;
    const int r0 = tid / kPerRow;
    const uint8_t* res =
        b.i8sm + s * S::kI8StageBytes + r0 * S::kRawRowBytes + c * 2 * kNbits;
    uint8_t* base = out + (c / 8) * S::kHalfStageBytes + r0 * 128;
#pragma unroll 4
    for (int k = 0; k < S::kN / kRowStep; ++k) {
      const int r = r0 + k * kRowStep;
      const uint4 v = Levels(b.lut, res + k * kRowStep * S::kRawRowBytes);
      *reinterpret_cast<uint4*>(base + k * kRowStep * 128 +
                                ((c % 8) ^ (r & 7)) * 16) = v;
    }
  }

  // The chunk's table rows (FetchTable), its levels (DecodeLevels) and
  // scales, and its index (kWidenerIndex: widening warps 0 and 1) while
  // the rows are on the way.
  template <typename B>
  __device__ __forceinline__ static void WidenChunk(B& b, int s, uint32_t c,
                                                    uint8_t* out, float* to,
                                                    TmaChunkHeader* h, int nseg,
                                                    int warp) {
    using S = typename B::S;
    FetchTable(b, s, b.qcsm + (c % S::kQcSlots) * S::kQcBytes);
    DecodeLevels(b, s, out);
    b.CopyWideScales(s, to);
    if constexpr (kWidenerIndex) {
      if (warp == 0) b.IndexMasks(h, nseg);
      if (warp == 1) b.IndexParts(h, nseg);
    }
    CpAsyncWaitAll();
  }

  // Each int32 cell becomes fp32 scale * (centroid term + row factor *
  // cell), left in place as fp32 bits (TmaBlock::Cell reads them). Column
  // j of the chunk has scale sc[j] and table row qc + j * kQcStride / 4;
  // this lane's rows (g, g + 8) are the table's pair `pair` and have the
  // row factors a0, a1 (the query row's int8 scale times the levels'
  // step).
  template <typename S, int kCols, int kI0, int kI1>
  __device__ __forceinline__ static void ScaleCells(int32_t (&acc)[kCols / 2],
                                                    const float* sc,
                                                    const uint32_t* qc,
                                                    int pair, float a0,
                                                    float a1) {
    constexpr int kQcWords = S::kQcStride / 4;
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int i = kI0; i < kI1; ++i) {
      const float2 g = *reinterpret_cast<const float2*>(sc + 8 * i + 2 * t);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uint32_t w = qc[(8 * i + 2 * t + e) * kQcWords + pair];
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w));
        const float ge = e == 0 ? g.x : g.y;
        acc[4 * i + e] =
            __float_as_int(fmaf(a0, __int2float_rn(acc[4 * i + e]), f.x) * ge);
        acc[4 * i + 2 + e] = __float_as_int(
            fmaf(a1, __int2float_rn(acc[4 * i + 2 + e]), f.y) * ge);
      }
    }
  }
};

}  // namespace maxsimd::detail

#endif  // MAXSIMD_KERNELS_DETAIL_TMA_DECODE_CUH_
