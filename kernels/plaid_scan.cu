// The PLAID scan on the int8 MMA at d = 128, 2 and 4 bits (maxsim_tma.h,
// LaunchPlaidScan): a kernel of independent warps, with no shared-memory
// staging of the corpus and no decoded row anywhere but in registers.
//
// Each warp scores a contiguous range of documents holding about
// 1 / (warps in the grid) of the launch's tokens, in tiles of 16 token rows:
//   - Its lanes load the tile's packed residual rows straight into
//     registers: lane (g, c) (g = lane / 4, c = lane % 4) reads quarter c of
//     rows g and g + 8, which is all the mma.sync A fragment of those rows
//     needs, since the k order of the MMA is free: the query's B fragments
//     are built (once per warp) in whatever order the residual bits decode
//     to (DimOf).
//   - The residual bits become int8 levels by byte permutes (PRMT) from a
//     level table held in registers: at 2 bits, 16 values cost 9
//     instructions; at 4 bits, 8 values cost 9, the levels all being
//     non-negative (PlaidMmaLevels) so that a permute in sign mode reads 0.
//   - The centroid term enters as the MMA's initial accumulator: the
//     table of each query row against each centroid, in units of the row's
//     factor (LaunchPlaidQueryCentroids' `units`), read through L2 for the
//     tile's centroids. At 2 bits it is int16 (in units of 2^s factors,
//     widened by a PRMT and an IMAD) and read two tiles ahead; at 4 bits
//     int32, read one tile ahead (PlaidUnitsInt16).
//   - The cell is then the row's scale times float(accumulator); its
//     query row's factor multiplies the maximum, once per document.
//   - A document's running maxima stay in registers (per lane, rows g and
//     g + 8) until it ends; then the warp reduces them over its lanes and
//     lane 0 writes the document's score.
// Packed rows are loaded into registers two tiles ahead. The rows' centroid
// ids and scales come through a per-warp ring in shared memory (MetaRing),
// one coalesced cp.async per 32 rows, twelve tiles ahead: the table loads
// wait on them. 16 warps per multiprocessor.
//
// Instruction selection (bench/NOTES.md s13): the hot loop's masks, shifts
// and permutes are PTX of their own, the lane and the lane's pointers are
// opaque values, and no load stays in flight across the loop's branches
// but those the next tiles read (the compiler otherwise recomputed lane
// addresses from threadIdx every tile, narrowed the decode's masks per
// PRMT, and made every tile's branch wait for a load).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/mma.cuh"
#include "kernels/detail/tma.cuh"
#include "kernels/plaid_scan.h"

namespace maxsimd {
namespace {

using detail::CpAsync4;
using detail::CpAsyncCommit;
using detail::CpAsyncWaitAll;
using detail::CpAsyncWaitGroup;
using detail::MmaS8;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMinBlocks = 2;
constexpr int kTileRows = 32;  // query rows per staged tile
constexpr int kDim = 128;
// Each warp's ring of row metadata (MetaRing): chunks of 32 rows, copied
// kAhead chunks ahead of the one in use.
constexpr int kRing = 8;
constexpr int kAhead = 6;

// The value (0..127) that byte j of A register r (0..7) of quad lane c
// holds, for a row decoded by Decode<kNbits>. Quad lane c holds bytes
// [c * 8 nbits / 2 ...) of the packed row (kernels/plaid_bits.h: value k
// in byte k / (8 / nbits), groups from the byte's most significant end).
template <int kNbits>
__device__ __forceinline__ int DimOf(int c, int r, int j) {
  if constexpr (kNbits == 2) {
    // Register r: word r / 4 of the lane's 8 bytes; kinds 0-3: the even
    // bit pairs (bits 0-1, 4-5 of each byte) of the word's low and high
    // half, then the odd pairs (bits 2-3, 6-7).
    const int word = r / 4, kind = r % 4;
    const int nib = j + 4 * (kind & 1);
    const int byte = 8 * c + 4 * word + nib / 2;
    const int group = kind >= 2 ? (nib % 2 == 0 ? 2 : 0)   // bits 2-3, 6-7
                                : (nib % 2 == 0 ? 3 : 1);  // bits 0-1, 4-5
    return 4 * byte + group;
  } else {
    // Register r: the low (r even) or high half of word r / 2 of the
    // lane's 16 bytes; a byte's low nibble is its second value.
    const int word = r / 2, half = r % 2;
    const int nib = j + 4 * half;
    const int byte = 16 * c + 4 * word + nib / 2;
    return 2 * byte + (nib % 2 == 0 ? 1 : 0);
  }
}

// `x` as a value the compiler's front end cannot see through: it keeps it
// in a register rather than recompute it in the loop (from threadIdx, say).
// The assembler may still recompute a value of the parameters' constant
// bank when registers run short (one of the 4-bit level table's words).
template <typename T>
__device__ __forceinline__ T Opaque(T x) {
  static_assert(sizeof(T) == 8 || sizeof(T) == 4, "a 4 or 8-byte value");
  if constexpr (sizeof(T) == 8) {
    uint64_t v;
    memcpy(&v, &x, 8);
    asm volatile("" : "+l"(v));
    memcpy(&x, &v, 8);
  } else {
    uint32_t v;
    memcpy(&v, &x, 4);
    asm volatile("" : "+r"(v));
    memcpy(&x, &v, 4);
  }
  return x;
}

// The level table in registers, indexed by a group's raw bits (the bucket
// index is stored bit-reversed: kernels/plaid_bits.h).
template <int kNbits>
struct LevelRegs {
  uint32_t t[kNbits == 2 ? 1 : 4];
  __device__ explicit LevelRegs(const int8_t* levels) {
    constexpr int kN = 1 << kNbits;
    uint32_t w[4] = {};
    for (int raw = 0; raw < kN; ++raw) {
      int bucket = 0;
      for (int b = 0; b < kNbits; ++b)
        bucket |= ((raw >> b) & 1) << (kNbits - 1 - b);
      w[raw / 4] |= uint32_t{static_cast<uint8_t>(levels[bucket])}
                    << (8 * (raw % 4));
    }
    // Opaque: the compiler otherwise kept the levels as bytes and packed
    // them again every tile.
    for (int i = 0; i < (kNbits == 2 ? 1 : 4); ++i) t[i] = Opaque(w[i]);
  }
};

// The decode's selectors come from PTX of their own: compiled from C++, each
// mask was narrowed to the 16 bits its PRMT reads and the halves of a word
// masked apart (12 instructions a word at 2 bits instead of 9).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t And(uint32_t x) {
  uint32_t r;
  asm("and.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "n"(kMask));
  return r;
}
template <uint32_t kMask>
__device__ __forceinline__ uint32_t Xor(uint32_t x) {
  uint32_t r;
  asm("xor.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "n"(kMask));
  return r;
}
// PRMT in PTX's own form, whose selector nibbles' top bit is the sign mode
// (the selected byte's top bit, replicated): CUDA's __byte_perm ignores
// that bit and compiles to an AND of 0x7777 before every PRMT.
__device__ __forceinline__ uint32_t Prmt(uint32_t x, uint32_t y, uint32_t s) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(s));
  return r;
}
template <int kShift>
__device__ __forceinline__ uint32_t Shr(uint32_t x) {
  uint32_t r;
  asm("shr.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "n"(kShift));
  return r;
}

// Decodes one 32-bit word of packed residuals into int8 levels: 2 bits,
// four registers (DimOf's kinds); 4 bits, two.
__device__ __forceinline__ void Decode(const LevelRegs<2>& L, uint32_t w,
                                       uint32_t* out) {
  const uint32_t e = And<0x33333333u>(w);
  const uint32_t o = And<0x33333333u>(Shr<2>(w));
  out[0] = Prmt(L.t[0], 0u, e);
  out[1] = Prmt(L.t[0], 0u, Shr<16>(e));
  out[2] = Prmt(L.t[0], 0u, o);
  out[3] = Prmt(L.t[0], 0u, Shr<16>(o));
}
// At 4 bits every level is in [0, 127] (PlaidMmaLevels). A raw group's
// bits are a PRMT selector as they are: its low three bits pick a level
// of the table's half, and its top bit (the half) sets the sign mode, in
// which a level's sign, 0, comes out. So each half of the table gives its
// levels where the group is its and 0 where it is the other's, and their
// OR is the level: 9 instructions per 8 values (13 with a mask of the
// groups' top bits to blend the halves by).
__device__ __forceinline__ void Decode(const LevelRegs<4>& L, uint32_t w,
                                       uint32_t* out) {
  const uint32_t x = Xor<0x88888888u>(w);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t s = h == 0 ? w : Shr<16>(w);
    const uint32_t sx = h == 0 ? x : Shr<16>(x);
    out[h] = Prmt(L.t[0], L.t[1], s) | Prmt(L.t[2], L.t[3], sx);
  }
}

// One tile's packed rows for one lane: its quarter of rows g and g + 8.
template <int kNbits>
struct Raw {
  static constexpr int kWords = kNbits == 2 ? 2 : 4;  // per row
  uint32_t bits[2][kWords];
};

// A warp's centroid ids and scales in shared memory: chunk k (rows
// 32 k .. 32 k + 31 of the warp's rows, tiles 2 k and 2 k + 1) in slot
// k % kRing, one cp.async of 4 bytes per lane and array.
struct MetaRing {
  int32_t id[kRing][32];
  float scale[kRing][32];
};
constexpr uint32_t kSlotBytes = 32 * sizeof(int32_t);
constexpr uint32_t kScaleOffset = kRing * kSlotBytes;  // scale[0] from id[0]
static_assert(offsetof(MetaRing, scale) == kScaleOffset, "MetaRing layout");

// A 4-byte load from shared memory at byte address `addr` + kOffset.
template <typename T, uint32_t kOffset = 0>
__device__ __forceinline__ T LdShared(uint32_t addr) {
  static_assert(sizeof(T) == 4, "a 4-byte value");
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1+%2];"
               : "=r"(v)
               : "r"(addr), "n"(kOffset));
  T x;
  memcpy(&x, &v, 4);
  return x;
}

// A warp's first document and row, in shared memory: the scan's doc
// boundary path reads them, so that no register holds them in the loop.
struct WarpStart {
  int64_t ja;      // first document, relative to doc_begin
  int64_t origin;  // row_base + the warp's first row (ta)
};

// The first j in [0, n) with cu[j] >= target (n: cu[n - 1] >= target),
// by the whole warp, 32 probes a step.
__device__ int64_t LowerBound(const int64_t* cu, int64_t n, int64_t target) {
  const int lane = threadIdx.x & 31;
  int64_t lo = 0, hi = n - 1;  // the answer lies in [lo, hi]
  while (hi > lo) {
    const int64_t step = (hi - lo + 31) / 32;
    const int64_t pos = min(lo + (lane + 1) * step - 1, hi);
    const uint32_t ge = __ballot_sync(0xffffffffu, cu[pos] >= target);
    if (ge == 0) {
      lo = min(lo + 32 * step, hi);
    } else {
      const int f = __ffs(ge) - 1;
      const int64_t at = min(lo + (f + 1) * step - 1, hi);
      lo = f == 0 ? lo : min(lo + f * step, hi);
      hi = at;
    }
  }
  return lo;
}

// The queries of the launch's tile, for every warp of a block: the query
// (or -1) of each 16-row block, whether this launch holds that query's
// first block (it writes the scores; later launches add), and each row's
// factor.
struct BlockQueries {
  int qid[2];
  bool first[2];
  float factor[kTileRows];
};

// One warp's scan (PlaidScanKernel) of its documents [ja, jb) over its rows
// [ta, tb) (n = tb - ta of them): its query fragments, its lane's row
// pointers, and the running maxima of document ja + j.
//
// Addresses: a lane reads rows as unsigned offsets from its pointer at row
// min(ta + g, tb - 1), clamped to the last row so that the loads past the
// end stay in bounds. An address is then one IMAD.WIDE.U32 of a 32-bit
// offset. The ids and scales come in chunks from row ta + lane on, and
// rows past tb are zero-filled rather than read.
template <int kNbits>
struct WarpScan {
  static constexpr int kPer = kNbits == 2 ? 4 : 2;  // registers per word
  static constexpr int kRowBytes = kDim * kNbits / 8;
  static constexpr bool kInt16 = PlaidUnitsInt16(kNbits);
  // Bytes of a table row (32 values), and the offset of a lane's first
  // value in it: int16, its 8 values together; int32, column 2c (natural
  // order, n-tiles 32 bytes apart).
  static constexpr uint32_t kTableRowBytes = kInt16 ? 64 : 128;
  static constexpr uint32_t kTableLaneBytes = kInt16 ? 16 : 8;
  const TmaPlaidMmaArgs& p;
  int lane, g, c;
  uint32_t bq[4][4][2];  // B: [n-tile][k-step][b0, b1]
  LevelRegs<kNbits> levels;
  const BlockQueries& bq_of;  // shared memory
  const uint8_t* bits;        // quarter c of row min(ta + g, tb - 1)
  const int32_t* chunk_ids;   // the next chunk's: row ta + chunk_row
  const float* chunk_scales;  // the same
  uint32_t chunk_row;         // 32 k + lane for the next chunk k
  const char* units;          // the table, at this lane's part of row 0
  uint32_t ring_w;            // this warp's MetaRing: lane's entry of slot 0
  uint32_t ring_r;            // the same, entry g of slot 0
  uint32_t last;              // n - 1
  uint32_t last_g;            // n - 1 - min(g, n - 1)
  const WarpStart& start;     // shared memory
  const int64_t* cu;          // the launch's cu_seqlens (num_docs + 1)
  uint32_t j, jn;             // documents [ja + j, ja + jn) are left
  int32_t doc_end;            // of document ja + j, as a row offset from ta
  // The lanes' cache of the ends of documents ja + cache_base + 1 + lane
  // (32 of them), as row offsets from ta. Refilled every 32 documents; its
  // load is read at once, so none stays in flight across the loop's
  // branches (a load in flight there made every tile's branch wait for it).
  uint32_t cache_base;
  int32_t cache_end;
  int32_t n;      // tb - ta
  float m[4][2];  // running maxima of document ja + j: columns 2c + 8t + e
  // The pipeline: tile i's rows in raw[i % 2] (loaded in step i - 2), its
  // ids and scales in MetaRing (chunk i / 2, copied 2 kAhead steps ahead),
  // and its table rows: int16, in words[i % 2] (loaded in step i - 2) and
  // widened into acc16 at the top of step i; int32, in acc32[i % 2]
  // (loaded in step i - 1), where the MMAs accumulate.
  Raw<kNbits> raw[2];
  uint4 words[2][2];  // [tile % 2][row g, g + 8]: 8 int16 columns each
  int32_t acc16[4][4];
  int32_t unit;  // int16: 2^s (PlaidUnitsShift of the tile's table)
  int32_t acc32[2][4][4];

  __device__ WarpScan(const TmaPlaidMmaArgs& params, const uint8_t* qsm,
                      const BlockQueries& queries, const WarpStart& ws)
      : p(params), levels(params.plaid_levels), bq_of(queries), start(ws) {
    // The lane as the hardware's: the compiler cannot recompute it (nor
    // what derives from it) from threadIdx inside the loop.
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    g = lane >> 2;
    c = lane & 3;
    // B fragments: n-tile t (query rows 8t + g), k-step s: b0 the row's
    // codes at the values of A register 2s, b1 at those of 2s + 1.
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        uint32_t x = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          x |= uint32_t{qsm[(8 * t + g) * kDim + DimOf<kNbits>(c, r, k)]}
               << (8 * k);
        }
        bq[t][r / 2][r % 2] = x;
      }
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) m[t][0] = m[t][1] = -__int_as_float(0x7f800000);
  }

  // Chunk k of the ids and scales into its MetaRing slot, as one group,
  // from chunk_ids / chunk_scales (row 32 k + lane) on; rows past the
  // warp's last are zero-filled, not read (no table or fold reads them).
  __device__ __forceinline__ void LoadChunk(uint32_t k) {
    const uint32_t dst = ring_w + (k % kRing) * kSlotBytes;
    const uint32_t bytes = chunk_row <= last ? 4 : 0;
    CpAsync4(dst, chunk_ids, bytes);
    CpAsync4(dst + kScaleOffset, chunk_scales, bytes);
    CpAsyncCommit();
    chunk_ids += 32;
    chunk_scales += 32;
    chunk_row += 32;
  }
  // Tile i's rows (rows 16 i ..) into r.
  __device__ __forceinline__ void LoadRaw(uint32_t i, Raw<kNbits>& r) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t o = min(16 * i + 8 * h, last_g);
      const uint8_t* src = bits + uint64_t{o} * kRowBytes;
      if constexpr (kNbits == 2) {
        const uint2 v = __ldcs(reinterpret_cast<const uint2*>(src));
        r.bits[h][0] = v.x;
        r.bits[h][1] = v.y;
      } else {
        const uint4 v = __ldcs(reinterpret_cast<const uint4*>(src));
        r.bits[h][0] = v.x;
        r.bits[h][1] = v.y;
        r.bits[h][2] = v.z;
        r.bits[h][3] = v.w;
      }
    }
  }
  // The table rows of the centroids in ring entries `slot` + kOffset (row
  // g) and + 32 (row g + 8), this lane's columns 8t + 2c + e.
  // int16: one 16-byte load per row, the columns as int16 pairs in the
  // order t, e (the four lanes of a row read its 64 bytes at once).
  template <uint32_t kOffset>
  __device__ __forceinline__ void LoadTable(uint32_t slot,
                                            uint4 (&w)[2]) const {
    const uint32_t id[2] = {LdShared<uint32_t, kOffset>(slot),
                            LdShared<uint32_t, kOffset + 32>(slot)};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      w[h] = __ldg(reinterpret_cast<const uint4*>(units + uint64_t{id[h]} *
                                                              kTableRowBytes));
    }
  }
  // int32: one 8-byte load per n-tile and row lands each pair where its
  // MMA reads it (a[t] = {row g: e = 0, 1; row g + 8: e = 0, 1}), with no
  // moves; the four lanes of a row read one 32-byte sector per load.
  template <uint32_t kOffset>
  __device__ __forceinline__ void LoadTable(uint32_t slot,
                                            int32_t (&a)[4][4]) const {
    const uint32_t id[2] = {LdShared<uint32_t, kOffset>(slot),
                            LdShared<uint32_t, kOffset + 32>(slot)};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int2* src = reinterpret_cast<const int2*>(
          units + uint64_t{id[h]} * kTableRowBytes);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int2 v = __ldg(src + 4 * t);
        a[t][2 * h] = v.x;
        a[t][2 * h + 1] = v.y;
      }
    }
  }
  // int16 rows into accumulators: each value sign-extended (PRMT) times
  // 2^s (IMAD, on the FMA pipe, which the loop leaves idle).
  __device__ __forceinline__ void Widen(const uint4 (&w)[2],
                                        int32_t (&a)[4][4]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t x[4] = {w[h].x, w[h].y, w[h].z, w[h].w};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        a[t][2 * h] = static_cast<int32_t>(Prmt(x[t], 0u, 0x9910u)) * unit;
        a[t][2 * h + 1] = static_cast<int32_t>(Prmt(x[t], 0u, 0xBB32u)) * unit;
      }
    }
  }
  // Tile i = 2 k + kS's accumulators, with its table term in them, and the
  // next loads of the table. `cur`, `next`: as for Step.
  template <int kS>
  __device__ __forceinline__ int32_t (&Accumulators(uint32_t cur,
                                                    uint32_t next))[4][4] {
    if constexpr (kInt16) {
      Widen(words[kS], acc16);
      // Tile i + 2's rows, after their slot's last reader: the ids of
      // chunk k + 1's half kS.
      LoadTable<64 * kS>(next, words[kS]);
      return acc16;
    } else {
      // Tile i + 1's rows: the ids of chunk k's second half, or of chunk
      // k + 1's first.
      if constexpr (kS == 0) {
        LoadTable<64>(cur, acc32[1]);
      } else {
        LoadTable<0>(next, acc32[0]);
      }
      return acc32[kS];
    }
  }

  // Ends document ja + j: the maxima over the warp's lanes, times their
  // rows' factors, summed per 16-row block, written by lane 0; starts the
  // next.
  __device__ void Finish() {
    float s[2] = {0.f, 0.f};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float x = m[t][e];
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
        s[t / 2] += bq_of.factor[8 * t + 2 * c + e] * x;
        m[t][e] = -__int_as_float(0x7f800000);
      }
    }
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      s[b] += __shfl_xor_sync(0xffffffffu, s[b], 1);
      s[b] += __shfl_xor_sync(0xffffffffu, s[b], 2);
    }
    const int64_t jd = start.ja + j;  // relative to doc_begin
    const int64_t doc = p.doc_begin + jd;
    const bool deleted = p.tombstones != nullptr &&
                         ((p.tombstones[doc >> 5] >> (doc & 31)) & 1u);
    if (lane == 0 && !deleted) {
      auto put = [&](int q, bool writes, float v) {
        float* out = p.scores + int64_t{q} * p.score_stride + jd;
        *out = writes ? v : *out + v;
      };
      const int* qid = bq_of.qid;
      const bool* first = bq_of.first;
      if (qid[0] >= 0 && qid[0] == qid[1]) {
        put(qid[0], first[0], s[0] + s[1]);
      } else {
        if (qid[0] >= 0) put(qid[0], first[0], s[0]);
        if (qid[1] >= 0) put(qid[1], first[1], s[1]);
      }
    }
    ++j;
  }

  // Folds the tile at row offset base (its cells in v) into the maxima,
  // ending the documents that end in it. Returns false once the warp's
  // documents are done; while it returns true, a document goes on past the
  // tile, so rows are left. The common case, a tile inside a document that
  // goes on, is one comparison.
  __device__ __forceinline__ bool Fold(int32_t base, const float (&v)[4][4]) {
    if (doc_end - base > 16) {
#pragma unroll
      for (int t = 0; t < 4; ++t) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          m[t][e] = fmaxf(m[t][e], fmaxf(v[t][e], v[t][2 + e]));
        }
      }
      return true;
    }
    return FoldEnds(base, v);
  }
  // Fold's tiles where documents end.
  __device__ bool FoldEnds(int32_t base, const float (&v)[4][4]) {
    int lo = 0;  // rows [lo, hi) of the tile belong to document ja + j
    for (;;) {
      const int hi = min(16, doc_end - base);
      if (lo == 0 && hi == 16) {
#pragma unroll
        for (int t = 0; t < 4; ++t) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            m[t][e] = fmaxf(m[t][e], fmaxf(v[t][e], v[t][2 + e]));
          }
        }
      } else {
        const bool in0 = g >= lo && g < hi;
        const bool in1 = g + 8 >= lo && g + 8 < hi;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if (in0) m[t][e] = fmaxf(m[t][e], v[t][e]);
            if (in1) m[t][e] = fmaxf(m[t][e], v[t][2 + e]);
          }
        }
      }
      if (doc_end > base + 16) return true;
      Finish();
      if (j >= jn) return false;
      NextDoc();
      lo = hi;
    }
  }

  // Document ja + j's end, from the lanes' cache.
  __device__ __forceinline__ void NextDoc() {
    if (j - cache_base >= 32) {
      cache_base = j;
      const int64_t k = min(start.ja + j + 1 + lane, p.num_docs);
      cache_end = static_cast<int32_t>(cu[k] - start.origin);
    }
    doc_end =
        __shfl_sync(0xffffffffu, cache_end, static_cast<int>(j - cache_base));
  }

  // Tile i = 2 k + kS (rows 16 i ..), slot kS. `cur`: ring slot k's entry g
  // (the chunk of tiles 2 k and 2 k + 1), `next`: slot k + 1's.
  template <int kS>
  __device__ __forceinline__ bool Step(uint32_t k, uint32_t cur,
                                       uint32_t next) {
    const uint32_t i = 2 * k + kS;
    int32_t(&acc)[4][4] = Accumulators<kS>(cur, next);
    // The MMAs: A from rows g, g + 8, decoded word by word.
#pragma unroll
    for (int w = 0; w < Raw<kNbits>::kWords; ++w) {
      uint32_t a[kPer], b[kPer];
      Decode(levels, raw[kS].bits[0][w], a);
      Decode(levels, raw[kS].bits[1][w], b);
#pragma unroll
      for (int s = 0; s < kPer / 2; ++s) {
        const int ks = (w * kPer) / 2 + s;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          MmaS8(acc[t], a[2 * s], b[2 * s], a[2 * s + 1], b[2 * s + 1],
                bq[t][ks][0], bq[t][ks][1]);
        }
      }
    }
    const float d[2] = {LdShared<float, kScaleOffset + 64 * kS>(cur),
                        LdShared<float, kScaleOffset + 64 * kS + 32>(cur)};
    float v[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        v[t][e] = __int2float_rn(acc[t][e]) * d[e / 2];
      }
    }
    // Tile i + 2's rows into the slot, after its last reader: a load into
    // a register still read would be copied into it later, and that copy
    // waits for the load (the warp would stall a full memory latency per
    // tile).
    LoadRaw(i + 2, raw[kS]);
    return Fold(static_cast<int32_t>(16 * i), v);
  }
  // REQUIRES: start holds ja and the origin of row ta = cu[ja] - row_base.
  // units_: the launch tile's table; unit_: 2^s for an int16 one.
  __device__ void Run(const int64_t* cu_, int64_t ja, int64_t jb,
                      const uint8_t* rows, const int32_t* codes,
                      const float* scales_, const int32_t* units_,
                      int32_t unit_, MetaRing& ring) {
    cu = cu_;
    j = 0;
    jn = static_cast<uint32_t>(jb - ja);
    const int64_t ta = cu[ja] - p.row_base;
    const int64_t tb = cu[jb] - p.row_base;
    n = static_cast<int32_t>(tb - ta);
    cache_base = 0xffffffe0u;  // empty: j - cache_base >= 32
    NextDoc();
    if (n > 0) {
      const int32_t row_g = min(g, n - 1);
      bits = rows + (ta + row_g) * kRowBytes + c * (kRowBytes / 4);
      units =
          Opaque(reinterpret_cast<const char*>(units_) + c * kTableLaneBytes);
      unit = Opaque(unit_);  // a multiplier (IMAD), not a shift (ALU)
      chunk_ids = codes + ta + lane;
      chunk_scales = scales_ + ta + lane;
      chunk_row = lane;
      last = n - 1;
      last_g = n - 1 - row_g;
      ring_w = Opaque(detail::SmemAddr(&ring.id[0][lane]));
      ring_r = Opaque(detail::SmemAddr(&ring.id[0][g]));
#pragma unroll
      for (int k = 0; k < kAhead; ++k) LoadChunk(k);
      LoadRaw(0, raw[0]);
      LoadRaw(1, raw[1]);
      CpAsyncWaitGroup<kAhead - 1>();  // chunk 0
      __syncwarp();
      if constexpr (kInt16) {
        LoadTable<0>(ring_r, words[0]);
        LoadTable<64>(ring_r, words[1]);
      } else {
        LoadTable<0>(ring_r, acc32[0]);
      }
      for (uint32_t k = 0;; ++k) {
        // Chunk k + kAhead into the slot of chunk k - 2, read by every lane
        // before the last iteration's __syncwarp; then chunk k + 1 (the
        // ids of tile 2 k + 2's table rows) is in.
        LoadChunk(k + kAhead);
        CpAsyncWaitGroup<kAhead - 1>();
        __syncwarp();
        const uint32_t cur = ring_r + (k % kRing) * kSlotBytes;
        const uint32_t next = ring_r + ((k + 1) % kRing) * kSlotBytes;
        if (!Step<0>(k, cur, next)) break;
        if (!Step<1>(k, cur, next)) break;
      }
      CpAsyncWaitAll();  // none may land after the block exits
    }
    // Empty documents past the last row (or a warp of only empty ones).
    while (j < jn) Finish();
  }
};

template <int kNbits>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    PlaidScanKernel(const __grid_constant__ TmaPlaidMmaArgs p) {
  __shared__ uint8_t qsm[kTileRows * kDim];  // the tile's int8 codes
  __shared__ BlockQueries queries;
  __shared__ MetaRing rings[kWarps];
  __shared__ WarpStart starts[kWarps];
  const int tile = p.tile_begin;
  if (threadIdx.x < kTileRows) {
    queries.factor[threadIdx.x] =
        p.q_scales[int64_t{tile} * kTileRows + threadIdx.x];
  }
  if (threadIdx.x < 2) {
    const int b = threadIdx.x, gb = 2 * tile + b;
    queries.qid[b] = -1;
    queries.first[b] = false;
    for (int q = p.q_begin; q < p.q_end; ++q) {
      if (gb >= p.query_blocks[q] && gb < p.query_blocks[q + 1]) {
        queries.qid[b] = q;
        queries.first[b] = gb == p.query_blocks[q];
      }
    }
  }
  {
    // Unswizzle the staged tile (maxsim_tma.cu, StageTmaQueryRow: 16-byte
    // chunk k of row r at chunk k ^ (r % 8)).
    const uint8_t* src = static_cast<const uint8_t*>(p.q_tiles) +
                         int64_t{tile} * kTileRows * kDim;
    for (int i = threadIdx.x; i < kTileRows * 8; i += kThreads) {
      const int r = i / 8, k = i % 8;
      *reinterpret_cast<uint4*>(qsm + r * kDim + k * 16) =
          *reinterpret_cast<const uint4*>(src + r * kDim +
                                          ((k ^ (r % 8)) * 16));
    }
  }
  __syncthreads();
  // This warp's documents: those starting in its share of the rows.
  const int64_t* cu = p.cu_seqlens + p.doc_begin;
  const int64_t warp = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  const int64_t nwarps = int64_t{gridDim.x} * kWarps;
  const int64_t t_begin = cu[0];
  const int64_t span = cu[p.num_docs] - t_begin;
  const int64_t ja =
      LowerBound(cu, p.num_docs + 1, t_begin + span * warp / nwarps);
  const int64_t jb = warp + 1 == nwarps
                         ? p.num_docs
                         : LowerBound(cu, p.num_docs + 1,
                                      t_begin + span * (warp + 1) / nwarps);
  if (ja >= jb) return;
  WarpStart& start = starts[threadIdx.x / 32];
  if ((threadIdx.x & 31) == 0) {
    start.ja = ja;
    start.origin = cu[ja];
  }
  __syncwarp();
  const int32_t unit = PlaidUnitsInt16(kNbits)
                           ? 1 << PlaidUnitsShift(p.plaid_units_max[tile])
                           : 1;
  WarpScan<kNbits> ws(p, qsm, queries, start);
  ws.Run(cu, ja, jb, static_cast<const uint8_t*>(p.plaid_rows),
         p.codes[p.map_slot], p.scales[p.map_slot],
         p.plaid_units + int64_t{tile} * p.num_centroids * kTileRows, unit,
         rings[threadIdx.x / 32]);
}

}  // namespace

absl::Status LaunchPlaidScan(const TmaPlaidMmaArgs& p, cudaStream_t stream) {
  const int nbits = PlaidNbits(p.dtype);
  if (!PlaidScanApplies(p) || p.codes == nullptr || p.scales == nullptr ||
      p.q_scales == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchPlaidScan: a ", DTypeName(p.dtype), " launch at dim ", p.dim,
        " with ", p.num_tiles,
        " tiles; it takes scans at d = 128, 2 or 4 bits, one tile, with "
        "plaid_rows, plaid_units (at 2 bits, plaid_units_max), codes, scales "
        "and q_scales"));
  }
  if (nbits == 4 &&
      std::any_of(std::begin(p.plaid_levels), std::end(p.plaid_levels),
                  [](int8_t level) { return level < 0; })) {
    return absl::InvalidArgumentError(
        "LaunchPlaidScan: a 4-bit launch with a negative level; it takes "
        "levels in [0, 127] (PlaidMmaLevels)");
  }
  if (p.num_docs <= 0) return absl::OkStatus();
  int device = 0, sm_count = 0;
  MAXSIMD_CUDA_CHECK(cudaGetDevice(&device));
  MAXSIMD_CUDA_CHECK(cudaDeviceGetAttribute(
      &sm_count, cudaDevAttrMultiProcessorCount, device));
  const unsigned grid = static_cast<unsigned>(sm_count * kMinBlocks);
  if (nbits == 2) {
    PlaidScanKernel<2><<<grid, kThreads, 0, stream>>>(p);
  } else {
    PlaidScanKernel<4><<<grid, kThreads, 0, stream>>>(p);
  }
  MAXSIMD_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace maxsimd
