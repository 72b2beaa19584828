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
//     instructions; at 4 bits, 8 values cost 13.
//   - The centroid term enters as the MMA's initial accumulator: the
//     table of each query row against each centroid, in units of the row's
//     factor (LaunchPlaidQueryCentroids' `units`), read through L2 for the
//     tile's centroids one tile ahead.
//   - The cell is then the row's scale times float(accumulator); its
//     query row's factor multiplies the maximum, once per document.
//   - A document's running maxima stay in registers (per lane, rows g and
//     g + 8) until it ends; then the warp reduces them over its lanes and
//     lane 0 writes the document's score.
// Packed rows are loaded into registers two tiles ahead and table rows one
// tile ahead. The rows' centroid ids and scales come through a per-warp
// ring in shared memory (MetaRing), one coalesced cp.async per 32 rows,
// twelve tiles ahead: the table loads wait on them, and a load issued only
// two tiles earlier was often not back. 16 warps per multiprocessor.
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/mma.cuh"
#include "kernels/detail/tma.cuh"
#include "kernels/maxsim_tma.h"

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
    for (int i = 0; i < (kNbits == 2 ? 1 : 4); ++i) t[i] = w[i];
  }
};

// Decodes one 32-bit word of packed residuals into int8 levels: 2 bits,
// four registers (DimOf's kinds); 4 bits, two.
__device__ __forceinline__ void Decode(const LevelRegs<2>& L, uint32_t w,
                                       uint32_t* out) {
  const uint32_t e = w & 0x33333333u;
  const uint32_t o = (w >> 2) & 0x33333333u;
  out[0] = __byte_perm(L.t[0], 0u, e);
  out[1] = __byte_perm(L.t[0], 0u, e >> 16);
  out[2] = __byte_perm(L.t[0], 0u, o);
  out[3] = __byte_perm(L.t[0], 0u, o >> 16);
}
__device__ __forceinline__ void Decode(const LevelRegs<4>& L, uint32_t w,
                                       uint32_t* out) {
  // Levels of the low three bits from both halves of the table, and a byte
  // mask of the nibbles whose top bit is set (selector 4: 0xff; 0: 0).
  const uint32_t sel = w & 0x77777777u;
  const uint32_t top = (w >> 1) & 0x44444444u;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t s = h == 0 ? sel : sel >> 16;
    const uint32_t lo = __byte_perm(L.t[0], L.t[1], s);
    const uint32_t hi = __byte_perm(L.t[2], L.t[3], s);
    const uint32_t m = __byte_perm(0u, 0xffffffffu, h == 0 ? top : top >> 16);
    out[h] = (lo & ~m) | (hi & m);
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

// A lane's view of its warp's token rows [ta, tb): a pointer at row
// min(ta + g, tb - 1) (its quarter of the packed row) and rows as unsigned
// offsets from there, clamped to the last row so that the loads past the
// end stay in bounds; the ids and scales from row ta, for MetaRing's
// chunks. Offsets and centroid ids widen as unsigned: an address is then
// two instructions (LEA, LEA.HI.X), not five.
template <int kNbits>
struct LaneRows {
  static constexpr int kRowBytes = kDim * kNbits / 8;
  const uint8_t* bits;
  const int32_t* ids;
  const float* scales;
  const int32_t* units;  // the table, at this lane's columns
  uint32_t last;         // tb - 1 - ta
  uint32_t last_g;       // tb - 1 - min(ta + g, tb - 1)

  // Chunk k of the ids and scales into its MetaRing slot, as one group.
  __device__ __forceinline__ void LoadChunk(uint32_t k, uint32_t lane,
                                            MetaRing& ring) const {
    const uint32_t o = min(32 * k + lane, last);
    const uint32_t s = k & (kRing - 1);
    CpAsync4(&ring.id[s][lane], ids + uint64_t{o});
    CpAsync4(&ring.scale[s][lane], scales + uint64_t{o});
    CpAsyncCommit();
  }
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
  // A tile's initial accumulators: the table rows of its centroids, this
  // lane's eight columns (2c + 8t + e, stored together) of rows g, g + 8.
  // One 8-byte load per n-tile and row lands each pair where its MMA reads
  // it (acc[t] = {row g: e = 0, 1; row g + 8: e = 0, 1}), with no moves.
  __device__ __forceinline__ void LoadTable(const int32_t (&id)[2],
                                            int32_t (&acc)[4][4]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int2* src = reinterpret_cast<const int2*>(
          units + uint64_t{static_cast<uint32_t>(id[h])} * kTileRows);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int2 a = __ldg(src + t);
        acc[t][2 * h] = a.x;
        acc[t][2 * h + 1] = a.y;
      }
    }
  }
};

// The lanes' cache of 32 consecutive cu_seqlens entries (the launch's:
// num_docs + 1 of them).
struct CuCache {
  const int64_t* cu;
  int64_t base = -64;
  int64_t v = 0;
  __device__ int64_t Get(int64_t i, int64_t n) {
    if (i < base || i >= base + 32) {
      base = i;
      const int64_t k = min(i + (threadIdx.x & 31), n - 1);
      v = cu[k];
    }
    return __shfl_sync(0xffffffffu, v, static_cast<int>(i - base));
  }
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

// One warp's scan (PlaidScanKernel): its query fragments, its documents
// [j, jb) over rows [ta, tb), and the running maxima of document j.
template <int kNbits>
struct WarpScan {
  static constexpr int kPer = kNbits == 2 ? 4 : 2;  // registers per word
  const TmaLaunchParams& p;
  int lane, g, c;
  uint32_t bq[4][4][2];  // B: [n-tile][k-step][b0, b1]
  LevelRegs<kNbits> levels;
  const BlockQueries& bq_of;  // shared memory
  MetaRing& ring;             // this warp's, in shared memory
  LaneRows<kNbits> lr;
  CuCache cuc;
  int64_t j, jb;
  int32_t doc_end;  // of document j, as a row offset from ta
  int32_t n;        // tb - ta
  float m[4][2];    // running maxima of document j: columns 2c + 8t + e
  // The pipeline: tile i's rows in raw[i % 2] (loaded in step i - 2), its
  // table rows in acc[i % 2] (step i - 1), its ids and scales in MetaRing
  // (chunk i / 2, copied 2 kAhead steps ahead).
  Raw<kNbits> raw[2];
  int32_t acc[2][4][4];

  __device__ WarpScan(const TmaLaunchParams& params, const uint8_t* qsm,
                      const BlockQueries& queries, MetaRing& meta)
      : p(params), levels(params.plaid_levels), bq_of(queries), ring(meta) {
    lane = threadIdx.x & 31;
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

  // Ends document j: the maxima over the warp's lanes, times their rows'
  // factors, summed per 16-row block, written by lane 0; starts j + 1.
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
    const int64_t doc = p.doc_begin + j;
    const bool deleted = p.tombstones != nullptr &&
                         ((p.tombstones[doc >> 5] >> (doc & 31)) & 1u);
    if (lane == 0 && !deleted) {
      auto put = [&](int q, bool writes, float v) {
        float* out = p.scores + int64_t{q} * p.score_stride + j;
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
  // documents are done.
  __device__ __forceinline__ bool Fold(int32_t base, const float (&v)[4][4],
                                       int64_t ta) {
    int lo = 0;  // rows [lo, hi) of the tile belong to document j
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
      if (j >= jb) return false;
      doc_end = static_cast<int32_t>(cuc.Get(j + 1, p.num_docs + 1) -
                                     p.row_base - ta);
      lo = hi;
    }
  }

  // The ids of tile i's rows g and g + 8, from MetaRing.
  __device__ __forceinline__ void Ids(int32_t i, int32_t (&id)[2]) const {
    const int32_t* row = &ring.id[(i >> 1) & (kRing - 1)][(i & 1) * 16 + g];
    id[0] = row[0];
    id[1] = row[8];
  }

  // Tile i (rows 16 i ..), slot kS = i % 2.
  template <int kS>
  __device__ __forceinline__ bool Step(int32_t i, int64_t ta) {
    // Tile i + 1's table rows.
    {
      int32_t id[2];
      Ids(i + 1, id);
      lr.LoadTable(id, acc[kS ^ 1]);
    }
    // The MMAs: A from rows g, g + 8, decoded word by word.
#pragma unroll
    for (int w = 0; w < Raw<kNbits>::kWords; ++w) {
      uint32_t a[kPer], b[kPer];
      Decode(levels, raw[kS].bits[0][w], a);
      Decode(levels, raw[kS].bits[1][w], b);
#pragma unroll
      for (int k = 0; k < kPer / 2; ++k) {
        const int s = (w * kPer) / 2 + k;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          MmaS8(acc[kS][t], a[2 * k], b[2 * k], a[2 * k + 1], b[2 * k + 1],
                bq[t][s][0], bq[t][s][1]);
        }
      }
    }
    const float* scale = &ring.scale[(i >> 1) & (kRing - 1)][kS * 16 + g];
    const float d[2] = {scale[0], scale[8]};
    float v[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        v[t][e] = __int2float_rn(acc[kS][t][e]) * d[e / 2];
      }
    }
    // Tile i + 2's rows into the slot, after its last reader: a load into
    // a register still read would be copied into it later, and that copy
    // waits for the load (the warp would stall a full memory latency per
    // tile).
    lr.LoadRaw(i + 2, raw[kS]);
    return Fold(16 * i, v, ta) && 16 * (i + 1) < n;
  }

  __device__ void Run(const int64_t* cu, int64_t ja, int64_t jb_,
                      const uint8_t* rows, const int32_t* codes,
                      const float* scales, const int32_t* units) {
    cuc = CuCache{cu};
    j = ja;
    jb = jb_;
    const int64_t ta = cuc.Get(ja, p.num_docs + 1) - p.row_base;
    const int64_t tb = cuc.Get(jb, p.num_docs + 1) - p.row_base;
    n = static_cast<int32_t>(tb - ta);
    doc_end =
        static_cast<int32_t>(cuc.Get(j + 1, p.num_docs + 1) - p.row_base - ta);
    if (n > 0) {
      constexpr int kRowBytes = LaneRows<kNbits>::kRowBytes;
      const int32_t row_g = min(g, n - 1);
      lr.bits = rows + (ta + row_g) * kRowBytes + c * (kRowBytes / 4);
      lr.units = units + c * 8;
      lr.ids = codes + ta;
      lr.scales = scales + ta;
      lr.last = n - 1;
      lr.last_g = n - 1 - row_g;
#pragma unroll
      for (int k = 0; k < kAhead; ++k) lr.LoadChunk(k, lane, ring);
      lr.LoadRaw(0, raw[0]);
      lr.LoadRaw(1, raw[1]);
      CpAsyncWaitGroup<kAhead - 1>();  // chunk 0
      __syncwarp();
      {
        int32_t id[2];
        Ids(0, id);
        lr.LoadTable(id, acc[0]);
      }
      for (int32_t k = 0;; ++k) {
        // Chunk k + kAhead into the slot of chunk k - 2, read by every lane
        // before the last iteration's __syncwarp; then chunk k + 1 (the
        // ids of tile 2 k + 2's table rows) is in.
        lr.LoadChunk(k + kAhead, lane, ring);
        CpAsyncWaitGroup<kAhead - 1>();
        __syncwarp();
        if (!Step<0>(2 * k, ta)) break;
        if (!Step<1>(2 * k + 1, ta)) break;
      }
      CpAsyncWaitAll();  // none may land after the block exits
    }
    // Empty documents past the last row (or a warp of only empty ones).
    while (j < jb) Finish();
  }
};

template <int kNbits>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    PlaidScanKernel(const __grid_constant__ TmaLaunchParams p) {
  __shared__ uint8_t qsm[kTileRows * kDim];  // the tile's int8 codes
  __shared__ BlockQueries queries;
  __shared__ MetaRing rings[kWarps];
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
  WarpScan<kNbits> ws(p, qsm, queries, rings[threadIdx.x / 32]);
  ws.Run(cu, ja, jb, static_cast<const uint8_t*>(p.plaid_rows),
         p.codes[p.map_slot], p.scales[p.map_slot],
         p.plaid_units + int64_t{tile} * p.num_centroids * kTileRows);
}

}  // namespace

absl::Status LaunchPlaidScan(const TmaLaunchParams& p, cudaStream_t stream) {
  const int nbits = PlaidNbits(p.dtype);
  if (!PlaidScanApplies(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchPlaidScan: a ", DTypeName(p.dtype), " launch at dim ", p.dim,
        " with ", p.num_tiles,
        " tiles; it takes scans at d = 128, 2 or 4 bits, one tile, with "
        "plaid_rows, plaid_units, codes, scales and q_scales"));
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
