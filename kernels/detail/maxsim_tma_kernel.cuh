// The Hopper MaxSim kernel (launcher: maxsim_tma.h).
//
// Tall-GEMM view: stacked query rows (M) x document tokens (N), k = the
// embedding, with a max over each document's tokens and a sum over each
// query's rows as the epilogue.
//
// Block = kWG consumer warpgroups + 1 producer warp. The producer walks the
// block's work unit (a contiguous range of documents, or a list of candidate
// records) and cuts the token stream into chunks of up to kN tokens: a scan
// chunk is a contiguous token range that may hold several documents; a
// gather chunk packs record pieces at 16-row boundaries. For every chunk it
// writes a small header (the document segments: column range, output index,
// starts / ends here) and has the copy engine load the chunk's rows in
// 16- or 64-row boxes of the 128-byte swizzle layout into a ring of kStages
// shared buffers. Query tiles (kTileRows rows) are pre-swizzled by the host and
// arrive by plain bulk copies: loaded once when they fit the per-warpgroup
// ring, else streamed again for every chunk.
//
// The producer also indexes each chunk once for all its query tiles: which
// segments each 128-column part holds, and each segment's column masks.
//
// Consumers: warpgroup w takes tiles w, w + kWG, ... of every chunk; one
// wgmma chain per 128-column part (k = kDP) leaves its 64 x 128 scores in
// registers, two accumulators in turn, so that the next part's MMA runs
// during this part's epilogue. The epilogue takes, per document segment,
// the max over its columns (quad shuffles), folds in the carry of a
// document that began in an earlier chunk (per-row running maxima in shared
// memory), and for a document that ends in this chunk writes each warp's
// 16-row sum to a small table. After a barrier of all consumers, the table
// is summed per query (fixed order: deterministic) and written to the
// scores. For an int8 corpus with quantised queries at d = 128 (one
// warpgroup, 32-row tiles), the tile is staged twice so that all four
// warps share the epilogue, each taking half of the columns
// (TmaShape::kColSplit).
//
// Int8 corpora (Int8Decode; the policies are in tma_decode.cuh): the copy
// engine brings int8 rows (unswizzled) and their fp32 scales into a ring of
// their own; at the start of each chunk the consumers widen it, exactly, into
// one float16 stage of the layout above and release the int8 stage, so the MMAs
// and the segment index are the float16 kernel's. The epilogue multiplies each
// cell by its column's scale before the max, and a quantised query's row maxima
// by the row's scale (kernels/backend.h gives the formulas).
//
// Int8 corpora with quantised queries (Int8MmaDecode, widths 128 and 256)
// need no widening: both operands are int8 codes, so the copy engine brings
// the rows as it does float16 rows of half the width (the same bytes, the
// same 128-byte swizzle) and the int8 MMA (k = 32, so a k-step spans the
// same 32 bytes) reads them where they land. The block is the float16
// block of width dim / 2 in every byte count; the producer adds each
// chunk's scales, and the epilogue turns each int32 cell into fp32 times its
// column's scale (row scales as for Int8).
//
// PLAID corpora (PlaidDecode<nbits>) take the int8 path's shape: the copy
// engine brings the packed residual rows (dim * nbits / 8 bytes) into the
// compressed ring, the producer copies each row's centroid id and scale
// beside them, and the widening warps (four with one consumer warpgroup,
// two with two) decode each chunk into the float16 stage: per 16 values,
// the centroid's float16 values from the codec table in global memory
// (read through L2), plus the residuals of a shared table built at block
// start (byte value -> 8 / nbits float16 bucket weights). The epilogue
// scales the columns as for int8. No decoded row is ever written to
// global memory.
//
// Every document token is read from HBM once per launch; the query tiles
// come from L2.
#ifndef MAXSIMD_KERNELS_DETAIL_MAXSIM_TMA_KERNEL_CUH_
#define MAXSIMD_KERNELS_DETAIL_MAXSIM_TMA_KERNEL_CUH_

// Timing probes (bench/probe.sh), never for results: MAXSIMD_TMA_PROBE=1
// replaces the epilogue by one max over each part's cells (the scores are
// then wrong; the run shows what the MMAs and the data flow alone take);
// =2 keeps every block's first query tiles resident instead of streaming
// them (wrong scores; what streaming the tiles from L2 costs).
#ifndef MAXSIMD_TMA_PROBE
#define MAXSIMD_TMA_PROBE 0
#endif

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/mma.cuh"
#include "kernels/detail/tma.cuh"
#include "kernels/detail/tma_decode.cuh"
#include "kernels/detail/wgmma.cuh"
#include "kernels/maxsim_tma.h"

namespace maxsimd::detail {

inline constexpr int kTmaMaxSegs = 16;  // document segments per chunk
// Entries of query_blocks a block caches in shared memory (the rest, for
// batches of more queries, are read from global memory).
inline constexpr int kTmaQblkCache = 260;
inline constexpr uint32_t kSegStarts = 1;
inline constexpr uint32_t kSegEnds = 2;
inline constexpr uint32_t kSegSkip = 4;  // deleted: scored, not written

struct TmaSeg {
  int32_t lo = 0, hi = 0;  // columns [lo, hi) of the chunk
  uint32_t out = 0;        // document (scan) or record (gather) index
  uint32_t flags = 0;
};

// Columns per epilogue pass (one accumulator's width in the split
// consumer): the header indexes segments by part of this width.
inline constexpr int kTmaPartCols = 128;

// How a part's epilogue runs, the same for every query tile of a chunk: one
// word per 128-column part, written by the producer and read by each
// consumer once per chunk (TmaChunkHeader::plan). Bits 0-1, the kind: one
// segment covers every column of the part (one max); two segments split it
// at column x, both non-empty (one pass into two maxima); anything else
// walks the part's segments.
inline constexpr uint32_t kPartOne = 0;
inline constexpr uint32_t kPartTwo = 1;
inline constexpr uint32_t kPartGeneral = 2;
inline constexpr uint32_t kPartKindMask = 3;
inline constexpr uint32_t kPartFold = 4;  // the first segment began before
inline constexpr uint32_t kPartPend = 8;  // the last goes on into the next part
// Bits 8-15: x (kPartTwo); 16-20: the first segment's index; 24-26 and
// 28-30: the first and second segments' flags.
inline constexpr int kPartXShift = 8;
inline constexpr int kPartSegShift = 16;
inline constexpr int kPartFlagsShift = 24;
inline constexpr int kPartFlags2Shift = 28;
static_assert(kTmaMaxSegs <= 32 && kSegSkip < 8, "plan fields");

struct TmaChunkHeader {
  int32_t nseg = 0;                                 // -1: the unit is done
  uint32_t plan[2] = {kPartGeneral, kPartGeneral};  // by part (kPart*)
  uint32_t flags = 0;  // the segments' flags (kSeg*), or-ed
  // Segments [part[i][0], part[i][1]) touch columns [128 i, 128 i + 128).
  int32_t part[2][2] = {};
  TmaSeg seg[kTmaMaxSegs];  // 16-byte aligned: one shared load each
  // mask[s][2t + e], bit i: column 8i + 2t + e of the chunk lies in
  // segment s (t = lane % 4, the column pair of the MMA fragment).
  uint32_t mask[kTmaMaxSegs][8];
};

// kI8: an int8 corpus; kPlaidBits_ > 0: a PLAID corpus of that many bits
// per residual value. Both are "widened": the copy engine fills a ring of
// compressed rows and their scales (and PLAID centroid ids); two widening
// warps turn each chunk into one float16 stage of the layout above, which
// the MMAs read.
//
// kS8_: the int8 MMA: an int8 corpus with quantised queries (Int8Mma), not
// widened, or a PLAID corpus with kPlaidBits_ > 0 (PlaidMma), whose
// residuals are widened to int8 levels; kDP is then half the embedding
// width (the int8 row's bytes / 2).
template <int kDP, int kWG, bool kI8_ = false, int kPlaidBits_ = 0,
          bool kS8_ = false>
struct TmaShape {
  static constexpr int kDPad = kDP;
  static constexpr bool kI8 = kI8_;
  static constexpr int kPlaidBits = kPlaidBits_;
  static constexpr bool kS8 = kS8_;
  // Int8Mma at d = 128 with one warpgroup: each chunk's MMA, epilogue and
  // barrier run one after another in a block (one accumulator), and an int8
  // byte holds twice the tokens of float16, so a memory-bound scan needs
  // many blocks per multiprocessor to overlap them: four, with 128-token
  // chunks in two 16 KB stages (bench/NOTES.md, v10 and v11). Must agree
  // with TmaBlocksPerSm.
  static constexpr bool kSmallBlocks =
      kS8 && kPlaidBits == 0 && kWG == 1 && kDP == 64;
  // Elements per row: the int8 MMA's rows hold two per 16-bit unit.
  static constexpr int kDim = kS8 ? 2 * kDP : kDP;
  static constexpr int kMinBlocks = kWG == 1 ? (kSmallBlocks ? 4 : 2) : 1;
  static constexpr bool kWidened = kI8 || kPlaidBits > 0;
  // Chunks carry an fp32 scale per row (copied beside the rows).
  static constexpr bool kScaled = kWidened || kS8;
  // Bytes of one compressed row: an int8 row, or a packed residual row.
  static constexpr int kRawRowBytes = kI8 ? kDP : kDim * kPlaidBits / 8;
  static constexpr int kHalves = kDP / 64;  // 128-byte swizzle rows per row
  static constexpr int kTileRows = kWG == 1 ? 32 : 64;
  // Tokens per chunk: 32 KB stages with one warpgroup, 64 KB with two
  // (d <= 128), so that memory-bound blocks keep ~100 KB in flight per
  // multiprocessor and compute-bound ones reload query tiles less often.
  // Int8 with one warpgroup: at most 128 tokens, one accumulator (the
  // widening warps leave no registers for two), and where shared memory
  // allows two float16 stages, so that widening the next chunk overlaps
  // the MMAs and the epilogue of this one.
  static constexpr int kN =
      kWG == 1 ? ((kWidened || kSmallBlocks) && kDP == 64 ? 128 : 16384 / kDP)
               : (kDP == 256 ? 64 : 256);
  // Int8Mma at d = 128 with one warpgroup: the four warps split the
  // epilogue of a 32-row tile by columns (a scaled int8 cell costs three
  // instructions, and a byte holds twice the tokens of float16). The tile
  // is staged twice in shared memory (rows 32-63 repeat rows 0-31), so that
  // the 64-row MMA leaves every row in two warps: warps 0-1 take the
  // chunk's first half of columns, warps 2-3 the second (bench/NOTES.md,
  // v11). Measured no faster for the decode-bound PLAID blocks, and
  // float16 blocks need the shared memory for two per multiprocessor.
  // PlaidMma at d = 128 splits too (two blocks per multiprocessor: its
  // widening warps take the registers of the other two).
  static constexpr bool kColSplit = kS8 && kWG == 1 && kDP == 64;
  static_assert(!kColSplit || (kWG == 1 && kN <= kTmaPartCols),
                "one warpgroup, chunks of one part");
  static constexpr int kSmemTileRows = kColSplit ? 64 : kTileRows;
  static constexpr int kWide = !kWidened ? 0 : (kWG == 1 && kDP <= 128 ? 2 : 1);
  // (PlaidMma at 4 bits: three, for its table slots.)
  static constexpr int kStages =
      kSmallBlocks             ? 2
      : kS8 && kPlaidBits == 4 ? 3
      : kWG == 1 ? (kWidened ? (kDP == 64 ? 4 : (kDP == 128 ? 2 : 3))
                             : (kDP == 256 ? 2 : 3))
                 : 2;
  // A header is rewritten kHeaders chunks later, once every reader is
  // past it: with int8, the producer refills a stage once it is widened,
  // and the one float16 stage frees up before the epilogue of its chunk.
  static constexpr int kHeaders = kWidened ? kStages + kWide + 1 : 2 * kStages;
  static constexpr int kQStages = kWG == 1 ? 1 : 2;  // per warpgroup
  static constexpr int kMaxTiles = kWG == 1 ? 1 : 32;
  static constexpr int kBlocksPerTile = kTileRows / 16;
  static constexpr int kRowBlocks = kMaxTiles * kBlocksPerTile;
  static constexpr int kConsumers = 128 * kWG;
  // int8 and PLAID: two warps widen the compressed chunks for the consumers;
  // four decode PLAID chunks with one warpgroup (latency-bound centroid
  // loads; with two, four would cut the consumers' registers below their
  // accumulators').
  static constexpr int kWideners = kPlaidBits > 0 && kWG == 1
                                       ? 128
                                       : (kWidened ? 64 : 0);
  static constexpr int kThreads = kConsumers + 32 + kWideners;
  static constexpr int kTileBytes = kTileRows * kDP * 2;  // in global memory
  static constexpr int kSmemTileBytes = kSmemTileRows * kDP * 2;
  static constexpr int kHalfStageBytes = kN * 128;
  static constexpr int kStageBytes = kN * kDP * 2;
  static constexpr int kDocStages = kWidened ? kWide : kStages;
  // Blocks of one warpgroup hold at most two queries.
  static constexpr int kQblkCache = kWG == 1 ? 8 : kTmaQblkCache;
  // One compressed stage (int8 or residual rows).
  static constexpr int kI8StageBytes = kWidened ? kN * kRawRowBytes : 0;
  static constexpr int kScaleBytes = kScaled ? kN * 4 : 0;
  // Scale slots the producer fills: one per compressed stage when widened
  // (the widening warps copy them on); with Int8Mma, one per stage plus
  // one, since a stage is refilled during its chunk's last epilogue, which
  // still reads the scales.
  static constexpr int kScSlots = kWidened ? kStages : (kS8 ? kStages + 1 : 0);
  // PLAID: the centroid ids of each compressed stage, and the residual
  // table: byte value -> its 8 / nbits bucket weights in float16.
  static constexpr int kCodeBytes = kPlaidBits > 0 ? kN * 4 : 0;
  // (PlaidMma: int8 levels.)
  static constexpr int kLutBytes =
      kPlaidBits > 0
          ? 256 * (8 / (kPlaidBits > 0 ? kPlaidBits : 8)) * (kS8 ? 1 : 2)
          : 0;
  // PlaidMma: per widened chunk, each token's row of the query-centroid
  // table (32 float16 values, as 16 pairs of rows (g, g + 8)), in rows of
  // kQcStride bytes: 20 words, so that the epilogue's loads of four
  // columns by eight row pairs hit 32 different banks. One slot more than
  // stages, as for the scales.
  static constexpr bool kPlaidMma = kS8 && kPlaidBits > 0;
  static constexpr int kQcStride = 80;
  static constexpr int kQcBytes = kPlaidMma ? kN * kQcStride : 0;
  static constexpr int kQcSlots = kPlaidMma ? kWide + 1 : 0;
  // Shared memory, from a 1024-byte aligned base. The query ring comes
  // first: with 32-row tiles staged once the 64-row wgmma reads 32 rows past
  // a tile (results unused), which must stay inside the allocation.
  static constexpr int kQOff = 0;
  static constexpr int kDocOff = kQOff + kWG * kQStages * kSmemTileBytes;
  static constexpr int kI8Off = kDocOff + kDocStages * kStageBytes;
  static constexpr int kScOff = kI8Off + kStages * kI8StageBytes;
  // The scales of the chunks widened into the float16 stages: one slot
  // more than stages, since a stage is refilled during its chunk's
  // epilogue, which still reads the scales.
  static constexpr int kWideScOff = kScOff + kScSlots * kScaleBytes;
  static constexpr int kCodeOff =
      kWideScOff + (kWidened ? (kWide + 1) * kScaleBytes : 0);
  static constexpr int kLutOff = kCodeOff + kStages * kCodeBytes;
  static constexpr int kQcOff = kLutOff + kLutBytes;
  static constexpr int kHdrOff = kQcOff + kQcSlots * kQcBytes;
  static constexpr int kCarryOff =
      kHdrOff + kHeaders * static_cast<int>(sizeof(TmaChunkHeader));
  // Column split: the first half's per-lane maxima of the segment that
  // crosses into the second half (two floats per lane of warps 0-1).
  static constexpr int kCarryBytes = kMaxTiles * kTileRows * 4;
  static constexpr int kXchgOff = kCarryOff + (kColSplit ? 2 : 1) * kCarryBytes;
  static constexpr int kPartOff = kXchgOff + (kColSplit ? 64 * 8 : 0);
  // Two partial-sum tables, by chunk parity (see Consume).
  static constexpr int kPartBytes = kTmaMaxSegs * kRowBlocks * 4;
  static constexpr int kQblkOff = kPartOff + 2 * kPartBytes;
  static constexpr int kBarOff = kQblkOff + kQblkCache * 4;
  static constexpr int kNumBars = 2 * kStages + 2 * kWG * kQStages + 2 * kWide;
  static constexpr int kSmemBytes = kBarOff + kNumBars * 8 + 1024;
  static_assert(kDocOff % 1024 == 0 && kStageBytes % 1024 == 0, "alignment");
  // Copy-engine boxes of 16 compressed rows land 128-byte aligned.
  static_assert(!kWidened || (16 * kRawRowBytes) % 128 == 0, "alignment");
  static_assert(kBarOff % 8 == 0, "alignment");
  static_assert(kQcOff % 16 == 0, "16-byte copies of the table's rows");
  static_assert(!kPlaidMma || (kWG == 1 && kDP == 64),
                "PlaidMma: one warpgroup, d = 128");
  static_assert(kHdrOff % 16 == 0 && sizeof(TmaChunkHeader) % 16 == 0,
                "segments are read 16 bytes at a time");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  static_assert(kWG != 1 || kSmemBytes <= 113 * 1024,
                "two blocks per multiprocessor");
};

// Per-lane cache of 32 consecutive int64 values of a global array, shared
// across the warp by shuffles: the producer reads cu_seqlens with one
// coalesced load per 32 documents instead of a dependent load per document.
struct WarpCache64 {
  const int64_t* base = nullptr;
  int64_t first = -1, limit = 0;  // cached [first, first + 32) of [0, limit)
  int64_t value = 0;

  __device__ __forceinline__ int64_t Get(int64_t i) {
    if (first < 0 || i < first || i >= first + 32) {
      first = i;
      const int64_t at = i + (threadIdx.x & 31);
      value = at < limit ? base[at] : 0;
    }
    return __shfl_sync(0xffffffffu, value, static_cast<int>(i - first));
  }
};

struct WarpCacheRecord {
  const TmaRecord* base = nullptr;
  int64_t first = -1, limit = 0;
  TmaRecord value;

  __device__ __forceinline__ TmaRecord Get(int64_t i) {
    if (first < 0 || i < first || i >= first + 32) {
      first = i;
      const int64_t at = i + (threadIdx.x & 31);
      if (at < limit) value = base[at];
    }
    const int src = static_cast<int>(i - first);
    TmaRecord r;
    r.row = __shfl_sync(0xffffffffu, value.row, src);
    r.len = __shfl_sync(0xffffffffu, value.len, src);
    r.slot = __shfl_sync(0xffffffffu, value.slot, src);
    r.position = 0;
    return r;
  }
};

// The shape of the kernel of one decode policy (tma_decode.cuh).
template <typename Decode, int kDP, int kWG>
using TmaShapeOf =
    TmaShape<kDP, kWG, Decode::kI8, Decode::kPlaidBits, Decode::kS8>;

// The block of one layout's kernel: the pipeline, with what differs by
// layout asked of the decode policy D (tma_decode.cuh).
template <typename D, int kDP, int kWG>
struct TmaBlock {
  using S = TmaShapeOf<D, kDP, kWG>;
  // Compressed chunks go through the widening warps into the MMA's stage.
  static constexpr bool kWidened = S::kWidened;
  // The MMA's operand type, and its accumulators' (int32 for the int8 MMA).
  using MmaTag = typename D::MmaTag;
  using Acc = typename D::Acc;
  // The widening warps index each chunk (IndexMasks) instead of the
  // producer; the int8 kernels' two widening warps have no time to spare
  // for it (bench/NOTES.md, s9).
  static constexpr bool kWidenerIndex = D::kWidenerIndex;
  // A block's chunk count: 32 bits, far above the chunks of any unit, so
  // that the ring positions (c % 7, c % 3, ...) are a short unsigned
  // multiply instead of the ~15 instructions of a 64-bit division, once
  // per chunk in every role (bench/NOTES.md, s9).
  using Chunk = uint32_t;

  const TmaArgs<typename D::Layout>& p;
  uint8_t* qsm;
  uint8_t* dsm;
  uint8_t* i8sm;   // int8: [kStages] chunks of int8 rows
  float* scsm;     // int8: [kScSlots] their scales
  float* wide_sc;  // int8: [kWide + 1][kN] scales of the widened chunks
  const float* sc = nullptr;      // int8: the consumers' chunk's scales
  int32_t* codesm = nullptr;      // PLAID: [kStages][kN] centroid ids
  const uint16_t* lut = nullptr;  // PLAID: [256][8 / nbits] float16 bits
                                  // (PlaidMma: int8 levels)
  uint8_t* qcsm = nullptr;        // PlaidMma: [kQcSlots] table slots
  const uint32_t* qc = nullptr;   // PlaidMma: the consumers' chunk's slot
  TmaChunkHeader* hdr;
  // Per-row running maxima of the document that continues into the next
  // chunk: read from carry_in, written to carry_out. The same array, except
  // with the column split, where two warps finish segments of the same rows
  // in one chunk (the first may read while the second writes): there the
  // chunks alternate between two arrays.
  float* carry_base;
  float* carry_in;
  float* carry_out;
  // Column split: the first half's maxima of the crossing segment ([64]
  // float2, S::kXchgOff), and the tile's row scales (RowScales).
  float* xchg_base;
  float qs_lo = 1.f, qs_hi = 1.f;
  float* part;       // this chunk's table of partial sums
  float* part_base;  // the two tables
  int32_t* qblk;     // query_blocks[qa ..], copied at block start
  uint64_t* full;    // [kStages] chunk landed (1 arrival + bytes)
  uint64_t* empty;   // [kStages] chunk consumed (one arrival per warp)
  uint64_t* qfull;   // [kWG * kQStages] query tile landed
  uint64_t* qempty;  // [kWG * kQStages] query tile consumed
  uint64_t* wfull;   // int8: [kWide] float16 stage holds a widened chunk
  uint64_t* wempty;  // int8: [kWide] its MMAs are done (arrival per warp)
  bool gather;
  int32_t query;    // gather: the unit's query
  int32_t ta;       // the unit's first tile (global index)
  int32_t ntiles;   // and how many
  bool resident;    // query tiles loaded once, not per chunk
  uint32_t qn = 0;  // streamed query tiles this warpgroup has taken
#if MAXSIMD_TMA_PROBE == 1
  float probe_sink = 0.f;  // keeps the probe's maxima (and MMAs) alive
#endif

  // ---- producer: the whole warp runs it (uniform control flow); lane 0
  // writes the headers and issues the copies.

  __device__ void Produce(int64_t unit) {
    const int lane = threadIdx.x & 31;
    if (resident && lane == 0) {
      const int loaded =
          MAXSIMD_TMA_PROBE == 2 ? min(ntiles, kWG * S::kQStages) : ntiles;
      for (int i = 0; i < loaded; ++i) {
        LoadQueryTile(i, (i % kWG) * S::kQStages + i / kWG);
      }
    }
    Cursor cur;
    if (gather) {
      const GatherTile u = p.units[unit];
      cur.r = u.rec_begin;
      cur.r1 = u.rec_end;
      cur.recs.base = p.records;
      cur.recs.limit = u.rec_end;
    } else {
      cur.j = unit * p.docs_per_unit;
      cur.j1 = min(cur.j + p.docs_per_unit, p.num_docs);
      cur.cu.base = p.cu_seqlens + p.doc_begin;
      cur.cu.limit = p.num_docs + 1;
      cur.tok = cur.cu.Get(cur.j);
    }
    // Chunk c + 1 is requested before most of chunk c's query tiles, so
    // that with streamed tiles the next chunk's rows are in flight while
    // this one computes. The first tiles of chunk c go before it: their
    // slots free up as chunk c - 1 ends, while chunk c + 1 waits for chunk
    // c - 1 to be wholly consumed, and a consumer starting chunk c should
    // not wait for that and then for an L2 round trip.
    constexpr int kEarly = kWG * S::kQStages;
    bool last = IssueChunk(0, cur);
    for (Chunk c = 0; !last; ++c) {
      if (!resident) IssueQueryTiles(c, 0, min(kEarly, ntiles));
      const bool next_last = IssueChunk(c + 1, cur);
      if (!resident) IssueQueryTiles(c, min(kEarly, ntiles), ntiles);
      last = next_last;
    }
  }

  struct Cursor {
    WarpCache64 cu;
    WarpCacheRecord recs;
    int64_t j = 0, j1 = 0, tok = 0;  // scan: next document, end, next token
    int64_t r = 0, r1 = 0, off = 0;  // gather: next record, end, its offset
    int64_t tomb_word = -1;          // scan: cached tombstone word
    uint32_t tomb_bits = 0;
  };

  __device__ __forceinline__ void LoadQueryTile(int i, int slot) {
    uint64_t* bar = &qfull[slot];
    const uint8_t* src = static_cast<const uint8_t*>(p.q_tiles) +
                         static_cast<int64_t>(ta + i) * S::kTileBytes;
    uint8_t* dst = qsm + slot * S::kSmemTileBytes;
    if constexpr (S::kColSplit) {
      // Each 128-byte column group of the 32 rows lands twice: as rows 0-31
      // and as rows 32-63 (same row % 8, so the same swizzle).
      constexpr int kGroup = S::kTileRows * 128;
      MbarArriveExpectTx(bar, 2 * S::kTileBytes);
#pragma unroll
      for (int g = 0; g < S::kHalves; ++g) {
        BulkLoad(dst + 2 * g * kGroup, src + g * kGroup, kGroup, bar);
        BulkLoad(dst + (2 * g + 1) * kGroup, src + g * kGroup, kGroup, bar);
      }
    } else {
      MbarArriveExpectTx(bar, S::kTileBytes);
      BulkLoad(dst, src, S::kTileBytes, bar);
    }
  }

  // Loads tiles [i0, i1) of chunk c.
  __device__ void IssueQueryTiles(Chunk c, int i0, int i1) {
    const int lane = threadIdx.x & 31;
    for (int i = i0; i < i1; ++i) {
      const int w = i % kWG;
      const int nw = (ntiles - w + kWG - 1) / kWG;
      const int64_t n =
          static_cast<int64_t>(c) * nw + i / kWG;  // warpgroup w's load count
      const int slot = w * S::kQStages + static_cast<int>(n % S::kQStages);
      const int64_t round = n / S::kQStages;
      if (round > 0) MbarWait(&qempty[slot], (round - 1) & 1);
      if (lane == 0) LoadQueryTile(i, slot);
    }
  }

  __device__ __forceinline__ bool Deleted(Cursor& cur, int64_t doc) {
    if (p.tombstones == nullptr) return false;
    const int64_t word = doc >> 5;
    if (word != cur.tomb_word) {
      cur.tomb_word = word;
      cur.tomb_bits = p.tombstones[word];
    }
    return (cur.tomb_bits >> (doc & 31)) & 1u;
  }

  // Fills stage c % kStages with the next chunk; returns true (and writes
  // the end marker) when the unit has no tokens left.
  __device__ bool IssueChunk(Chunk c, Cursor& cur) {
    const int lane = threadIdx.x & 31;
    const int s = static_cast<int>(c % S::kStages);
    if (c >= S::kStages) MbarWait(&empty[s], ((c / S::kStages) - 1) & 1);
    TmaChunkHeader* h = &hdr[c % S::kHeaders];
    uint8_t* stage = dsm + s * S::kStageBytes;
    if (gather ? cur.r >= cur.r1 : cur.j >= cur.j1) {
      if (lane == 0) h->nseg = -1;
      MbarArrive(&full[s]);  // every lane: see the barriers' counts
      return true;
    }
    int nseg = 0;
    uint32_t bytes = 0;  // lane 0's count of the copies it issued
    if (gather) {
      int cols = 0;
      while (cur.r < cur.r1 && nseg < kTmaMaxSegs && cols < S::kN) {
        const TmaRecord rec = cur.recs.Get(cur.r);
        const int take =
            static_cast<int>(min(rec.len - cur.off, int64_t{S::kN - cols}));
        const bool ends = cur.off + take == rec.len;
        const int nb = (take + 15) / 16;
        if (lane == 0) {
          TmaSeg& sg = h->seg[nseg];
          sg.lo = cols;
          sg.hi = cols + take;
          sg.out = static_cast<uint32_t>(cur.r);
          sg.flags = (cur.off == 0 ? kSegStarts : 0) | (ends ? kSegEnds : 0);
          // 64-row boxes while 64 rows remain, then 16-row boxes.
          int at = 0;
          while (at < take) {
            const int big = take - at >= 64 ? 1 : 0;
            const TensorMapBytes* maps = p.maps + kTmaMapsPerSlot * rec.slot;
            const int rows = big ? 64 : 16;
            const int32_t row = static_cast<int32_t>(rec.row + cur.off + at);
            if constexpr (kWidened) {
              TmaLoad2D(
                  i8sm + s * S::kI8StageBytes + (cols + at) * S::kRawRowBytes,
                  maps[big].bytes, &full[s], 0, row);
              bytes += rows * S::kRawRowBytes;
            } else {
              for (int hh = 0; hh < S::kHalves; ++hh) {
                TmaLoad2D(stage + hh * S::kHalfStageBytes + (cols + at) * 128,
                          maps[big].bytes, &full[s], hh * 64, row);
              }
              bytes += rows * 128 * S::kHalves;
            }
            at += rows;
          }
        }
        D::CopyRowData(*this, c, s, cols, rec.slot, rec.row + cur.off, take);
        ++nseg;
        if (!ends) {
          cur.off += take;
          break;
        }
        ++cur.r;
        cur.off = 0;
        cols += nb * 16;
      }
    } else {
      const int64_t c_tok = cur.tok;
      int cols = 0;
      while (cur.j < cur.j1 && nseg < kTmaMaxSegs) {
        const int64_t d0 = cur.cu.Get(cur.j);
        const int64_t d1 = cur.cu.Get(cur.j + 1);
        const bool ends = d1 <= c_tok + S::kN;
        const bool deleted = Deleted(cur, p.doc_begin + cur.j);
        const int hi = static_cast<int>((ends ? d1 : c_tok + S::kN) - c_tok);
        if (lane == 0) {
          TmaSeg& sg = h->seg[nseg];
          sg.lo = static_cast<int>(max(d0, c_tok) - c_tok);
          sg.hi = hi;
          sg.out = static_cast<uint32_t>(cur.j);
          sg.flags = (d0 >= c_tok ? kSegStarts : 0) | (ends ? kSegEnds : 0) |
                     (deleted ? kSegSkip : 0);
        }
        ++nseg;
        cols = hi;
        if (!ends) break;
        ++cur.j;
        if (cols == S::kN) break;
      }
      cur.tok = c_tok + cols;
      // A scan chunk is full except at the unit's end, where at most one
      // box minus one row past it is read.
      const int box = p.scan_box_rows;
      const int nb = (cols + box - 1) / box;
      const int big = box == 64 ? 1 : 0;
      if (lane == 0) {
        const TensorMapBytes* maps = p.maps + kTmaMapsPerSlot * p.map_slot;
        for (int b = 0; b < nb; ++b) {
          const int32_t row =
              static_cast<int32_t>(c_tok - p.row_base + box * b);
          if constexpr (kWidened) {
            TmaLoad2D(i8sm + s * S::kI8StageBytes + b * box * S::kRawRowBytes,
                      maps[big].bytes, &full[s], 0, row);
          } else {
            for (int hh = 0; hh < S::kHalves; ++hh) {
              TmaLoad2D(stage + hh * S::kHalfStageBytes + b * box * 128,
                        maps[big].bytes, &full[s], hh * 64, row);
            }
          }
        }
      }
      bytes = nb * box * (kWidened ? S::kRawRowBytes : 128 * S::kHalves);
      D::CopyRowData(*this, c, s, 0, p.map_slot, c_tok - p.row_base, cols);
    }
    if constexpr (D::kRowData) CpAsyncMbarArrive(&full[s]);
    if constexpr (!kWidenerIndex) {
      __syncwarp();
      IndexMasks(h, nseg);
      IndexParts(h, nseg);
    }
    __syncwarp();
    if (lane == 0) {
      h->nseg = nseg;
      // After the copies: the barrier's transaction count may go negative
      // meanwhile; the phase cannot complete before this arrival.
      MbarArriveExpectTx(&full[s], bytes);
    } else {
      MbarArrive(&full[s]);
    }
    return false;
  }

  // The scale slot of chunk c: its stage when widened, else one of
  // kStages + 1 (see TmaShape::kScSlots).
  __device__ __forceinline__ static int ScaleSlot(Chunk c) {
    return static_cast<int>(c % S::kScSlots);
  }

  // int8: the scales of n rows from `src` into chunk columns [col, col +
  // n) of scale slot `slot`, by the whole warp (4-byte copies: rows start
  // anywhere); the chunk's barrier waits for them (CpAsyncMbarArrive).
  __device__ __forceinline__ void CopyScales(int slot, int col,
                                             const float* src, int n) {
    for (int j = threadIdx.x & 31; j < n; j += 32) {
      CpAsync4(scsm + slot * S::kN + col + j, src + j);
    }
  }

  // PLAID: the centroid ids of n rows, as CopyScales.
  __device__ __forceinline__ void CopyCodes(int s, int col, const int32_t* src,
                                            int n) {
    for (int j = threadIdx.x & 31; j < n; j += 32) {
      CpAsync4(codesm + s * S::kN + col + j, src + j);
    }
  }

  // True when segment sg has columns in [base, base + cols), or is empty
  // (an empty document) and placed at base or inside.
  __device__ __forceinline__ static bool Touches(const TmaSeg& sg, int base,
                                                 int cols) {
    return sg.lo < base + cols && (sg.hi > base || sg.lo >= base);
  }

  // The consumers' per-chunk index, written once instead of once per query
  // tile: each segment's column masks (IndexMasks), which segments each
  // 128-column part holds, its plan, and the chunk's flags (IndexParts).
  // One warp each, segments already in shared memory: the producer's, or
  // two widening warps' (WidenAll, kWidenerIndex).
  __device__ void IndexMasks(TmaChunkHeader* h, int nseg) {
    const int lane = threadIdx.x & 31;
    for (int i = lane; i < nseg * 8; i += 32) {
      const TmaSeg& sg = h->seg[i / 8];
      h->mask[i / 8][i % 8] = ColumnBlocks(sg.lo, sg.hi, i % 8);
    }
  }

  __device__ void IndexParts(TmaChunkHeader* h, int nseg) {
    const int lane = threadIdx.x & 31;
    if (lane < 2) {
      int first = nseg, end = 0;
      uint32_t flags = 0;
      for (int si = 0; si < nseg; ++si) {
        flags |= h->seg[si].flags;
        if (Touches(h->seg[si], lane * kTmaPartCols, kTmaPartCols)) {
          first = min(first, si);
          end = si + 1;
        }
      }
      if (lane == 0) h->flags = flags;
      h->part[lane][0] = first;
      h->part[lane][1] = end;
      h->plan[lane] = PlanPart(h, lane * kTmaPartCols, first, end);
    }
  }

  // The plan of the part at column `base` (chunk columns [base, base +
  // kTmaPartCols) clipped to the chunk), whose segments are [first, end).
  __device__ static uint32_t PlanPart(const TmaChunkHeader* h, int base,
                                      int first, int end) {
    const int n = end - first;
    if (n < 1 || n > 2) return kPartGeneral;
    const int stop = min(base + kTmaPartCols, S::kN);
    const TmaSeg& a = h->seg[first];
    const TmaSeg& b = h->seg[end - 1];
    if (a.lo > base || b.hi < stop) return kPartGeneral;  // uncovered columns
    if (n == 2 && (a.hi != b.lo || a.hi <= base || a.hi >= stop)) {
      return kPartGeneral;
    }
    return (n == 1 ? kPartOne : kPartTwo) | (a.lo < base ? kPartFold : 0u) |
           (b.hi > stop ? kPartPend : 0u) |
           (static_cast<uint32_t>(a.hi - base) << kPartXShift) |
           (static_cast<uint32_t>(first) << kPartSegShift) |
           (a.flags << kPartFlagsShift) | (b.flags << kPartFlags2Shift);
  }

  // ---- consumers

  // 256-token chunks score each tile as two 128-column halves with their
  // own accumulators, so that a warpgroup's epilogue of one half runs while
  // its MMA of the next half is in flight.
  static_assert(S::kN == 2 * kTmaPartCols || S::kN <= kTmaPartCols,
                "a chunk is one or two parts");
  static constexpr bool kSplit = S::kN == 2 * kTmaPartCols;
  static constexpr int kSplitCols = kTmaPartCols;

  __device__ void Consume() {
    // From lane 0, like the kernel's role_warp: visibly warp-uniform.
    const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
    const int lane = threadIdx.x & 31;
    const int nw = (ntiles - wg + kWG - 1) / kWG;  // this warpgroup's tiles
    if constexpr (S::kColSplit) {
      // One tile per block (S::kMaxTiles): its rows' scales, once.
      static_assert(S::kMaxTiles == 1, "one tile per block");
      RowScales(((threadIdx.x / 32) & 1) * 16 + (lane >> 2), qs_lo, qs_hi);
    }
    for (Chunk c = 0;; ++c) {
      int s = static_cast<int>(c % S::kStages);
      // Widened: s is the float16 stage, which the consumers release.
      if constexpr (kWidened) {
        s = static_cast<int>(c % S::kWide);
        MbarWait(&wfull[s], (c / S::kWide) & 1);
        sc = wide_sc + (c % (S::kWide + 1)) * S::kN;
        if constexpr (S::kQcSlots > 0) {
          qc = reinterpret_cast<const uint32_t*>(qcsm + (c % S::kQcSlots) *
                                                            S::kQcBytes);
        }
      } else {
        MbarWait(&full[s], (c / S::kStages) & 1);
        if constexpr (S::kScaled) sc = scsm + ScaleSlot(c) * S::kN;
      }
      const TmaChunkHeader* h = &hdr[c % S::kHeaders];
      const int nseg = h->nseg;
      if (nseg < 0) break;
      if constexpr (S::kColSplit) {
        carry_in = carry_base + (c & 1) * (S::kCarryBytes / 4);
        carry_out = carry_base + ((c + 1) & 1) * (S::kCarryBytes / 4);
      }
      const uint8_t* stage = dsm + s * S::kStageBytes;
      if (nw == 0) {
        MbarArrive(kWidened ? &wempty[s] : &empty[s]);
      } else if constexpr (kSplit) {
        ChunkSplit(c, s, stage, h, wg, nw);
      } else {
        ChunkWhole(c, s, stage, h, wg, nw);
      }
      if constexpr (S::kColSplit) {
        // Rows are shared only by a warp pair (w, w + 2), so a chunk in
        // which no document ends needs no barrier of all consumers: the
        // pair's own orders its carry and exchange slots (the writer's
        // stores before the reader's loads in the next chunk, the reader's
        // loads before the next chunk's stores). The two tables of partial
        // sums then alternate by chunk that ends a document.
        if ((h->flags & kSegEnds) == 0) {
          PairBarrier();
          continue;
        }
      }
      // One barrier per chunk: the partial sums alternate between two
      // tables, so chunk c + 1's epilogue may run while slower threads still
      // sum chunk c's; chunk c + 2 reuses c's table only after the barrier
      // that all threads reach once they finished summing c.
      NamedBarrier(1, S::kConsumers);
      Finalize(h, nseg);
      part = part == part_base ? part_base + S::kPartBytes / 4 : part_base;
    }
#if MAXSIMD_TMA_PROBE == 1
    if (probe_sink == 1234.5f) p.scores[threadIdx.x] = probe_sink;
#endif
  }

  // A query tile a warpgroup has acquired: its slot, and the low word of
  // its MMA descriptor (SmemDescLo).
  struct Tile {
    int slot;
    uint32_t desc;
  };

  // The low descriptor word of query slot `slot`, taken from lane 0: the
  // compiler then knows it is the same in every lane and builds the chain's
  // descriptors in uniform registers, where the wgmmas read them, instead
  // of in ordinary ones moved over before each wgmma (bench/NOTES.md, v16).
  __device__ __forceinline__ uint32_t TileDesc(int slot) const {
    return __shfl_sync(0xffffffffu, SmemDescLo(qsm + slot * S::kSmemTileBytes),
                       0);
  }

  // Waits for this warpgroup's k-th query tile of chunk c. Streamed tiles
  // arrive in the order the warpgroup takes them, chunk by chunk: the n-th
  // (qn) lands in slot n % kQStages, phase n / kQStages.
  __device__ __forceinline__ Tile AcquireTile(Chunk c, int k, int wg) {
    if (resident) {
      if constexpr (MAXSIMD_TMA_PROBE == 2) {
        const int slot = wg * S::kQStages + k % S::kQStages;
        const uint32_t desc = TileDesc(slot);
        if (c == 0 && k < S::kQStages) MbarWait(&qfull[slot], 0);
        return {slot, desc};
      }
      const int slot = wg * S::kQStages + k;
      const uint32_t desc = TileDesc(slot);
      if (c == 0) MbarWait(&qfull[slot], 0);
      return {slot, desc};
    }
    static_assert((S::kQStages & (S::kQStages - 1)) == 0,
                  "the tile count wraps at 2^32");
    const uint32_t n = qn++;
    const int slot = wg * S::kQStages + static_cast<int>(n % S::kQStages);
    const uint32_t desc = TileDesc(slot);
    MbarWait(&qfull[slot], (n / S::kQStages) & 1);
    return {slot, desc};
  }

  // Query tile `slot` is read (streamed tiles; lane 0 of each warp: only
  // the copy engine and the MMAs touch tiles), and after the last tile the
  // chunk's stage is too (every lane: it read the chunk's header).
  __device__ __forceinline__ void Release(int slot, bool last_tile, int s) {
    if (!resident && (threadIdx.x & 31) == 0) MbarArrive(&qempty[slot]);
    if (last_tile) MbarArrive(kWidened ? &wempty[s] : &empty[s]);
  }

  // The widening warps: chunk after chunk, once compressed stage s has
  // landed and the consumers are done with the MMA stage's previous chunk,
  // has the policy widen the chunk into it (D::WidenChunk), then releases
  // stage s and tells the consumers. The end marker is passed on as it is.
  __device__ void WidenAll() {
    static_assert(!kWidenerIndex || S::kWideners >= 64, "two warps index");
    const int warp =
        __shfl_sync(0xffffffffu, (threadIdx.x - (S::kConsumers + 32)) / 32, 0);
    for (Chunk c = 0;; ++c) {
      const int s = static_cast<int>(c % S::kStages);
      MbarWait(&full[s], (c / S::kStages) & 1);
      TmaChunkHeader* h = &hdr[c % S::kHeaders];
      const int nseg = h->nseg;
      const bool end = nseg < 0;
      const int w = static_cast<int>(c % S::kWide);
      uint8_t* out = dsm + w * S::kStageBytes;
      float* to = wide_sc + (c % (S::kWide + 1)) * S::kN;
      if (c >= S::kWide) MbarWait(&wempty[w], ((c / S::kWide) - 1) & 1);
      if (!end) D::WidenChunk(*this, s, c, out, to, h, nseg, warp);
      FenceProxyAsync();
      if (!end) MbarArrive(&empty[s]);
      MbarArrive(&wfull[w]);
      if (end) break;
    }
  }

  // Widened kernels: the scales of compressed stage s to the widened
  // chunk's slot `to`.
  __device__ __forceinline__ void CopyWideScales(int s, float* to) const {
    const int tid = threadIdx.x - (S::kConsumers + 32);
    for (int i = tid; i < S::kN; i += S::kWideners) {
      to[i] = scsm[s * S::kN + i];
    }
  }

  // A scaled cell as fp32: the accumulator itself, or (Int8Mma) its bits.
  __device__ __forceinline__ static float Cell(float x) { return x; }
  __device__ __forceinline__ static float Cell(int32_t x) {
    return __int_as_float(x);
  }

  // One wgmma chain over a tile: all its columns at once, epilogue after.
  __device__ __forceinline__ void ChunkWhole(Chunk c, int s,
                                             const uint8_t* stage,
                                             const TmaChunkHeader* h, int wg,
                                             int nw) {
    Acc acc[S::kN / 2];
    const uint32_t plan = h->plan[0];
    for (int k = 0; k < nw; ++k) {
      const Tile tile = AcquireTile(c, k, wg);
      IssueMma<S::kN>(tile.desc, stage, acc);
      WgmmaWait<0>();
      FenceAll(acc);
      Release(tile.slot, k == nw - 1, s);
      if constexpr (S::kColSplit) {
        if ((threadIdx.x / 64) % 2 == 0) {
          EpilogueHalf<S::kN, 0>(acc, h, wg + k * kWG);
        } else {
          EpilogueHalf<S::kN, 1>(acc, h, wg + k * kWG);
        }
      } else {
        float pend0 = 0.f, pend1 = 0.f;  // unused: no columns follow
        EpilogueCols<S::kN>(acc, h, plan, wg + k * kWG, 0, pend0, pend1);
      }
    }
  }

  // Each half's MMA runs during the epilogue of the half before it: MMA
  // (k, 1) during that of (k, 0), MMA (k + 1, 0) during that of (k, 1).
  // Barrier arrivals and waits happen only while no MMA is in flight (the
  // compiler serializes wgmmas around an mbarrier operation otherwise); the
  // epilogue is the longer step, so waiting for MMA (k, 1) before issuing
  // (k + 1, 0) costs little, and the other warpgroup's MMAs fill the gap.
  __device__ __forceinline__ void ChunkSplit(Chunk c, int s,
                                             const uint8_t* stage,
                                             const TmaChunkHeader* h, int wg,
                                             int nw) {
    const uint8_t* stage_hi = stage + kSplitCols * 128;
    Acc acc0[kSplitCols / 2], acc1[kSplitCols / 2];
    Tile tile = AcquireTile(c, 0, wg);
    IssueMma<kSplitCols>(tile.desc, stage, acc0);
    // The loop leaves only by the break, with no MMA in flight.
    for (int k = 0;; ++k) {
      const int lt = wg + k * kWG;
      IssueMma<kSplitCols>(tile.desc, stage_hi, acc1);
      // Each plan is read before the wait (which orders memory), so that
      // its load overlaps the MMA instead of starting the epilogue.
      const uint32_t plan0 = h->plan[0];
      WgmmaWait<1>();
      FenceAll(acc0);
      // The maxima of the segment that crosses into the second half.
      float pend0 = 0.f, pend1 = 0.f;
      EpilogueCols<kSplitCols>(acc0, h, plan0, lt, 0, pend0, pend1);
      const uint32_t plan1 = h->plan[1];
      WgmmaWait<0>();
      FenceAll(acc1);
      Release(tile.slot, k == nw - 1, s);
      if (k + 1 == nw) {
        EpilogueCols<kSplitCols>(acc1, h, plan1, lt, kSplitCols, pend0, pend1);
        break;
      }
      tile = AcquireTile(c, k + 1, wg);
      IssueMma<kSplitCols>(tile.desc, stage, acc0);
      EpilogueCols<kSplitCols>(acc1, h, plan1, lt, kSplitCols, pend0, pend1);
    }
  }

  template <int kRegs>
  __device__ __forceinline__ static void FenceAll(Acc (&acc)[kRegs]) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) FenceRegister(acc[i]);
  }

  // Issues (and commits) the wgmma chain of one query tile (a0: the low
  // word of its descriptor, Tile::desc) against kCols document tokens
  // starting at `cols`; the caller waits for it.
  template <int kCols>
  __device__ __forceinline__ void IssueMma(uint32_t a0, const uint8_t* cols,
                                           Acc (&acc)[kCols / 2]) {
    FenceAll(acc);
    WgmmaFence();
    const uint32_t b0 = SmemDescLo(cols);
#pragma unroll
    for (int kk = 0; kk < kDP / 16; ++kk) {
      const uint32_t a = (kk / 4) * (S::kSmemTileRows * 128) + (kk % 4) * 32;
      const uint32_t b = (kk / 4) * S::kHalfStageBytes + (kk % 4) * 32;
      Wgmma<MmaTag, kCols>::Run(acc, SmemDescOf(a0 + a / 16),
                                SmemDescOf(b0 + b / 16), kk > 0 ? 1u : 0u);
    }
    WgmmaCommit();
  }

  // Completes segment si for this lane's rows (g, g + 8) of row block rb:
  // quad max, the carry of a document begun in an earlier chunk, then
  // either the carry for the next chunk or the block's 16-row sum.
  __device__ __forceinline__ void Finish(uint32_t flags, int si, float m0,
                                         float m1, int row, int rb, float qs0,
                                         float qs1) {
    // Only the first lane of a quad reads and writes the row's carry (a
    // predicated load and store, no branch), so no two lanes touch one
    // address between barriers; the quad max then spreads the carry.
    const bool quad_lead = (threadIdx.x & 3) == 0;
    if ((flags & kSegStarts) == 0 && quad_lead) {
      m0 = fmaxf(m0, carry_in[row]);
      m1 = fmaxf(m1, carry_in[row + 8]);
    }
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 1));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 1));
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 2));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 2));
    // Every lane of a quad now holds the same maxima, and the butterfly
    // leaves the same sum in every lane, so all lanes store the sum (same
    // address, same value): no lane-divergent branch while an MMA is in
    // flight, which would make the compiler serialize the wgmmas.
    if ((flags & kSegEnds) == 0) {
      if (quad_lead) {
        carry_out[row] = m0;
        carry_out[row + 8] = m1;
      }
    } else if ((flags & kSegSkip) == 0) {
      D::ScaleRowMaxima(m0, m1, qs0, qs1);
      float v = m0 + m1;
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      part[si * S::kRowBlocks + rb] = v;
    }
  }

  // The blocks i (of 8 columns; at most 256 columns, so at most 32) whose
  // column 8i + c lies in [lo, hi), as a bit mask: the i from
  // ceil((lo - c) / 8) to ceil((hi - c) / 8), clamped to [0, 32].
  __device__ __forceinline__ static uint32_t ColumnBlocks(int lo, int hi,
                                                          int c) {
    static_assert(S::kN / 8 <= 32, "one bit per 8-column block");
    const int ia = max(0, (lo - c + 7) >> 3);
    const int ib = max(0, (hi - c + 7) >> 3);
    const uint32_t below_b = ib >= 32 ? 0xffffffffu : (1u << ib) - 1u;
    const uint32_t below_a = ia >= 32 ? 0xffffffffu : (1u << ia) - 1u;
    return below_b & ~below_a;
  }

  // Max over the columns of 8-column blocks [kI0, kI1) (all kCols columns
  // by default) of this lane's two rows. Each row keeps four partial
  // maxima (columns 8i + e with i even or odd): four independent
  // dependency chains instead of one.
  template <int kCols, int kI0 = 0, int kI1 = kCols / 8>
  __device__ __forceinline__ static void FullMax(const Acc (&acc)[kCols / 2],
                                                 float& m0, float& m1) {
    const float kNegInf = -__int_as_float(0x7f800000);
    float a[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
    float b[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
#pragma unroll
    for (int i = kI0; i < kI1; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        a[(i & 1) * 2 + e] = fmaxf(a[(i & 1) * 2 + e], Cell(acc[4 * i + e]));
        b[(i & 1) * 2 + e] =
            fmaxf(b[(i & 1) * 2 + e], Cell(acc[4 * i + 2 + e]));
      }
    }
    m0 = fmaxf(fmaxf(a[0], a[1]), fmaxf(a[2], a[3]));
    m1 = fmaxf(fmaxf(b[0], b[1]), fmaxf(b[2], b[3]));
  }

  // The same over the columns whose 8-column block bit is set in in0 (the
  // lane's even column of each block) and in1 (its odd column): straight-
  // line predicated code, one bit test per column pair.
  template <int kCols, int kI0 = 0, int kI1 = kCols / 8>
  __device__ __forceinline__ static void MaskedMax(const Acc (&acc)[kCols / 2],
                                                   uint32_t in0, uint32_t in1,
                                                   float& m0, float& m1) {
    const float kNegInf = -__int_as_float(0x7f800000);
    float a[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
    float b[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
    const uint32_t in[2] = {in0, in1};
#pragma unroll
    for (int i = kI0; i < kI1; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (in[e] & (1u << i)) {
          a[(i & 1) * 2 + e] = fmaxf(a[(i & 1) * 2 + e], Cell(acc[4 * i + e]));
          b[(i & 1) * 2 + e] =
              fmaxf(b[(i & 1) * 2 + e], Cell(acc[4 * i + 2 + e]));
        }
      }
    }
    m0 = fmaxf(fmaxf(a[0], a[1]), fmaxf(a[2], a[3]));
    m1 = fmaxf(fmaxf(b[0], b[1]), fmaxf(b[2], b[3]));
  }

  // Adds the cells of 8-column block kI (if the part has it) to this
  // lane's row maxima r0 (row g) and r1 (row g + 8), two chains per row by
  // the column's parity.
  template <int kCols, int kI>
  __device__ __forceinline__ static void MaxBlock(const Acc (&acc)[kCols / 2],
                                                  float (&r0)[2],
                                                  float (&r1)[2]) {
    if constexpr (kI < kCols / 8) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        r0[e] = fmaxf(r0[e], Cell(acc[4 * kI + e]));
        r1[e] = fmaxf(r1[e], Cell(acc[4 * kI + 2 + e]));
      }
    }
  }

  // The four cells of 8-column block kI (if the part has it), as floats:
  // row g's two columns, then row g + 8's.
  template <int kCols, int kI>
  __device__ __forceinline__ static void CopyBlock(const Acc (&acc)[kCols / 2],
                                                   float (&c)[4]) {
    if constexpr (kI < kCols / 8) {
#pragma unroll
      for (int j = 0; j < 4; ++j) c[j] = Cell(acc[4 * kI + j]);
    }
  }

  // The maxima of this lane's two rows over part columns [0, x) (ma0, ma1)
  // and [x, kCols) (mb0, mb1), 0 < x < kCols, in one pass over the cells:
  // x is the same in every lane, so the switches are uniform jumps into
  // straight-line code (blocks below x's block into a, above it into b).
  template <int kCols>
  __device__ __forceinline__ static void SplitMax(const Acc (&acc)[kCols / 2],
                                                  int x, float& ma0, float& ma1,
                                                  float& mb0, float& mb1) {
    static_assert(kCols <= 128, "at most 16 blocks of 8 columns");
    const float kNegInf = -__int_as_float(0x7f800000);
    float a0[2], a1[2], b0[2], b1[2];
    const int xb = x >> 3;
    // The block that holds x: its cells move to c (a jump to one of 16
    // copies), then each goes to a or b by its column.
    float c[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
    switch (xb) {
      case 0:
        CopyBlock<kCols, 0>(acc, c);
        break;
      case 1:
        CopyBlock<kCols, 1>(acc, c);
        break;
      case 2:
        CopyBlock<kCols, 2>(acc, c);
        break;
      case 3:
        CopyBlock<kCols, 3>(acc, c);
        break;
      case 4:
        CopyBlock<kCols, 4>(acc, c);
        break;
      case 5:
        CopyBlock<kCols, 5>(acc, c);
        break;
      case 6:
        CopyBlock<kCols, 6>(acc, c);
        break;
      case 7:
        CopyBlock<kCols, 7>(acc, c);
        break;
      case 8:
        CopyBlock<kCols, 8>(acc, c);
        break;
      case 9:
        CopyBlock<kCols, 9>(acc, c);
        break;
      case 10:
        CopyBlock<kCols, 10>(acc, c);
        break;
      case 11:
        CopyBlock<kCols, 11>(acc, c);
        break;
      case 12:
        CopyBlock<kCols, 12>(acc, c);
        break;
      case 13:
        CopyBlock<kCols, 13>(acc, c);
        break;
      case 14:
        CopyBlock<kCols, 14>(acc, c);
        break;
      default:
        CopyBlock<kCols, 15>(acc, c);
        break;
    }
    // Lane column 2t + e of the block lies before x while e < lim. Selects,
    // not branches: the lanes differ.
    const int lim = (x & 7) - 2 * static_cast<int>(threadIdx.x & 3);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const bool in_a = e < lim;
      a0[e] = in_a ? c[e] : kNegInf;
      a1[e] = in_a ? c[2 + e] : kNegInf;
      b0[e] = in_a ? kNegInf : c[e];
      b1[e] = in_a ? kNegInf : c[2 + e];
    }
    // Blocks xb - 1 down to 0: enter at xb, fall through.
    switch (xb) {
      default:
        MaxBlock<kCols, 14>(acc, a0, a1);
        [[fallthrough]];
      case 14:
        MaxBlock<kCols, 13>(acc, a0, a1);
        [[fallthrough]];
      case 13:
        MaxBlock<kCols, 12>(acc, a0, a1);
        [[fallthrough]];
      case 12:
        MaxBlock<kCols, 11>(acc, a0, a1);
        [[fallthrough]];
      case 11:
        MaxBlock<kCols, 10>(acc, a0, a1);
        [[fallthrough]];
      case 10:
        MaxBlock<kCols, 9>(acc, a0, a1);
        [[fallthrough]];
      case 9:
        MaxBlock<kCols, 8>(acc, a0, a1);
        [[fallthrough]];
      case 8:
        MaxBlock<kCols, 7>(acc, a0, a1);
        [[fallthrough]];
      case 7:
        MaxBlock<kCols, 6>(acc, a0, a1);
        [[fallthrough]];
      case 6:
        MaxBlock<kCols, 5>(acc, a0, a1);
        [[fallthrough]];
      case 5:
        MaxBlock<kCols, 4>(acc, a0, a1);
        [[fallthrough]];
      case 4:
        MaxBlock<kCols, 3>(acc, a0, a1);
        [[fallthrough]];
      case 3:
        MaxBlock<kCols, 2>(acc, a0, a1);
        [[fallthrough]];
      case 2:
        MaxBlock<kCols, 1>(acc, a0, a1);
        [[fallthrough]];
      case 1:
        MaxBlock<kCols, 0>(acc, a0, a1);
        [[fallthrough]];
      case 0:
        break;
    }
    // Blocks xb + 1 up to 15: enter at xb, fall through.
    switch (xb) {
      case 0:
        MaxBlock<kCols, 1>(acc, b0, b1);
        [[fallthrough]];
      case 1:
        MaxBlock<kCols, 2>(acc, b0, b1);
        [[fallthrough]];
      case 2:
        MaxBlock<kCols, 3>(acc, b0, b1);
        [[fallthrough]];
      case 3:
        MaxBlock<kCols, 4>(acc, b0, b1);
        [[fallthrough]];
      case 4:
        MaxBlock<kCols, 5>(acc, b0, b1);
        [[fallthrough]];
      case 5:
        MaxBlock<kCols, 6>(acc, b0, b1);
        [[fallthrough]];
      case 6:
        MaxBlock<kCols, 7>(acc, b0, b1);
        [[fallthrough]];
      case 7:
        MaxBlock<kCols, 8>(acc, b0, b1);
        [[fallthrough]];
      case 8:
        MaxBlock<kCols, 9>(acc, b0, b1);
        [[fallthrough]];
      case 9:
        MaxBlock<kCols, 10>(acc, b0, b1);
        [[fallthrough]];
      case 10:
        MaxBlock<kCols, 11>(acc, b0, b1);
        [[fallthrough]];
      case 11:
        MaxBlock<kCols, 12>(acc, b0, b1);
        [[fallthrough]];
      case 12:
        MaxBlock<kCols, 13>(acc, b0, b1);
        [[fallthrough]];
      case 13:
        MaxBlock<kCols, 14>(acc, b0, b1);
        [[fallthrough]];
      case 14:
        MaxBlock<kCols, 15>(acc, b0, b1);
        [[fallthrough]];
      default:
        break;
    }
    ma0 = fmaxf(a0[0], a0[1]);
    ma1 = fmaxf(a1[0], a1[1]);
    mb0 = fmaxf(b0[0], b0[1]);
    mb1 = fmaxf(b1[0], b1[1]);
  }

  // Segment si of a chunk header: one 16-byte shared load.
  __device__ __forceinline__ static TmaSeg LoadSeg(const TmaChunkHeader* h,
                                                   int si) {
    const int4 raw = *reinterpret_cast<const int4*>(&h->seg[si]);
    TmaSeg sg;
    sg.lo = raw.x;
    sg.hi = raw.y;
    sg.out = static_cast<uint32_t>(raw.z);
    sg.flags = static_cast<uint32_t>(raw.w);
    return sg;
  }

  // The query row scales of this lane's rows (row, row + 8) of the block's
  // tiles, as the policy has them (a quantised query's scales, PlaidMma's
  // row factors; else 1).
  __device__ __forceinline__ void RowScales(int row, float& qs0,
                                            float& qs1) const {
    D::RowScales(p, ta * S::kTileRows + row, qs0, qs1);
  }

  // Column split: a barrier of the two warps that share rows (w, w + 2).
  // Constant ids: a computed one makes ptxas reserve all 16.
  __device__ __forceinline__ static void PairBarrier() {
    if (((threadIdx.x / 32) & 1) == 0) {
      NamedBarrier(2, 64);
    } else {
      NamedBarrier(3, 64);
    }
  }

  // Column split (S::kColSplit): the epilogue of a whole chunk (kCols
  // columns, one part) for one half of its columns, kH. Warps 0-1 take the
  // first half of the tile's rows 0-15 / 16-31, warps 2-3 the second half
  // of the same rows (the MMA's rows 32-63 repeat rows 0-31). A segment
  // lies in one half and is finished by that half's warp; the one segment
  // that may cross the middle is finished by the second half's warp, which
  // folds in the first half's per-lane maxima from shared memory (lane for
  // lane: same rows, same column phase; Finish takes the quad max after).
  template <int kCols, int kH>
  __device__ __forceinline__ void EpilogueHalf(Acc (&acc)[kCols / 2],
                                               const TmaChunkHeader* h,
                                               int lt) {
    constexpr int kHalf = kCols / 2;
    constexpr int kI0 = kH * kHalf / 8, kI1 = kI0 + kHalf / 8;
    static_assert(kHalf % 8 == 0, "whole 8-column blocks per half");
    const int rw = (threadIdx.x / 32) & 1;  // row block within the tile
    const int lane = threadIdx.x & 31;
    const int t = lane & 3;
    const int row = lt * S::kTileRows + rw * 16 + (lane >> 2);
    const int rb = lt * S::kBlocksPerTile + rw;
    D::template ScaleCells<S, kCols, kI0, kI1>(
        acc, sc, qc, rw * 8 + (lane >> 2), qs_lo, qs_hi);
    const float qs0 = qs_lo, qs1 = qs_hi;
    float2* xchg = reinterpret_cast<float2*>(xchg_base) + rw * 32 + lane;
    const int s1 = h->part[0][1];
    for (int si = h->part[0][0]; si < s1; ++si) {
      const TmaSeg sg = LoadSeg(h, si);
      const bool crosses = sg.lo < kHalf && sg.hi > kHalf;
      // An empty segment belongs to the half its position lies in.
      if (!crosses && (sg.hi > kHalf) != (kH == 1)) continue;
      float m0, m1;
      if (sg.lo <= kH * kHalf && sg.hi >= (kH + 1) * kHalf) {
        FullMax<kCols, kI0, kI1>(acc, m0, m1);
      } else {
        const uint2 mk = *reinterpret_cast<const uint2*>(&h->mask[si][2 * t]);
        MaskedMax<kCols, kI0, kI1>(acc, mk.x, mk.y, m0, m1);
      }
      if (crosses) {
        // Both warps of the pair reach this once per tile. The slot is
        // rewritten only in the next chunk, after the end-of-chunk barrier
        // that the reader reaches after reading it.
        if constexpr (kH == 0) *xchg = make_float2(m0, m1);
        PairBarrier();
        if constexpr (kH == 0) continue;
        const float2 other = *xchg;
        m0 = fmaxf(m0, other.x);
        m1 = fmaxf(m1, other.y);
      }
      Finish(sg.flags, si, m0, m1, row, rb, qs0, qs1);
    }
  }

  // The segmented max of chunk columns [base, base + kCols) of one tile,
  // segment by segment. lt: the tile's index within the block's tiles
  // [ta, ta + ntiles). A segment that continues past these columns leaves
  // its maxima in pend0 / pend1 (at most one does: segments are ordered),
  // and the call for the next columns folds them in. `plan`: the part's
  // TmaChunkHeader::plan word; a part of one or two segments takes no
  // segment walk.
  template <int kCols>
  __device__ __forceinline__ void EpilogueCols(Acc (&acc)[kCols / 2],
                                               const TmaChunkHeader* h,
                                               uint32_t plan, int lt, int base,
                                               float& pend0, float& pend1) {
    static_assert(kCols <= kTmaPartCols, "one part per pass");
#if MAXSIMD_TMA_PROBE == 1
    {
      float m0, m1;
      FullMax<kCols>(acc, m0, m1);
      probe_sink = fmaxf(probe_sink, m0 + m1);
      return;
    }
#endif
    const int warp = (threadIdx.x / 32) % 4;
    if (kWG == 1 && warp >= 2) return;  // rows past a 32-row tile
    const int t = threadIdx.x & 3;
    const int row = lt * S::kTileRows + warp * 16 + ((threadIdx.x & 31) >> 2);
    const int rb = lt * S::kBlocksPerTile + warp;
    // int8 and PLAID: the cells' scales. Column scales here; a quantised
    // query's row scales multiply the row maxima (Finish), which equals scaling
    // every cell since the row scales are positive.
    float qs0, qs1;
    static_assert(!S::kPlaidMma, "PlaidMma takes the column split");
    D::template ScaleCells<S, kCols, 0, kCols / 8>(acc, sc + base, qc, 0, 1.f,
                                                   1.f);
    RowScales(row, qs0, qs1);
    const int part_index = base / kTmaPartCols;
    const uint32_t kind = plan & kPartKindMask;
    if (kind != kPartGeneral) {
      float m0, m1, n0 = 0.f, n1 = 0.f;
      if (kind == kPartOne) {
        FullMax<kCols>(acc, m0, m1);
      } else {
        SplitMax<kCols>(acc, (plan >> kPartXShift) & 0xff, m0, m1, n0, n1);
      }
      if (plan & kPartFold) {
        m0 = fmaxf(m0, pend0);
        m1 = fmaxf(m1, pend1);
      }
      int si = (plan >> kPartSegShift) & 0x1f;
      uint32_t last_flags = (plan >> kPartFlagsShift) & 7;
      if (kind == kPartTwo) {
        Finish(last_flags, si, m0, m1, row, rb, qs0, qs1);
        m0 = n0;
        m1 = n1;
        ++si;
        last_flags = (plan >> kPartFlags2Shift) & 7;
      }
      if (plan & kPartPend) {
        pend0 = m0;
        pend1 = m1;
      } else {
        Finish(last_flags, si, m0, m1, row, rb, qs0, qs1);
      }
      return;
    }
    const int s1 = h->part[part_index][1];
    for (int si = h->part[part_index][0]; si < s1; ++si) {
      const TmaSeg sg = LoadSeg(h, si);
      const uint2 mk = *reinterpret_cast<const uint2*>(&h->mask[si][2 * t]);
      float m0, m1;
      if (sg.lo <= base && sg.hi >= base + kCols) {
        FullMax<kCols>(acc, m0, m1);
      } else {
        const int shift = base / 8;
        MaskedMax<kCols>(acc, mk.x >> shift, mk.y >> shift, m0, m1);
      }
      if (sg.lo < base) {
        m0 = fmaxf(m0, pend0);
        m1 = fmaxf(m1, pend1);
      }
      if (sg.hi > base + kCols) {
        pend0 = m0;
        pend1 = m1;
        continue;
      }
      Finish(sg.flags, si, m0, m1, row, rb, qs0, qs1);
    }
  }

  // Sums the row-block partials of every document that ended in this chunk,
  // per query, in block order.
  __device__ __forceinline__ void Finalize(const TmaChunkHeader* h, int nseg) {
    const int b0 = ta * S::kBlocksPerTile;
    const int b1 = b0 + ntiles * S::kBlocksPerTile;
    const int qa = gather ? query : p.q_begin;
    const int nq = gather ? 1 : p.q_end - p.q_begin;
    for (int item = threadIdx.x; item < nseg * nq; item += S::kConsumers) {
      const int si = item % nseg;
      const int q = qa + item / nseg;
      const TmaSeg sg = h->seg[si];
      if ((sg.flags & (kSegEnds | kSegSkip)) != kSegEnds) continue;
      const int qi = q - qa;
      const int q0 = qi < S::kQblkCache ? qblk[qi] : p.query_blocks[q];
      const int q1 =
          qi + 1 < S::kQblkCache ? qblk[qi + 1] : p.query_blocks[q + 1];
      const int a = max(q0, b0);
      const int b = min(q1, b1);
      if (a >= b) continue;
      float sum = 0.f;
      for (int x = a; x < b; ++x) sum += part[si * S::kRowBlocks + (x - b0)];
      float* out = p.scores + q * p.score_stride + sg.out;
      *out = q0 >= b0 ? sum : *out + sum;
    }
  }
};

template <typename D, int kDP, int kWG>
__global__ void __launch_bounds__(TmaShapeOf<D, kDP, kWG>::kThreads,
                                  TmaShapeOf<D, kDP, kWG>::kMinBlocks)
    MaxSimTmaKernel(const __grid_constant__ TmaArgs<typename D::Layout> p) {
#if MAXSIMD_TMA_DEVICE_CODE
  using S = typename TmaBlock<D, kDP, kWG>::S;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  TmaBlock<D, kDP, kWG> b{p};
  b.qsm = smem + S::kQOff;
  b.dsm = smem + S::kDocOff;
  b.i8sm = smem + S::kI8Off;
  b.scsm = reinterpret_cast<float*>(smem + S::kScOff);
  b.wide_sc = reinterpret_cast<float*>(smem + S::kWideScOff);
  b.codesm = reinterpret_cast<int32_t*>(smem + S::kCodeOff);
  b.lut = reinterpret_cast<const uint16_t*>(smem + S::kLutOff);
  b.qcsm = smem + S::kQcOff;
  b.hdr = reinterpret_cast<TmaChunkHeader*>(smem + S::kHdrOff);
  b.carry_base = reinterpret_cast<float*>(smem + S::kCarryOff);
  b.carry_in = b.carry_base;
  b.carry_out = b.carry_base;
  b.xchg_base = reinterpret_cast<float*>(smem + S::kXchgOff);
  b.part_base = reinterpret_cast<float*>(smem + S::kPartOff);
  b.part = b.part_base;
  b.qblk = reinterpret_cast<int32_t*>(smem + S::kQblkOff);
  b.full = reinterpret_cast<uint64_t*>(smem + S::kBarOff);
  b.empty = b.full + S::kStages;
  b.qfull = b.empty + S::kStages;
  b.qempty = b.qfull + kWG * S::kQStages;
  b.wfull = b.qempty + kWG * S::kQStages;
  b.wempty = b.wfull + S::kWide;
  b.gather = p.records != nullptr;
  const int32_t g0 = p.tile_begin;
  const int32_t g1 = p.tile_begin + p.num_tiles;
  if (b.gather) {
    b.query = p.units[blockIdx.x].query;
    b.ta = max(p.query_tiles[b.query], g0);
    b.ntiles = min(p.query_tiles[b.query + 1], g1) - b.ta;
  } else {
    b.query = 0;
    b.ta = g0;
    b.ntiles = g1 - g0;
  }
  if (b.ntiles <= 0) return;  // the whole block: nothing of this query here
  b.resident =
      MAXSIMD_TMA_PROBE == 2 || (b.ntiles + kWG - 1) / kWG <= S::kQStages;
  {
    const int qa = b.gather ? b.query : p.q_begin;
    const int nq = b.gather ? 1 : p.q_end - p.q_begin;
    for (int i = threadIdx.x; i <= nq && i < S::kQblkCache; i += blockDim.x) {
      b.qblk[i] = p.query_blocks[qa + i];
    }
  }
  D::BuildTables(smem + S::kLutOff, p);
  if (threadIdx.x == 0) {
    // Barriers that order generic shared-memory accesses (headers, scales,
    // widened stages) count every lane of the warps that arrive: each
    // thread that wrote or read the data arrives itself, rather than lane 0
    // after a __syncwarp. The two are equivalent under the memory model,
    // but a race checker follows only a thread's own arrival.
    for (int i = 0; i < S::kStages; ++i) {
      MbarInit(&b.full[i], 32);
      MbarInit(&b.empty[i], S::kWidened ? S::kWideners : S::kConsumers);
    }
    if constexpr (S::kWidened) {
      for (int i = 0; i < S::kWide; ++i) {
        MbarInit(&b.wfull[i], S::kWideners);
        MbarInit(&b.wempty[i], S::kConsumers);
      }
    }
    for (int i = 0; i < kWG * S::kQStages; ++i) {
      MbarInit(&b.qfull[i], 1);
      MbarInit(&b.qempty[i], 4);
    }
    FenceBarrierInit();
  }
  __syncthreads();
  // Each warp's role, from lane 0, so that the compiler knows the branch
  // below to be uniform across the warp: in code it takes for divergent it
  // keeps no value in uniform registers, and every wgmma descriptor was
  // built in ordinary registers and moved over (bench/NOTES.md, v16).
  const int role_warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
  if (role_warp >= (S::kConsumers + 32) / 32) {
    if constexpr (S::kWidened) b.WidenAll();
  } else if (role_warp >= S::kConsumers / 32) {
    b.Produce(blockIdx.x);
  } else {
    b.Consume();
  }
#else
  __trap();  // compiled for a GPU without sm_90a's instructions
#endif
}

template <typename D, int kDP, int kWG>
absl::Status LaunchTmaTyped(const TmaArgs<typename D::Layout>& p,
                            cudaStream_t stream) {
  using S = typename TmaBlock<D, kDP, kWG>::S;
  const int64_t units =
      p.records != nullptr
          ? p.num_units
          : (p.num_docs + p.docs_per_unit - 1) / p.docs_per_unit;
  if (units == 0 || p.num_tiles == 0) return absl::OkStatus();
  constexpr auto kernel = MaxSimTmaKernel<D, kDP, kWG>;
  absl::Status st = SetSmemLimitOnce<kernel>(S::kSmemBytes);
  if (!st.ok()) return st;
  kernel<<<static_cast<unsigned>(units), S::kThreads, S::kSmemBytes, stream>>>(
      p);
  MAXSIMD_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace maxsimd::detail

// Explicit instantiations of the launcher for one decode policy, every
// (padded width, warpgroups) bucket: one translation unit per policy
// (maxsim_tma_{fp16,bf16,int8,...}.cu), so that a 2-core build compiles them
// in parallel.
#define MAXSIMD_INSTANTIATE_TMA(DECODE, DP, WG)                          \
  template absl::Status maxsimd::detail::LaunchTmaTyped<DECODE, DP, WG>( \
      const maxsimd::TmaArgs<DECODE::Layout>&, cudaStream_t)
// PLAID: no 64-wide instance at 1 bit (8-byte rows are below the copy
// engine's 16-byte box minimum; maxsim_tma.h's TmaSupportsPlaidDim).
#define MAXSIMD_INSTANTIATE_TMA_PLAID_WIDE(TAG) \
  MAXSIMD_INSTANTIATE_TMA(TAG, 128, 1);         \
  MAXSIMD_INSTANTIATE_TMA(TAG, 128, 2);         \
  MAXSIMD_INSTANTIATE_TMA(TAG, 256, 1);         \
  MAXSIMD_INSTANTIATE_TMA(TAG, 256, 2)
#define MAXSIMD_INSTANTIATE_TMA_TAG(TAG) \
  MAXSIMD_INSTANTIATE_TMA(TAG, 64, 1);   \
  MAXSIMD_INSTANTIATE_TMA(TAG, 64, 2);   \
  MAXSIMD_INSTANTIATE_TMA(TAG, 128, 1);  \
  MAXSIMD_INSTANTIATE_TMA(TAG, 128, 2);  \
  MAXSIMD_INSTANTIATE_TMA(TAG, 256, 1);  \
  MAXSIMD_INSTANTIATE_TMA(TAG, 256, 2)

#endif  // MAXSIMD_KERNELS_DETAIL_MAXSIM_TMA_KERNEL_CUH_
