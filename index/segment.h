// Immutable corpus segments and their tombstone sets.
//
// A segment holds a run of documents in ragged layout: one packed [T, dim]
// token array in the corpus's storage dtype plus int64 cu_seqlens offsets
// (and, for the int8 layout, one fp32 scale per token row; for the PLAID
// layout, packed residual rows with a centroid id and a scale per row and
// the corpus's codec), the documents'
// external ids, and a resident copy of the arrays made by the compute
// backend (device memory for the GPU backend). Deletes never touch a
// segment: they produce a new TombstoneSet for it, so a reader holding the
// old snapshot keeps seeing exactly what it started with.
//
// Thread-safety: both classes are immutable after construction and safe to
// share between threads through shared_ptr<const ...>.
#ifndef MAXSIMD_INDEX_SEGMENT_H_
#define MAXSIMD_INDEX_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "index/id_index.h"
#include "index/plaid_codec.h"
#include "kernels/backend.h"
#include "kernels/types.h"

namespace maxsimd {

// Where a segment's tokens live. kGpu: a resident copy (Backend::Upload).
// kHost: the host array itself, page-locked (Backend::Pin) and streamed to
// the device by each search. kAuto: resident while the backend's corpus
// budget and memory have room, host otherwise. Offsets and tombstones are
// resident in every case. Values are part of the manifest format
// (index/FORMAT.md).
enum class Placement { kAuto, kGpu, kHost };

// Documents ready to become a segment: validated, (when the corpus asks)
// L2-normalised, and converted to the storage dtype, or for the int8 layout
// quantised (kernels/quantize.h), or for the PLAID layout compressed
// (index/plaid_train.h).
struct SegmentData {
  int32_t dim = 0;
  DType dtype = DType::kFloat16;
  // [cu_seqlens.back()] rows of TokenRowBytes(dtype, dim) bytes.
  std::vector<char> tokens;
  std::vector<int64_t> cu_seqlens;  // [ids.size() + 1], starts at 0
  std::vector<std::string> ids;     // unique within the segment
  // dtype kInt8 and PLAID: [cu_seqlens.back()], the scale of each token
  // row; empty for every other dtype.
  std::vector<float> scales;
  // PLAID: [cu_seqlens.back()], each token row's centroid id; empty for
  // every other dtype.
  std::vector<int32_t> codes;
};

class Segment {
 public:
  // Places the arrays on shard `shard` of `backend` as `placement` asks
  // and indexes the ids. `base_index` is the internal index of the first
  // document. An int8 or PLAID segment's scales (and codes) go where its
  // tokens go (both resident, or both pinned and streamed). A PLAID segment
  // needs `codec` (the corpus's; the segment keeps it alive) and its codes
  // in range. Errors: RESOURCE_EXHAUSTED when the shard has no room under
  // that placement (nothing is kept); INVALID_ARGUMENT for more than
  // IdIndex::kMaxRows documents, and for a PLAID segment without a codec of
  // its nbits or with a code out of range.
  static absl::StatusOr<std::shared_ptr<const Segment>> Create(
      SegmentData data, int64_t base_index, Backend* backend, int shard = 0,
      Placement placement = Placement::kGpu,
      std::shared_ptr<const CorpusCodec> codec = nullptr);

  int64_t base_index() const { return base_index_; }
  int shard() const { return shard_; }
  // True when the tokens stay in host memory and are streamed per search.
  bool streamed() const { return streamed_; }
  int64_t num_docs() const { return static_cast<int64_t>(data_.ids.size()); }
  int64_t num_tokens() const { return data_.cu_seqlens.back(); }
  int64_t doc_tokens(int64_t doc) const {
    return data_.cu_seqlens[doc + 1] - data_.cu_seqlens[doc];
  }
  int32_t dim() const { return data_.dim; }
  DType dtype() const { return data_.dtype; }
  // Bytes of token storage (tokens, int8 and PLAID scales, PLAID codes) and
  // offsets held by this segment.
  int64_t bytes() const;
  // Bytes of tokens, scales and codes: what a host placement streams per
  // search.
  int64_t token_bytes() const {
    return static_cast<int64_t>(data_.tokens.size() +
                                data_.scales.size() * sizeof(float) +
                                data_.codes.size() * sizeof(int32_t));
  }
  const std::string& id(int64_t doc) const { return data_.ids[doc]; }
  // The host arrays (ids, offsets, tokens in the storage dtype, scales).
  const SegmentData& data() const { return data_; }
  // Row of `id` in this segment, deleted or not.
  std::optional<int64_t> Find(absl::string_view id) const {
    return Find(id, IdIndex::Hash(id));
  }
  // The same with the id's IdIndex::Hash.
  std::optional<int64_t> Find(absl::string_view id, uint64_t hash) const {
    const int64_t row = index_.Find(id, hash);
    if (row < 0) return std::nullopt;
    return row;
  }
  // The id index, for lookups of many ids that prefetch (IdIndex).
  const IdIndex& index() const { return index_; }

  // PLAID: the inverted file, (centroid id, document row) pairs, each
  // pair once, sorted; the documents with a token in a centroid's cell are
  // one equal_range. Empty for other layouts.
  struct IvfEntry {
    int32_t code = 0;
    int32_t doc = 0;
    bool operator<(const IvfEntry& o) const {
      return code != o.code ? code < o.code : doc < o.doc;
    }
    bool operator==(const IvfEntry& o) const {
      return code == o.code && doc == o.doc;
    }
  };
  const std::vector<IvfEntry>& ivf() const { return ivf_; }

  // Views with the given tombstone bitmap (host / resident); either may be
  // null for "nothing deleted".
  SegmentView HostView(const uint32_t* tombstones) const;
  SegmentView ResidentView(const uint32_t* tombstones) const;

 private:
  Segment(SegmentData data, int64_t base_index);

  SegmentData data_;
  int64_t base_index_ = 0;
  int shard_ = 0;
  bool streamed_ = false;
  IdIndex index_;  // over data_.ids
  std::unique_ptr<ResidentBuffer> resident_tokens_;
  std::unique_ptr<ResidentBuffer> resident_scales_;  // int8 and PLAID only
  std::unique_ptr<ResidentBuffer> resident_codes_;   // PLAID only
  std::shared_ptr<const CorpusCodec> codec_;         // PLAID only
  std::vector<IvfEntry> ivf_;                        // PLAID only
  std::unique_ptr<ResidentBuffer> resident_cu_seqlens_;
};

// The deleted rows of one segment as a bitmap (bit set = deleted), with its
// resident copy.
class TombstoneSet {
 public:
  // A copy of `base` (or an empty set when null) with `rows` also deleted.
  static absl::StatusOr<std::shared_ptr<const TombstoneSet>> WithDeleted(
      const TombstoneSet* base, int64_t num_docs,
      const std::vector<int64_t>& rows, Backend* backend);
  // A set holding exactly `bits` (one bit per document, as host_bits()).
  static absl::StatusOr<std::shared_ptr<const TombstoneSet>> FromBits(
      std::vector<uint32_t> bits, Backend* backend);

  bool Contains(int64_t row) const { return IsTombstoned(bits_.data(), row); }
  int64_t count() const { return count_; }
  const uint32_t* host_bits() const { return bits_.data(); }
  const std::vector<uint32_t>& bits() const { return bits_; }
  const uint32_t* resident_bits() const {
    return static_cast<const uint32_t*>(resident_->data());
  }

 private:
  std::vector<uint32_t> bits_;
  int64_t count_ = 0;
  std::unique_ptr<ResidentBuffer> resident_;
};

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_SEGMENT_H_
