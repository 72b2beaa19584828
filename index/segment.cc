#include "index/segment.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {

Segment::Segment(SegmentData data, int64_t base_index)
    : data_(std::move(data)), base_index_(base_index) {}

absl::StatusOr<std::shared_ptr<const Segment>> Segment::Create(
    SegmentData data, int64_t base_index, Backend* backend, int shard,
    Placement placement, std::shared_ptr<const CorpusCodec> codec) {
  if (static_cast<int64_t>(data.ids.size()) > IdIndex::kMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Segment: ", data.ids.size(), " documents; a segment holds at most ",
        IdIndex::kMaxRows));
  }
  const int nbits = PlaidNbits(data.dtype);
  if (nbits != 0) {
    if (codec == nullptr || codec->nbits() != nbits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Segment: PLAID rows of nbits ", nbits, " need a codec of nbits ",
          nbits, codec == nullptr ? "; there is none" : ""));
    }
    const int64_t k = codec->codec().num_centroids;
    for (size_t t = 0; t < data.codes.size(); ++t) {
      if (data.codes[t] < 0 || data.codes[t] >= k) {
        return absl::InvalidArgumentError(
            absl::StrCat("Segment: code ", data.codes[t], " of token ", t,
                         " is outside the codec's ", k, " centroids"));
      }
    }
  }
  std::shared_ptr<Segment> seg(new Segment(std::move(data), base_index));
  seg->shard_ = shard;
  if (nbits != 0) {
    seg->codec_ = std::move(codec);
    const SegmentData& d = seg->data_;
    seg->ivf_.reserve(d.codes.size());
    for (int64_t doc = 0; doc < seg->num_docs(); ++doc) {
      for (int64_t t = d.cu_seqlens[doc]; t < d.cu_seqlens[doc + 1]; ++t) {
        seg->ivf_.push_back({d.codes[t], static_cast<int32_t>(doc)});
      }
    }
    std::sort(seg->ivf_.begin(), seg->ivf_.end());
    seg->ivf_.erase(std::unique(seg->ivf_.begin(), seg->ivf_.end()),
                    seg->ivf_.end());
    seg->ivf_.shrink_to_fit();
  }
  Backend* store = backend->shard(shard);
  seg->index_ = IdIndex(&seg->data_.ids);
  // An empty token array still gets a (zero-byte) buffer so views are valid.
  const SegmentData& d = seg->data_;
  const bool scaled = d.dtype == DType::kInt8 || nbits != 0;
  auto place = [&](bool pin) -> absl::Status {
    auto put = [&](const void* host, size_t bytes) {
      return pin ? store->Pin(host, bytes) : store->Upload(host, bytes);
    };
    MAXSIMD_ASSIGN_OR_RETURN(seg->resident_tokens_,
                             put(d.tokens.data(), d.tokens.size()));
    if (scaled) {
      MAXSIMD_ASSIGN_OR_RETURN(
          seg->resident_scales_,
          put(d.scales.data(), d.scales.size() * sizeof(float)));
    }
    if (seg->codec_ != nullptr) {
      MAXSIMD_ASSIGN_OR_RETURN(
          seg->resident_codes_,
          put(d.codes.data(), d.codes.size() * sizeof(int32_t)));
    }
    seg->streamed_ = pin;
    return absl::OkStatus();
  };
  absl::Status placed = place(placement == Placement::kHost);
  // Auto falls back to the host only where the backend can stream it.
  if (placement == Placement::kAuto && absl::IsResourceExhausted(placed) &&
      store->StreamsDType(d.dtype)) {
    seg->resident_tokens_.reset();  // what fitted goes back first
    seg->resident_scales_.reset();
    seg->resident_codes_.reset();
    placed = place(true);
  }
  MAXSIMD_RETURN_IF_ERROR(placed);
  MAXSIMD_ASSIGN_OR_RETURN(
      seg->resident_cu_seqlens_,
      store->Upload(seg->data_.cu_seqlens.data(),
                    seg->data_.cu_seqlens.size() * sizeof(int64_t)));
  return std::shared_ptr<const Segment>(std::move(seg));
}

int64_t Segment::bytes() const {
  return token_bytes() +
         static_cast<int64_t>(data_.cu_seqlens.size() * sizeof(int64_t));
}

SegmentView Segment::HostView(const uint32_t* tombstones) const {
  SegmentView v;
  v.tokens = data_.tokens.data();
  v.scales = data_.scales.empty() ? nullptr : data_.scales.data();
  if (codec_ != nullptr) {
    v.codes = data_.codes.data();
    v.plaid = codec_->HostTables();
  }
  v.cu_seqlens = data_.cu_seqlens.data();
  v.tombstones = tombstones;
  v.num_docs = num_docs();
  v.num_tokens = num_tokens();
  v.dim = data_.dim;
  v.dtype = data_.dtype;
  v.base_index = base_index_;
  return v;
}

SegmentView Segment::ResidentView(const uint32_t* tombstones) const {
  SegmentView v = HostView(tombstones);
  v.tokens = resident_tokens_->data();
  if (resident_scales_ != nullptr) {
    v.scales = static_cast<const float*>(resident_scales_->data());
  }
  if (codec_ != nullptr) {
    v.codes = static_cast<const int32_t*>(resident_codes_->data());
    v.plaid = codec_->ResidentTables(shard_);
  }
  v.cu_seqlens = static_cast<const int64_t*>(resident_cu_seqlens_->data());
  return v;
}

absl::StatusOr<std::shared_ptr<const TombstoneSet>> TombstoneSet::WithDeleted(
    const TombstoneSet* base, int64_t num_docs,
    const std::vector<int64_t>& rows, Backend* backend) {
  std::shared_ptr<TombstoneSet> set(new TombstoneSet);
  if (base != nullptr) {
    set->bits_ = base->bits_;
    set->count_ = base->count_;
  } else {
    set->bits_.assign(static_cast<size_t>((num_docs + 31) / 32), 0u);
  }
  for (int64_t row : rows) {
    uint32_t& word = set->bits_[row >> 5];
    const uint32_t bit = 1u << (row & 31);
    if ((word & bit) == 0) {
      word |= bit;
      ++set->count_;
    }
  }
  MAXSIMD_ASSIGN_OR_RETURN(
      set->resident_,
      backend->Upload(set->bits_.data(), set->bits_.size() * sizeof(uint32_t)));
  return std::shared_ptr<const TombstoneSet>(std::move(set));
}

absl::StatusOr<std::shared_ptr<const TombstoneSet>> TombstoneSet::FromBits(
    std::vector<uint32_t> bits, Backend* backend) {
  std::shared_ptr<TombstoneSet> set(new TombstoneSet);
  set->bits_ = std::move(bits);
  for (uint32_t w : set->bits_) set->count_ += __builtin_popcount(w);
  MAXSIMD_ASSIGN_OR_RETURN(
      set->resident_,
      backend->Upload(set->bits_.data(), set->bits_.size() * sizeof(uint32_t)));
  return std::shared_ptr<const TombstoneSet>(std::move(set));
}

}  // namespace maxsimd
