// Plain types shared by the kernels, the index and the server: element
// types, non-owning views of ragged token storage, and ranked results.
//
// No CUDA types appear here, so server/ and index/ can include it freely.
// Views are non-owning and passed by value; whoever builds a view keeps the
// memory alive for as long as the view is used.
// Thread-safety: plain data; no synchronisation.
#ifndef MAXSIMD_KERNELS_TYPES_H_
#define MAXSIMD_KERNELS_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <limits>

namespace maxsimd {

// Largest top_k any backend must support.
inline constexpr int kMaxTopK = 4096;

// Element type of an embedding array. Values are part of the snapshot
// format (index/FORMAT.md), so never renumber them.
enum class DType : uint8_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  // Per-token symmetric int8 (the int8 corpus layout): each token row has
  // one fp32 scale next to it, SegmentView::scales (kernels/quantize.h).
  // A storage dtype only; queries never arrive as int8.
  kInt8 = 3,
  // PLAID residual rows of 1, 2, 4 or 8 bits per value (the plaid corpus
  // layout): each token row is dim * nbits / 8 bytes of packed bucket
  // indices (kernels/plaid_bits.h), with its centroid id in
  // SegmentView::codes and its scale in SegmentView::scales. Storage
  // dtypes only.
  kPlaid1 = 4,
  kPlaid2 = 5,
  kPlaid4 = 6,
  kPlaid8 = 7,
};

// Bytes per element; a PLAID row is byte-packed (TokenRowBytes).
inline constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    default:
      break;
  }
  return 1;
}

// Bits per value of a PLAID dtype; 0 for every other dtype.
inline constexpr int PlaidNbits(DType t) {
  switch (t) {
    case DType::kPlaid1:
      return 1;
    case DType::kPlaid2:
      return 2;
    case DType::kPlaid4:
      return 4;
    case DType::kPlaid8:
      return 8;
    default:
      break;
  }
  return 0;
}

// The PLAID dtype of `nbits` in {1, 2, 4, 8}; kFloat32 for any other value
// (never a PLAID dtype, so callers can test PlaidNbits() of the result).
inline constexpr DType PlaidDType(int nbits) {
  switch (nbits) {
    case 1:
      return DType::kPlaid1;
    case 2:
      return DType::kPlaid2;
    case 4:
      return DType::kPlaid4;
    case 8:
      return DType::kPlaid8;
    default:
      break;
  }
  return DType::kFloat32;
}

// Bytes of one stored token row of `dim` values (without int8 scales or
// PLAID codes, which live in arrays of their own). REQUIRES for PLAID:
// dim * nbits a multiple of 8.
inline constexpr int64_t TokenRowBytes(DType t, int32_t dim) {
  const int nbits = PlaidNbits(t);
  return nbits != 0 ? int64_t{dim} * nbits / 8
                    : int64_t{dim} * static_cast<int64_t>(DTypeSize(t));
}

const char* DTypeName(DType t);
// The corpus layout that stores `t`: "dense", "int8" or "plaid".
const char* LayoutOfDType(DType t);

// The codec of a PLAID segment, in the memory space of the view holding it:
// token row t decodes to
//   v[k] = centroids[codes[t]][k] + bucket_weights[bucket(t, k)]
// (bucket() in kernels/plaid_bits.h) and scores as scales[t] * <q, v>.
struct PlaidTablesView {
  const float* centroids = nullptr;  // [num_centroids, dim] fp32
  // The same rounded to float16 (bits), for kernels that decode in fp16.
  const uint16_t* centroids_f16 = nullptr;
  const float* bucket_weights = nullptr;  // [1 << nbits]
  int64_t num_centroids = 0;
};

// One segment's ragged token storage. Document i owns token rows
// [cu_seqlens[i], cu_seqlens[i + 1]) of `tokens`. All offsets are 64-bit so a
// segment may hold more than 2^31 elements. The pointers live in one memory
// space: host memory for the CPU backend, device memory for the GPU backend.
struct SegmentView {
  // [num_tokens] rows of TokenRowBytes(dtype, dim) bytes: dim elements of
  // dtype, or for PLAID one packed residual row.
  const void* tokens = nullptr;
  // dtype kInt8 and PLAID: [num_tokens] fp32 scales, one per token row, in
  // the same memory space as `tokens` (int8 token row t is tokens[t] *
  // scales[t]; a PLAID row's scale multiplies its cells, see
  // PlaidTablesView); nullptr for every other dtype.
  const float* scales = nullptr;
  // PLAID only: [num_tokens] centroid ids in [0, plaid.num_centroids), and
  // the codec; both in the memory space of `tokens`.
  const int32_t* codes = nullptr;
  PlaidTablesView plaid;
  const int64_t* cu_seqlens = nullptr;   // [num_docs + 1], cu_seqlens[0] == 0
  const uint32_t* tombstones = nullptr;  // num_docs bits, bit set = deleted;
                                         // nullptr means nothing deleted
  int64_t num_docs = 0;
  int64_t num_tokens = 0;
  int32_t dim = 0;
  DType dtype = DType::kFloat16;
  int64_t base_index = 0;  // internal index of document 0 of this segment
};

// True when document `doc` of a host-memory view is deleted.
inline bool IsTombstoned(const uint32_t* tombstones, int64_t doc) {
  return tombstones != nullptr &&
         ((tombstones[doc >> 5] >> (doc & 31)) & 1u) != 0;
}

// A document addressed by segment position in a search's segment list and
// its row within that segment.
struct DocRef {
  int32_t segment = 0;
  int64_t doc = 0;
};

// One ranked result. `index` is the internal index (segment base_index plus
// row), which is stable for the life of the document and breaks score ties:
// the lower index ranks first.
struct ScoredDoc {
  float score = 0.f;
  int64_t index = 0;
};

// Strict ranking order: higher score first, then lower internal index. NaN
// ranks below every number so that a corrupt score never displaces a real one.
inline bool RanksBefore(const ScoredDoc& a, const ScoredDoc& b) {
  const bool a_nan = a.score != a.score;
  const bool b_nan = b.score != b.score;
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.score != b.score) return a.score > b.score;
  return a.index < b.index;
}

inline bool operator==(const ScoredDoc& a, const ScoredDoc& b) {
  return a.index == b.index &&
         (a.score == b.score || (a.score != a.score && b.score != b.score));
}

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_TYPES_H_
