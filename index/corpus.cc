#include "index/corpus.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "index/plaid_train.h"
#include "index/storage.h"
#include "index/token_pooling.h"
#include "kernels/base/status_macros.h"
#include "kernels/element.h"
#include "kernels/plaid_bits.h"
#include "kernels/quantize.h"

namespace maxsimd {
namespace {

constexpr size_t kMaxNameBytes = 128;

// Cuts `data` into `pieces` contiguous document ranges of about equal token
// counts (none empty). REQUIRES: 1 <= pieces <= number of documents.
std::vector<SegmentData> SplitByTokens(SegmentData data, int pieces) {
  if (pieces == 1) return {std::move(data)};
  const int64_t docs = static_cast<int64_t>(data.ids.size());
  const int64_t total = data.cu_seqlens.back();
  const int64_t row_bytes =
      static_cast<int64_t>(data.tokens.size()) / std::max<int64_t>(total, 1);
  std::vector<SegmentData> out(pieces);
  int64_t first = 0;
  for (int p = 0; p < pieces; ++p) {
    // The piece ends at the first document boundary at or past its share of
    // the tokens, leaving at least one document for each later piece.
    int64_t last = docs - (pieces - 1 - p);
    if (p + 1 < pieces) {
      const int64_t share = total * (p + 1) / pieces;
      const int64_t at =
          std::lower_bound(data.cu_seqlens.begin() + first + 1,
                           data.cu_seqlens.begin() + last, share) -
          data.cu_seqlens.begin();
      last = std::max(first + 1, at);
    }
    SegmentData& d = out[p];
    d.dim = data.dim;
    d.dtype = data.dtype;
    const int64_t t0 = data.cu_seqlens[first];
    d.cu_seqlens.reserve(last - first + 1);
    for (int64_t i = first; i <= last; ++i) {
      d.cu_seqlens.push_back(data.cu_seqlens[i] - t0);
    }
    d.tokens.assign(data.tokens.begin() + t0 * row_bytes,
                    data.tokens.begin() + data.cu_seqlens[last] * row_bytes);
    if (!data.scales.empty()) {
      d.scales.assign(data.scales.begin() + t0,
                      data.scales.begin() + data.cu_seqlens[last]);
    }
    if (!data.codes.empty()) {
      d.codes.assign(data.codes.begin() + t0,
                     data.codes.begin() + data.cu_seqlens[last]);
    }
    d.ids.assign(std::make_move_iterator(data.ids.begin() + first),
                 std::make_move_iterator(data.ids.begin() + last));
    first = last;
  }
  return out;
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

}  // namespace

absl::Status ValidateCorpusConfig(const CorpusConfig& config,
                                  const CorpusLimits& limits) {
  // A name is also a directory name under --data_dir: no leading '.'.
  if (config.name.empty() || config.name.size() > kMaxNameBytes ||
      config.name[0] == '.' ||
      !std::all_of(config.name.begin(), config.name.end(), IsNameChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name must be 1 to ", kMaxNameBytes,
                     " characters from [A-Za-z0-9_.-], not starting with "
                     "'.', got \"",
                     config.name.substr(0, 160), "\""));
  }
  if (config.dim < 1 || config.dim > limits.max_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dim is ", config.dim, ", must be in [1, ", limits.max_dim, "]"));
  }
  if (config.pool_factor < 1 || config.pool_factor > kMaxTokenPoolFactor) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool_factor is ", config.pool_factor, ", must be in [1, ",
                     kMaxTokenPoolFactor, "]"));
  }
  switch (config.layout) {
    case Layout::kDense:
      if (config.storage_dtype != DType::kFloat16 &&
          config.storage_dtype != DType::kBFloat16) {
        return absl::InvalidArgumentError(absl::StrCat(
            "storage_dtype is ", DTypeName(config.storage_dtype),
            "; LAYOUT_DENSE stores DTYPE_FLOAT16 or DTYPE_BFLOAT16"));
      }
      if (config.quantize_queries) {
        return absl::InvalidArgumentError(
            "quantize_queries is set; it is only valid with LAYOUT_INT8");
      }
      return absl::OkStatus();
    case Layout::kInt8:
      if (config.storage_dtype != DType::kInt8) {
        return absl::InvalidArgumentError(absl::StrCat(
            "storage_dtype is ", DTypeName(config.storage_dtype),
            "; LAYOUT_INT8 stores DTYPE_INT8 (leave storage_dtype unset)"));
      }
      return absl::OkStatus();
    case Layout::kPlaid: {
      const int nbits = PlaidNbits(config.storage_dtype);
      if (nbits == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "storage_dtype is ", DTypeName(config.storage_dtype),
            "; LAYOUT_PLAID stores PLAID rows (leave storage_dtype unset and "
            "set plaid_nbits)"));
      }
      if ((int64_t{config.dim} * nbits) % 8 != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("plaid_nbits is ", nbits, " and dim ", config.dim,
                         "; dim x plaid_nbits must be a multiple of 8"));
      }
      if (config.plaid_centroids < 0 ||
          config.plaid_centroids > kMaxPlaidCentroids) {
        return absl::InvalidArgumentError(
            absl::StrCat("plaid_centroids is ", config.plaid_centroids,
                         ", must be in [0, ", kMaxPlaidCentroids, "]"));
      }
      if (config.quantize_queries) {
        return absl::InvalidArgumentError(
            "quantize_queries is set; it is only valid with LAYOUT_INT8");
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "layout is ", static_cast<int>(config.layout), ", not a known layout"));
}

absl::Status CheckBackendServes(const CorpusConfig& config,
                                const Backend& backend) {
  if (backend.SupportsDType(config.storage_dtype, config.dim)) {
    if (config.placement == Placement::kHost &&
        !backend.StreamsDType(config.storage_dtype)) {
      return absl::UnimplementedError(absl::StrCat(
          "placement: PLACEMENT_HOST needs a backend that streams ",
          DTypeName(config.storage_dtype), " tokens from host memory; backend ",
          backend.name(), " streams only dense corpora (use PLACEMENT_GPU)"));
    }
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("layout: ",
                   config.layout == Layout::kInt8    ? "LAYOUT_INT8"
                   : config.layout == Layout::kPlaid ? "LAYOUT_PLAID"
                                                     : "this layout",
                   " needs a backend that scores ",
                   DTypeName(config.storage_dtype), " tokens; backend ",
                   backend.description(), " has no kernel for them at dim ",
                   config.dim, " (the CPU backend, --cpu, has)"));
}

int64_t StoredRowBytes(const CorpusConfig& config) {
  const DType t = config.storage_dtype;
  return TokenRowBytes(t, config.dim) +
         (t == DType::kInt8 ? static_cast<int64_t>(sizeof(float)) : 0) +
         (PlaidNbits(t) != 0 ? static_cast<int64_t>(sizeof(float) + 4) : 0);
}

int64_t BuilderRowBytes(const CorpusConfig& config) {
  return config.layout == Layout::kPlaid
             ? std::max(StoredRowBytes(config), int64_t{config.dim} * 2)
             : StoredRowBytes(config);
}

// ---------------------------------------------------------------------------
// CorpusSnapshot

CorpusSnapshot::CorpusSnapshot(
    CorpusConfig config, std::vector<std::shared_ptr<const Segment>> segments,
    std::vector<std::shared_ptr<const TombstoneSet>> tombstones,
    std::shared_ptr<const CorpusCodec> codec)
    : config_(std::move(config)),
      segments_(std::move(segments)),
      tombstones_(std::move(tombstones)),
      codec_(std::move(codec)) {
  for (size_t s = 0; s < segments_.size(); ++s) {
    const Segment& seg = *segments_[s];
    bytes_ += seg.bytes();
    if (seg.streamed()) {
      streamed_bytes_ += seg.token_bytes();
    }
    live_docs_ += seg.num_docs();
    live_tokens_ += seg.num_tokens();
    if (const TombstoneSet* t = tombstones_[s].get()) {
      deleted_docs_ += t->count();
      live_docs_ -= t->count();
      for (int64_t d = 0; d < seg.num_docs(); ++d) {
        if (t->Contains(d)) live_tokens_ -= seg.doc_tokens(d);
      }
    }
  }
}

int64_t CorpusSnapshot::next_index() const {
  if (segments_.empty()) return 0;
  return segments_.back()->base_index() + segments_.back()->num_docs();
}

std::optional<DocRef> CorpusSnapshot::Find(absl::string_view id,
                                           uint64_t hash) const {
  // Newest first: an id deleted and added again is live only in the newer
  // segment.
  for (size_t s = segments_.size(); s-- > 0;) {
    if (std::optional<int64_t> row = segments_[s]->Find(id, hash)) {
      const TombstoneSet* t = tombstones_[s].get();
      if (t == nullptr || !t->Contains(*row)) {
        return DocRef{static_cast<int32_t>(s), *row};
      }
    }
  }
  return std::nullopt;
}

int64_t CorpusSnapshot::FindMany(absl::Span<const absl::string_view> ids,
                                 DocRef* refs) const {
  // Each lookup misses the cache twice on a large corpus (the slot, then
  // the id string it compares with), so three stages run kAhead ids apart:
  // hash an id and prefetch its slots; prefetch the id strings those slots
  // point at; look it up.
  constexpr size_t kAhead = 8;
  const size_t n = ids.size();
  std::vector<uint64_t> hashes(n);
  int64_t found = 0;
  for (size_t i = 0; i < n + 2 * kAhead; ++i) {
    if (i < n) {
      hashes[i] = IdIndex::Hash(ids[i]);
      for (const auto& seg : segments_) seg->index().Prefetch(hashes[i]);
    }
    if (i >= kAhead && i - kAhead < n) {
      for (const auto& seg : segments_) {
        seg->index().PrefetchId(hashes[i - kAhead]);
      }
    }
    if (i >= 2 * kAhead) {
      const size_t j = i - 2 * kAhead;
      const std::optional<DocRef> ref = Find(ids[j], hashes[j]);
      refs[j] = ref.value_or(DocRef{-1, 0});
      found += ref.has_value() ? 1 : 0;
    }
  }
  return found;
}

const std::string& CorpusSnapshot::IdOf(int64_t index) const {
  auto it = std::upper_bound(
      segments_.begin(), segments_.end(), index,
      [](int64_t i, const std::shared_ptr<const Segment>& seg) {
        return i < seg->base_index();
      });
  const Segment& seg = **(it - 1);
  return seg.id(index - seg.base_index());
}

std::vector<SegmentRef> CorpusSnapshot::SegmentRefs() const {
  std::vector<SegmentRef> refs;
  refs.reserve(segments_.size());
  for (size_t s = 0; s < segments_.size(); ++s) {
    const TombstoneSet* t = tombstones_[s].get();
    refs.push_back(
        {segments_[s]->HostView(t ? t->host_bits() : nullptr),
         segments_[s]->ResidentView(t ? t->resident_bits() : nullptr),
         segments_[s]->shard(), segments_[s]->streamed()});
  }
  return refs;
}

// ---------------------------------------------------------------------------
// DocumentBuilder

namespace {

// The dtype a DocumentBuilder converts rows to: the storage dtype, or
// float16 for PLAID rows that Corpus::Append compresses.
DType BuilderDType(const CorpusConfig& config) {
  return config.layout == Layout::kPlaid ? DType::kFloat16
                                         : config.storage_dtype;
}

}  // namespace

DocumentBuilder::DocumentBuilder(const CorpusConfig& config,
                                 const CorpusLimits& limits, ThreadPool* pool)
    : config_(config), limits_(limits), pool_(pool) {
  data_.dim = config.dim;
  data_.dtype = BuilderDType(config);
  data_.cu_seqlens.assign(1, 0);
}

absl::Status DocumentBuilder::CheckDocs(
    const std::vector<std::string>& ids,
    const std::vector<int32_t>& token_counts, int64_t num_rows,
    absl::string_view where) {
  if (ids.size() != token_counts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ids has ", ids.size(),
                     " entries but token_counts has ", token_counts.size()));
  }
  int64_t total = 0;
  absl::flat_hash_set<absl::string_view> in_call;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t n = token_counts[i];
    if (n < 1 || n > limits_.max_doc_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": token_counts[", i, "] is ", n,
                       ", must be in [1, ", limits_.max_doc_tokens, "]"));
    }
    if (config_.pool_factor > 1 && n > kMaxPooledDocumentTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": token_counts[", i, "] is ", n, "; corpus \"", config_.name,
          "\" pools tokens (pool_factor ", config_.pool_factor,
          "), which takes documents of at most ", kMaxPooledDocumentTokens,
          " tokens"));
    }
    total += n;
    const std::string& id = ids[i];
    if (id.empty() || id.size() > static_cast<size_t>(limits_.max_id_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ids[", i, "] must be 1 to ",
                       limits_.max_id_bytes, " bytes, got ", id.size()));
    }
    if (seen_ids_.contains(id) || !in_call.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ids[", i, "] \"", id, "\" appears twice in the stream"));
    }
  }
  if (total != num_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": tokens has ", num_rows,
                     " rows but token_counts sum to ", total));
  }
  return absl::OkStatus();
}

void DocumentBuilder::CommitDocs(const std::vector<std::string>& ids,
                                 const std::vector<int32_t>& token_counts) {
  for (size_t i = 0; i < ids.size(); ++i) {
    data_.ids.push_back(ids[i]);
    seen_ids_.insert(ids[i]);
    data_.cu_seqlens.push_back(data_.cu_seqlens.back() + token_counts[i]);
  }
}

absl::Status DocumentBuilder::AddPlaid(const std::vector<std::string>& ids,
                                       const std::vector<int32_t>& token_counts,
                                       const PlaidCodec& codec,
                                       const int32_t* codes,
                                       const uint8_t* residuals,
                                       int64_t num_rows,
                                       absl::string_view where) {
  if (config_.pool_factor > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": corpus \"", config_.name, "\" pools tokens (pool_factor ",
        config_.pool_factor,
        "), and an imported PLAID index's documents come compressed; import "
        "their dense tokens, or use a corpus with pool_factor 1"));
  }
  if (config_.layout != Layout::kPlaid) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     ": compressed PLAID documents go only into a LAYOUT_PLAID "
                     "corpus"));
  }
  if (num_docs() > 0 && !codec_.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the stream already holds dense documents"));
  }
  MAXSIMD_RETURN_IF_ERROR(CheckDocs(ids, token_counts, num_rows, where));
  MAXSIMD_RETURN_IF_ERROR(ValidatePlaidCodec(codec, "codec"));
  if (codec_.has_value() && !SamePlaidCodec(*codec_, codec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the stream already holds documents of another codec"));
  }
  if (codec.dim != config_.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the codec has dim ", codec.dim,
                     "; the corpus has dim ", config_.dim));
  }
  for (int64_t t = 0; t < num_rows; ++t) {
    if (codes[t] < 0 || codes[t] >= codec.num_centroids) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": code ", codes[t], " of token ", t, " is outside the ",
          codec.num_centroids, " centroids [0, ", codec.num_centroids, ")"));
    }
  }
  // The rows keep the codec's nbits; Corpus::Append checks them against
  // the corpus's.
  data_.dtype = PlaidDType(codec.nbits);
  const int64_t row_bytes = TokenRowBytes(data_.dtype, config_.dim);
  const PlaidRowDecoder decoder(codec.bucket_weights.data(), codec.nbits,
                                config_.dim);
  std::vector<float> v(static_cast<size_t>(config_.dim));
  for (int64_t t = 0; t < num_rows; ++t) {
    const uint8_t* row = residuals + t * row_bytes;
    data_.tokens.insert(data_.tokens.end(), row, row + row_bytes);
    data_.codes.push_back(codes[t]);
    // As both writers score: every decoded token L2-normalised.
    decoder.Decode(codec.centroids.data() + int64_t{codes[t]} * config_.dim,
                   row, v.data());
    data_.scales.push_back(PlaidInverseNorm(v.data(), config_.dim));
  }
  if (!codec_.has_value()) codec_ = codec;
  CommitDocs(ids, token_counts);
  return absl::OkStatus();
}

absl::Status DocumentBuilder::ReadRow(const void* tokens, DType dtype,
                                      int64_t r, absl::string_view where,
                                      float* row) const {
  const int32_t dim = config_.dim;
  ConvertToFloat(tokens, dtype, r * dim, dim, row);
  double norm2 = 0.0;
  for (int32_t j = 0; j < dim; ++j) {
    if (!std::isfinite(row[j])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tokens row ", r, " column ", j, " is ", row[j],
                       "; values must be finite"));
    }
    norm2 += static_cast<double>(row[j]) * row[j];
  }
  if (config_.normalize && norm2 > 0.0) ScaleToUnitNorm(row, dim, norm2);
  // Int8 rows have no range limit: their scale is fp32. A pooled row, a
  // mean of rows in range (normalised again when they were), stays in it.
  const float max_finite = data_.dtype == DType::kFloat16 ? 65504.f
                           : data_.dtype == DType::kInt8  ? FLT_MAX
                                                          : 3.38e38f;
  for (int32_t j = 0; j < dim; ++j) {
    if (std::fabs(row[j]) > max_finite) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tokens row ", r, " column ", j, " is ", row[j],
                       ", outside the range of the corpus's ",
                       DTypeName(data_.dtype), " storage"));
    }
  }
  return absl::OkStatus();
}

void DocumentBuilder::StoreRows(const float* rows, int64_t n) {
  const int32_t dim = config_.dim;
  const bool int8 = data_.dtype == DType::kInt8;
  const size_t out_row = static_cast<size_t>(dim) * DTypeSize(data_.dtype);
  const size_t old_size = data_.tokens.size();
  const size_t old_rows = data_.scales.size();
  data_.tokens.resize(old_size + static_cast<size_t>(n) * out_row);
  if (int8) data_.scales.resize(old_rows + static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const float* row = rows + r * dim;
    char* out = data_.tokens.data() + old_size + r * out_row;
    if (int8) {
      data_.scales[old_rows + r] =
          QuantizeInt8Row(row, dim, reinterpret_cast<int8_t*>(out));
    } else {
      ConvertFromFloat(row, dim, data_.dtype, out);
    }
  }
}

absl::Status DocumentBuilder::Add(const std::vector<std::string>& ids,
                                  const std::vector<int32_t>& token_counts,
                                  const void* tokens, int64_t num_rows,
                                  DType dtype, absl::string_view where) {
  if (codec_.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the stream already holds compressed PLAID documents"));
  }
  MAXSIMD_RETURN_IF_ERROR(CheckDocs(ids, token_counts, num_rows, where));
  if (config_.pool_factor > 1) {
    return AddPooled(ids, token_counts, tokens, num_rows, dtype, where);
  }
  // Every row is read and checked before any is stored, in chunks, so that
  // a bad value leaves nothing behind.
  const size_t old_size = data_.tokens.size();
  const size_t old_rows = data_.scales.size();
  constexpr int64_t kChunk = 256;
  std::vector<float> rows(static_cast<size_t>(kChunk) * config_.dim);
  for (int64_t first = 0; first < num_rows; first += kChunk) {
    const int64_t n = std::min(kChunk, num_rows - first);
    for (int64_t r = 0; r < n; ++r) {
      const absl::Status st = ReadRow(tokens, dtype, first + r, where,
                                      rows.data() + r * config_.dim);
      if (!st.ok()) {
        data_.tokens.resize(old_size);
        data_.scales.resize(old_rows);
        return st;
      }
    }
    StoreRows(rows.data(), n);
  }
  CommitDocs(ids, token_counts);
  return absl::OkStatus();
}

absl::Status DocumentBuilder::AddPooled(
    const std::vector<std::string>& ids,
    const std::vector<int32_t>& token_counts, const void* tokens,
    int64_t num_rows, DType dtype, absl::string_view where) {
  const int32_t dim = config_.dim;
  std::vector<float> rows(static_cast<size_t>(num_rows) * dim);
  for (int64_t r = 0; r < num_rows; ++r) {
    MAXSIMD_RETURN_IF_ERROR(
        ReadRow(tokens, dtype, r, where, rows.data() + r * dim));
  }
  std::vector<int64_t> cu(token_counts.size() + 1, 0);
  for (size_t i = 0; i < token_counts.size(); ++i) {
    cu[i + 1] = cu[i] + token_counts[i];
  }
  std::vector<float> pooled;
  std::vector<int64_t> pooled_cu;
  const absl::Status st =
      PoolTokenBatch(rows, cu, dim, {config_.pool_factor, config_.normalize},
                     pool_, &pooled, &pooled_cu);
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat(where, ": ", st.message()));
  }
  std::vector<int32_t> pooled_counts(token_counts.size());
  for (size_t i = 0; i < token_counts.size(); ++i) {
    pooled_counts[i] = static_cast<int32_t>(pooled_cu[i + 1] - pooled_cu[i]);
  }
  StoreRows(pooled.data(), pooled_cu.back());
  CommitDocs(ids, pooled_counts);
  return absl::OkStatus();
}

SegmentData DocumentBuilder::Take() {
  SegmentData out = std::move(data_);
  data_ = SegmentData();
  data_.dim = config_.dim;
  data_.dtype = BuilderDType(config_);
  data_.cu_seqlens.assign(1, 0);
  seen_ids_.clear();
  codec_.reset();
  return out;
}

std::optional<PlaidCodec> DocumentBuilder::TakeCodec() {
  std::optional<PlaidCodec> out = std::move(codec_);
  codec_.reset();
  return out;
}

// ---------------------------------------------------------------------------
// Corpus

Corpus::Corpus(const CorpusConfig& config, const CorpusLimits& limits,
               Backend* backend, std::unique_ptr<CorpusStore> store)
    : config_(config),
      limits_(limits),
      backend_(backend),
      store_(std::move(store)),
      current_(std::make_shared<CorpusSnapshot>(
          config, std::vector<std::shared_ptr<const Segment>>{},
          std::vector<std::shared_ptr<const TombstoneSet>>{})) {}

Corpus::~Corpus() = default;

absl::StatusOr<std::shared_ptr<Corpus>> Corpus::Create(
    const CorpusConfig& config, const CorpusLimits& limits, Backend* backend,
    std::unique_ptr<CorpusStore> store) {
  MAXSIMD_RETURN_IF_ERROR(ValidateCorpusConfig(config, limits));
  MAXSIMD_RETURN_IF_ERROR(CheckBackendServes(config, *backend));
  return std::shared_ptr<Corpus>(
      new Corpus(config, limits, backend, std::move(store)));
}

absl::StatusOr<std::shared_ptr<Corpus>> Corpus::Create(
    const CorpusConfig& config, const CorpusLimits& limits, Backend* backend) {
  return Create(config, limits, backend, nullptr);
}

absl::StatusOr<std::shared_ptr<Corpus>> Corpus::Restore(
    const CorpusLimits& limits, Backend* backend,
    std::unique_ptr<CorpusStore> store, StoredCorpus contents) {
  const CorpusConfig config = contents.manifest.config;
  MAXSIMD_RETURN_IF_ERROR(ValidateCorpusConfig(config, limits));
  MAXSIMD_RETURN_IF_ERROR(CheckBackendServes(config, *backend));
  const std::vector<StoredSegment>& stored = contents.manifest.segments;
  std::shared_ptr<const CorpusCodec> codec;
  if (contents.codec.has_value()) {
    MAXSIMD_ASSIGN_OR_RETURN(
        codec, CorpusCodec::Create(std::move(*contents.codec), backend));
  }
  std::vector<std::shared_ptr<const Segment>> segments;
  std::vector<std::shared_ptr<const TombstoneSet>> tombstones;
  for (size_t i = 0; i < stored.size(); ++i) {
    const int shard = stored[i].shard % backend->num_shards();
    MAXSIMD_ASSIGN_OR_RETURN(
        std::shared_ptr<const Segment> segment,
        Segment::Create(std::move(contents.segments[i]), stored[i].base_index,
                        backend, shard, config.placement, codec));
    std::shared_ptr<const TombstoneSet> dead;
    if (!contents.tombstones[i].empty()) {
      MAXSIMD_ASSIGN_OR_RETURN(
          dead, TombstoneSet::FromBits(std::move(contents.tombstones[i]),
                                       backend->shard(shard)));
    }
    segments.push_back(std::move(segment));
    tombstones.push_back(std::move(dead));
  }
  std::shared_ptr<Corpus> corpus(
      new Corpus(config, limits, backend, std::move(store)));
  {
    absl::MutexLock write_lock(&corpus->write_mu_);
    corpus->codec_ = codec;
  }
  corpus->Publish(std::make_shared<CorpusSnapshot>(
      config, std::move(segments), std::move(tombstones), std::move(codec)));
  return corpus;
}

absl::StatusOr<int> Corpus::Compact(const CompactionOptions& options) {
  absl::MutexLock write_lock(&write_mu_);
  const std::shared_ptr<const CorpusSnapshot> base = Snapshot();
  const auto& segs = base->segments();
  const size_t n = segs.size();
  auto live_bytes = [&](size_t i) {
    const Segment& seg = *segs[i];
    const TombstoneSet* dead = base->tombstones(i);
    if (dead == nullptr || seg.num_docs() == 0) return seg.bytes();
    return seg.bytes() * (seg.num_docs() - dead->count()) / seg.num_docs();
  };
  auto dirty = [&](size_t i) {
    const TombstoneSet* dead = base->tombstones(i);
    return dead != nullptr && segs[i]->num_docs() > 0 &&
           static_cast<double>(dead->count()) >=
               options.tombstone_ratio * segs[i]->num_docs();
  };
  // Runs [begin, end) to rewrite: greedy over adjacent segments.
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    int64_t bytes = live_bytes(i);
    if (segs[i]->bytes() < options.seal_bytes) {
      while (j < n && segs[j]->shard() == segs[i]->shard() &&
             segs[j]->bytes() < options.seal_bytes &&
             bytes + live_bytes(j) <= options.seal_bytes) {
        bytes += live_bytes(j);
        ++j;
      }
    }
    if (j - i >= 2 || dirty(i)) runs.emplace_back(i, j);
    i = j;
  }
  if (runs.empty()) return 0;

  std::vector<std::shared_ptr<const Segment>> out_segs;
  std::vector<std::shared_ptr<const TombstoneSet>> out_dead;
  std::vector<StoredSegment> stored;
  const std::vector<StoredSegment> old_stored =
      store_ != nullptr ? store_->manifest().segments
                        : std::vector<StoredSegment>();
  int rewritten = 0;
  size_t next_run = 0;
  for (size_t i = 0; i < n;) {
    if (next_run == runs.size() || runs[next_run].first != i) {
      out_segs.push_back(segs[i]);
      out_dead.push_back(base->tombstone_sets()[i]);
      if (store_ != nullptr) stored.push_back(old_stored[i]);
      ++i;
      continue;
    }
    const auto [begin, end] = runs[next_run++];
    // The run's live documents, in order, as one segment.
    SegmentData merged;
    merged.dim = config_.dim;
    merged.dtype = config_.storage_dtype;
    merged.cu_seqlens.assign(1, 0);
    const size_t row =
        static_cast<size_t>(TokenRowBytes(merged.dtype, config_.dim));
    for (size_t k = begin; k < end; ++k) {
      const SegmentData& d = segs[k]->data();
      const TombstoneSet* dead = base->tombstones(k);
      for (int64_t doc = 0; doc < segs[k]->num_docs(); ++doc) {
        if (dead != nullptr && dead->Contains(doc)) continue;
        merged.ids.push_back(d.ids[doc]);
        merged.tokens.insert(merged.tokens.end(),
                             d.tokens.begin() + d.cu_seqlens[doc] * row,
                             d.tokens.begin() + d.cu_seqlens[doc + 1] * row);
        if (!d.scales.empty()) {  // int8, PLAID
          merged.scales.insert(merged.scales.end(),
                               d.scales.begin() + d.cu_seqlens[doc],
                               d.scales.begin() + d.cu_seqlens[doc + 1]);
        }
        if (!d.codes.empty()) {  // PLAID
          merged.codes.insert(merged.codes.end(),
                              d.codes.begin() + d.cu_seqlens[doc],
                              d.codes.begin() + d.cu_seqlens[doc + 1]);
        }
        merged.cu_seqlens.push_back(merged.cu_seqlens.back() +
                                    d.cu_seqlens[doc + 1] - d.cu_seqlens[doc]);
      }
    }
    rewritten += static_cast<int>(end - begin);
    i = end;
    if (merged.ids.empty()) continue;  // everything in the run was deleted
    const int64_t first = segs[begin]->base_index();
    const int shard = segs[begin]->shard();
    MAXSIMD_ASSIGN_OR_RETURN(
        std::shared_ptr<const Segment> segment,
        NewSegmentLocked(std::move(merged), first, shard, &stored));
    out_segs.push_back(std::move(segment));
    out_dead.push_back(nullptr);
  }
  MAXSIMD_RETURN_IF_ERROR(CommitLocked(std::move(stored)));
  Publish(std::make_shared<CorpusSnapshot>(config_, std::move(out_segs),
                                           std::move(out_dead), codec_));
  return rewritten;
}

absl::StatusOr<std::shared_ptr<const Segment>> Corpus::NewSegmentLocked(
    SegmentData data, int64_t base_index, int shard,
    std::vector<StoredSegment>* stored) {
  if (store_ != nullptr) {
    absl::StatusOr<std::string> file = store_->WriteSegment(data);
    if (!file.ok()) return AbandonLocked(file.status());
    stored->push_back(
        {*file, "", base_index, static_cast<int64_t>(data.ids.size()), shard});
  }
  absl::StatusOr<std::shared_ptr<const Segment>> segment = Segment::Create(
      std::move(data), base_index, backend_, shard, config_.placement, codec_);
  if (!segment.ok()) return AbandonLocked(segment.status());
  return segment;
}

absl::Status Corpus::CommitLocked(std::vector<StoredSegment> stored) {
  if (store_ == nullptr) return absl::OkStatus();
  absl::Status committed = store_->Commit(std::move(stored));
  // The files the commit replaced or, after a failure, the ones it would
  // have named.
  store_->CollectGarbage();
  return committed;
}

absl::Status Corpus::AbandonLocked(absl::Status s) {
  if (store_ != nullptr) store_->CollectGarbage();
  return s;
}

namespace {

// Rows [first, first + n) of float16 `data` as fp32.
std::vector<float> RowsAsFloat(const SegmentData& data, int64_t first,
                               int64_t n) {
  std::vector<float> out(static_cast<size_t>(n * data.dim));
  ConvertToFloat(data.tokens.data(), data.dtype, first * data.dim, n * data.dim,
                 out.data());
  return out;
}

// Rows this many at a time are widened to fp32 and compressed, so that a
// large append is never held in fp32.
constexpr int64_t kCompressRows = int64_t{1} << 16;

}  // namespace

absl::StatusOr<SegmentData> Corpus::CompressLocked(
    SegmentData data, std::optional<PlaidCodec> codec,
    std::shared_ptr<const CorpusCodec>* codec_out) {
  const int nbits = PlaidNbits(config_.storage_dtype);
  const int64_t rows = data.cu_seqlens.back();
  std::optional<PlaidCodec> adopt;
  if (PlaidNbits(data.dtype) != 0) {
    // Rows compressed elsewhere (an imported PLAID index), with `codec`.
    if (!codec.has_value()) {
      return absl::InvalidArgumentError(
          "Append: compressed PLAID rows came without their codec");
    }
    if (codec->nbits != nbits || PlaidNbits(data.dtype) != nbits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plaid_nbits: the documents are compressed with ", codec->nbits,
          " bits per value; corpus \"", config_.name, "\" stores ", nbits));
    }
    if (codec->dim != config_.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim: the documents' codec has dim ", codec->dim,
                       "; corpus \"", config_.name, "\" has ", config_.dim));
    }
    if (config_.plaid_centroids != 0 &&
        codec->num_centroids != config_.plaid_centroids) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plaid_centroids: corpus \"", config_.name, "\" was created for ",
          config_.plaid_centroids, " centroids; the documents' codec has ",
          codec->num_centroids));
    }
    if (codec_ != nullptr) {
      if (!SamePlaidCodec(codec_->codec(), *codec)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "codec: the documents were compressed with another codec than "
            "corpus \"",
            config_.name,
            "\"'s; import them into a new corpus, or add them as dense "
            "tokens"));
      }
      return data;
    }
    MAXSIMD_RETURN_IF_ERROR(ValidatePlaidCodec(*codec, "codec"));
    adopt = std::move(codec);
  } else {
    if (data.dtype != DType::kFloat16 || data.dim != config_.dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Append: a PLAID corpus takes float16 rows to compress, not ",
          DTypeName(data.dtype)));
    }
    if (codec_ == nullptr) {
      // Train on a uniform sample of the rows; with k-means on the backend's
      // GPU, on a larger one, for ColBERT's centroid count of all the rows
      // (PlaidTrainOptionsFor).
      PlaidTrainOptions options = PlaidTrainOptionsFor(backend_);
      options.nbits = nbits;
      options.num_centroids = config_.plaid_centroids;
      options.corpus_tokens = rows;
      const int64_t n = std::min(rows, options.max_sample);
      std::vector<float> sample(static_cast<size_t>(n * data.dim));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = rows <= n ? i : i * rows / n;
        ConvertToFloat(data.tokens.data(), data.dtype, r * data.dim, data.dim,
                       sample.data() + i * data.dim);
      }
      absl::StatusOr<PlaidCodec> trained =
          TrainPlaidCodec(sample.data(), n, data.dim, options);
      if (!trained.ok()) {
        return absl::Status(
            trained.status().code(),
            absl::StrCat("plaid_centroids: training the codec of corpus \"",
                         config_.name, "\" on ", n,
                         " tokens failed: ", trained.status().message()));
      }
      adopt = *std::move(trained);
    }
  }
  if (adopt.has_value()) {
    if (store_ != nullptr) {
      absl::Status written = store_->WriteCodec(*adopt);
      if (!written.ok()) return AbandonLocked(written);
    }
    absl::StatusOr<std::shared_ptr<const CorpusCodec>> made =
        CorpusCodec::Create(*std::move(adopt), backend_);
    if (!made.ok()) return AbandonLocked(made.status());
    *codec_out = *std::move(made);
  }
  if (PlaidNbits(data.dtype) != 0) return data;
  // Compress the float16 rows with the codec.
  const PlaidCodec& c = (*codec_out)->codec();
  SegmentData out;
  out.dim = data.dim;
  out.dtype = config_.storage_dtype;
  out.cu_seqlens = std::move(data.cu_seqlens);
  out.ids = std::move(data.ids);
  const int64_t row_bytes = TokenRowBytes(out.dtype, out.dim);
  out.tokens.resize(static_cast<size_t>(rows * row_bytes));
  out.codes.resize(static_cast<size_t>(rows));
  out.scales.assign(static_cast<size_t>(rows), 1.f);
  const PlaidRowDecoder decoder(c.bucket_weights.data(), nbits, out.dim);
  // Each row's centroid on the backend's GPU where it has k-means (the
  // host's codes, bit for bit), else on the host.
  const PlaidAssignFn assign = BackendAssignFn(backend_);
  std::vector<int64_t> codes;
  std::vector<float> v(static_cast<size_t>(out.dim));
  for (int64_t first = 0; first < rows; first += kCompressRows) {
    const int64_t n = std::min(kCompressRows, rows - first);
    const std::vector<float> chunk = RowsAsFloat(data, first, n);
    codes.resize(static_cast<size_t>(n));
    uint8_t* residuals =
        reinterpret_cast<uint8_t*>(out.tokens.data()) + first * row_bytes;
    absl::Status compressed = CompressPlaidEmbeddings(
        c, chunk.data(), n, codes.data(), residuals, assign);
    if (!compressed.ok()) return AbandonLocked(compressed);
    for (int64_t i = 0; i < n; ++i) {
      out.codes[first + i] = static_cast<int32_t>(codes[i]);
      if (config_.normalize) {
        decoder.Decode(c.centroids.data() + codes[i] * out.dim,
                       residuals + i * row_bytes, v.data());
        out.scales[first + i] = PlaidInverseNorm(v.data(), out.dim);
      }
    }
  }
  return out;
}

absl::Status Corpus::DestroyStorage() {
  absl::MutexLock write_lock(&write_mu_);
  if (store_ == nullptr) return absl::OkStatus();
  absl::Status s = DestroyCorpusDirectory(store_->dir());
  store_.reset();
  return s;
}

std::shared_ptr<const CorpusSnapshot> Corpus::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

void Corpus::Publish(std::shared_ptr<const CorpusSnapshot> snapshot) {
  absl::MutexLock lock(&mu_);
  current_ = std::move(snapshot);
}

absl::StatusOr<int64_t> Corpus::Append(SegmentData data,
                                       std::optional<PlaidCodec> codec) {
  absl::MutexLock write_lock(&write_mu_);
  const std::shared_ptr<const CorpusSnapshot> base = Snapshot();
  for (const std::string& id : data.ids) {
    if (base->Find(id)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "ids: \"", id, "\" is already in corpus \"", config_.name, "\""));
    }
  }
  // The codec to publish: the corpus's, or the one this append brings.
  std::shared_ptr<const CorpusCodec> next_codec = codec_;
  if (config_.layout == Layout::kPlaid && data.dim == config_.dim) {
    if (data.ids.empty()) return 0;  // nothing to compress (or train on)
    MAXSIMD_ASSIGN_OR_RETURN(
        data, CompressLocked(std::move(data), std::move(codec), &next_codec));
  }
  if (data.dim != config_.dim || data.dtype != config_.storage_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Append: documents have dim ", data.dim, " and dtype ",
        DTypeName(data.dtype), " but corpus \"", config_.name, "\" has dim ",
        config_.dim, " and dtype ", DTypeName(config_.storage_dtype)));
  }
  const size_t rows = static_cast<size_t>(data.cu_seqlens.back());
  const bool plaid = PlaidNbits(data.dtype) != 0;
  if (data.scales.size() != (data.dtype == DType::kInt8 || plaid ? rows : 0) ||
      data.codes.size() != (plaid ? rows : 0)) {
    return AbandonLocked(absl::InvalidArgumentError(
        absl::StrCat("Append: documents have ", data.scales.size(),
                     " scales and ", data.codes.size(), " codes for ", rows,
                     " ", DTypeName(data.dtype), " token rows")));
  }
  const int64_t added = static_cast<int64_t>(data.ids.size());
  if (added == 0) return 0;
  // Shards ordered by how many bytes of this corpus they hold, fewest first.
  std::vector<int64_t> held(backend_->num_shards(), 0);
  for (const auto& seg : base->segments()) held[seg->shard()] += seg->bytes();
  std::vector<int> order(held.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&held](int a, int b) { return held[a] < held[b]; });
  // A large append is split by document range over every shard; a small
  // one goes whole to the emptiest shard.
  const int pieces =
      static_cast<int64_t>(data.tokens.size()) >= limits_.shard_split_bytes
          ? static_cast<int>(std::min<int64_t>(order.size(), added))
          : 1;
  std::vector<SegmentData> parts = SplitByTokens(std::move(data), pieces);
  std::vector<std::shared_ptr<const Segment>> segments = base->segments();
  std::vector<std::shared_ptr<const TombstoneSet>> tombstones =
      base->tombstone_sets();
  std::vector<StoredSegment> stored;
  if (store_ != nullptr) stored = store_->manifest().segments;
  int64_t next = base->next_index();
  // Segments are made with the codec this append publishes; the corpus
  // keeps it only once the commit succeeded.
  std::swap(codec_, next_codec);
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t docs = static_cast<int64_t>(parts[i].ids.size());
    absl::StatusOr<std::shared_ptr<const Segment>> segment =
        NewSegmentLocked(std::move(parts[i]), next, order[i], &stored);
    if (!segment.ok()) {
      std::swap(codec_, next_codec);
      return segment.status();
    }
    next += docs;
    segments.push_back(*std::move(segment));
    tombstones.push_back(nullptr);
  }
  if (absl::Status s = CommitLocked(std::move(stored)); !s.ok()) {
    std::swap(codec_, next_codec);
    return s;
  }
  Publish(std::make_shared<CorpusSnapshot>(config_, std::move(segments),
                                           std::move(tombstones), codec_));
  return added;
}

absl::StatusOr<DeleteResult> Corpus::Delete(const std::vector<std::string>& ids,
                                            bool ignore_missing) {
  absl::MutexLock write_lock(&write_mu_);
  const std::shared_ptr<const CorpusSnapshot> base = Snapshot();
  DeleteResult result;
  std::map<int32_t, std::vector<int64_t>> rows_by_segment;
  absl::flat_hash_set<absl::string_view> unique;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!unique.insert(ids[i]).second) continue;
    std::optional<DocRef> ref = base->Find(ids[i]);
    if (!ref) {
      if (!ignore_missing) {
        return absl::NotFoundError(absl::StrCat("ids[", i, "]: \"", ids[i],
                                                "\" is not in corpus \"",
                                                config_.name, "\""));
      }
      ++result.missing;
      continue;
    }
    rows_by_segment[ref->segment].push_back(ref->doc);
    ++result.deleted;
  }
  if (result.deleted == 0) return result;
  std::vector<std::shared_ptr<const TombstoneSet>> tombstones =
      base->tombstone_sets();
  std::vector<StoredSegment> stored;
  if (store_ != nullptr) stored = store_->manifest().segments;
  for (const auto& [s, rows] : rows_by_segment) {
    const Segment& segment = *base->segments()[s];
    MAXSIMD_ASSIGN_OR_RETURN(
        tombstones[s],
        TombstoneSet::WithDeleted(base->tombstones(s), segment.num_docs(), rows,
                                  backend_->shard(segment.shard())));
    if (store_ != nullptr) {
      absl::StatusOr<std::string> file =
          store_->WriteTombstones(segment.num_docs(), tombstones[s]->bits());
      if (!file.ok()) return AbandonLocked(file.status());
      stored[s].tombstones = *file;
    }
  }
  MAXSIMD_RETURN_IF_ERROR(CommitLocked(std::move(stored)));
  Publish(std::make_shared<CorpusSnapshot>(config_, base->segments(),
                                           std::move(tombstones), codec_));
  return result;
}

}  // namespace maxsimd
