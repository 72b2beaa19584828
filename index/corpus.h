// A named corpus: configuration, an immutable snapshot of its segments, and
// the write path (append, delete) that publishes new snapshots.
//
// Readers call Snapshot() and keep the returned shared_ptr for the whole
// query: appends and deletes publish a new snapshot and never change one a
// reader holds, so a query in flight is never blocked or altered by a write.
// Memory of dropped segments is freed when the last snapshot holding them
// goes away.
//
// Thread-safety: Corpus is thread-safe. Writers (Append, Delete) are
// serialised by write_mu_; Snapshot() takes mu_ only to copy a shared_ptr.
// CorpusSnapshot and DocumentBuilder are not synchronised: a snapshot is
// immutable, and a builder belongs to one AddDocuments stream.
#ifndef MAXSIMD_INDEX_CORPUS_H_
#define MAXSIMD_INDEX_CORPUS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "index/id_index.h"
#include "index/plaid_codec.h"
#include "index/segment.h"
#include "kernels/backend.h"

namespace maxsimd {

class ThreadPool;

// Storage layouts. Values are part of the manifest format (index/FORMAT.md).
// kDense stores float16 or bfloat16 tokens; kInt8 stores int8 codes with
// one fp32 scale per token (kernels/quantize.h); kPlaid stores a centroid id,
// a packed residual row and a scale per token, with one codec per corpus
// (index/plaid_codec.h).
enum class Layout { kDense, kInt8, kPlaid };

struct CorpusConfig {
  std::string name;
  int32_t dim = 0;
  Layout layout = Layout::kDense;
  Placement placement = Placement::kAuto;
  bool normalize = false;
  // kFloat16 or kBFloat16 for kDense; kInt8 for kInt8; a PLAID dtype (its
  // nbits) for kPlaid.
  DType storage_dtype = DType::kFloat16;
  // kInt8 only: queries are quantised like documents instead of rounded to
  // float16 (SearchParams::quantize_queries).
  bool quantize_queries = false;
  // kPlaid only: the number of centroids to train; 0 picks ColBERT's count
  // for the first append's size, capped at one per 32 sampled tokens: at
  // most 2048 when k-means runs on the host, 16384 when the backend runs
  // it on a GPU (index/plaid_train.h, PlaidTrainOptionsFor). A codec that
  // comes with imported documents must have this many, when set.
  int64_t plaid_centroids = 0;
  // Token pooling at ingest (index/token_pooling.h): every added document's
  // n tokens are clustered into ceil(n / pool_factor) groups, each stored
  // as its mean (of the normalised tokens, and normalised again, when
  // `normalize` is set). 1 stores every token; at most kMaxTokenPoolFactor.
  // With pool_factor > 1 a document has at most kMaxPooledDocumentTokens
  // tokens, and DocumentBuilder::AddPlaid refuses documents that come
  // compressed.
  int32_t pool_factor = 1;
};

// Bytes one stored token row of `config` takes: dim elements of its storage
// dtype, plus an fp32 scale for the int8 layout; a packed residual row, a
// centroid id and a scale for the PLAID layout.
int64_t StoredRowBytes(const CorpusConfig& config);

// Bytes a DocumentBuilder holds per row until the append: the stored row,
// or for the PLAID layout the float16 row it compresses at the append.
int64_t BuilderRowBytes(const CorpusConfig& config);

// Limits on what a corpus accepts, from the server's flags.
struct CorpusLimits {
  int32_t max_dim = 4096;
  int32_t max_doc_tokens = 1 << 16;
  int32_t max_id_bytes = 256;
  // An append of at least this many token bytes is split by document range
  // over every shard of a sharded backend, so that a scan of it runs on all
  // of them; a smaller one goes whole to the shard holding the fewest bytes
  // of the corpus.
  int64_t shard_split_bytes = int64_t{8} << 20;
  // Most corpora a CorpusRegistry holds, counting those on disk that failed
  // to load (they hold their name): Create and LoadCorpus past it are
  // RESOURCE_EXHAUSTED naming --max_corpora. At least 1. Corpora found on
  // disk at start are all loaded, even past it.
  int32_t max_corpora = 1000;
};

// Checks a corpus name and configuration; names the field and the limit.
// INVALID_ARGUMENT for a bad value.
absl::Status ValidateCorpusConfig(const CorpusConfig& config,
                                  const CorpusLimits& limits);

// Checks that `backend` scores the storage dtype of `config`'s layout:
// UNIMPLEMENTED naming `layout` otherwise (an int8 corpus on a backend
// without the int8 kernel).
absl::Status CheckBackendServes(const CorpusConfig& config,
                                const Backend& backend);

// One consistent view of a corpus: its segments and their tombstones.
class CorpusSnapshot {
 public:
  CorpusSnapshot(CorpusConfig config,
                 std::vector<std::shared_ptr<const Segment>> segments,
                 std::vector<std::shared_ptr<const TombstoneSet>> tombstones,
                 std::shared_ptr<const CorpusCodec> codec = nullptr);

  const CorpusConfig& config() const { return config_; }
  // A PLAID corpus's codec; null for other layouts and before a PLAID
  // corpus's first documents.
  const std::shared_ptr<const CorpusCodec>& codec() const { return codec_; }
  const std::vector<std::shared_ptr<const Segment>>& segments() const {
    return segments_;
  }
  // Parallel to segments(); a null entry means nothing deleted there.
  const std::vector<std::shared_ptr<const TombstoneSet>>& tombstone_sets()
      const {
    return tombstones_;
  }
  const TombstoneSet* tombstones(size_t segment) const {
    return tombstones_[segment].get();
  }
  int64_t live_docs() const { return live_docs_; }
  int64_t live_tokens() const { return live_tokens_; }
  int64_t deleted_docs() const { return deleted_docs_; }
  int64_t bytes() const { return bytes_; }
  // Token bytes (with int8 scales) of the segments kept in host memory and
  // streamed per search.
  int64_t streamed_bytes() const { return streamed_bytes_; }
  // Internal index that the next appended document will get.
  int64_t next_index() const;

  // The live document with this external id, if any.
  std::optional<DocRef> Find(absl::string_view id) const {
    return Find(id, IdIndex::Hash(id));
  }
  // The same with the id's IdIndex::Hash.
  std::optional<DocRef> Find(absl::string_view id, uint64_t hash) const;
  // Find of every ids[i] into refs[i] ([ids.size()]; segment -1 where
  // ids[i] is not a live document), overlapping the cache misses of many
  // lookups. Returns how many were found.
  int64_t FindMany(absl::Span<const absl::string_view> ids, DocRef* refs) const;
  // External id of a live or deleted document by internal index.
  const std::string& IdOf(int64_t index) const;
  // Host + resident views of every segment, for SearchParams::segments.
  std::vector<SegmentRef> SegmentRefs() const;

 private:
  CorpusConfig config_;
  std::vector<std::shared_ptr<const Segment>> segments_;
  std::vector<std::shared_ptr<const TombstoneSet>> tombstones_;
  std::shared_ptr<const CorpusCodec> codec_;
  int64_t live_docs_ = 0;
  int64_t live_tokens_ = 0;
  int64_t deleted_docs_ = 0;
  int64_t bytes_ = 0;
  int64_t streamed_bytes_ = 0;
};

// Accumulates the documents of one AddDocuments stream, converting tokens to
// the corpus's storage dtype as they arrive (L2-normalised when the corpus
// asks, then rounded to float16/bfloat16 or, for the int8 layout, quantised
// per row) so that a large load is never held in fp32. For the PLAID layout
// the rows are kept as float16 and Corpus::Append compresses them (after
// training the codec on them when the corpus has none yet).
class DocumentBuilder {
 public:
  // `pool`, when not null, pools documents in parallel (pool_factor > 1);
  // it must outlive the builder.
  DocumentBuilder(const CorpusConfig& config, const CorpusLimits& limits,
                  ThreadPool* pool = nullptr);

  // Adds documents: ids[i] has token_counts[i] rows of `tokens`
  // ([sum(token_counts), dim] of `dtype`, little-endian), pooled to fewer
  // rows when the corpus's pool_factor is above 1. `where` prefixes error
  // messages (e.g. "AddDocuments message 3"). Errors, all INVALID_ARGUMENT
  // and leaving the builder unchanged: mismatched counts, bad lengths, empty
  // or over-long ids, an id repeated in the stream, NaN/Inf values, values
  // outside the storage's range, a document too long to pool.
  absl::Status Add(const std::vector<std::string>& ids,
                   const std::vector<int32_t>& token_counts, const void* tokens,
                   int64_t num_rows, DType dtype, absl::string_view where);

  // Adds documents compressed elsewhere (an imported PLAID index) to a
  // PLAID corpus's builder: rows of `codec` (its centroid ids `codes` and
  // packed `residuals`, num_rows of each), kept as they are, each scaled to
  // unit norm as the PLAID writers score them. A stream takes documents of
  // one codec, and not mixed with dense ones. The same checks as Add, plus
  // INVALID_ARGUMENT for a bad codec, a dim other than the corpus's, or a
  // code outside [0, num_centroids).
  absl::Status AddPlaid(const std::vector<std::string>& ids,
                        const std::vector<int32_t>& token_counts,
                        const PlaidCodec& codec, const int32_t* codes,
                        const uint8_t* residuals, int64_t num_rows,
                        absl::string_view where);

  int64_t num_docs() const { return static_cast<int64_t>(data_.ids.size()); }
  int64_t num_tokens() const { return data_.cu_seqlens.back(); }
  // Leaves the builder empty. Call TakeCodec() first: Corpus::Append takes
  // both.
  SegmentData Take();
  // The codec of documents added by AddPlaid; nullopt otherwise.
  std::optional<PlaidCodec> TakeCodec();

 private:
  absl::Status CheckDocs(const std::vector<std::string>& ids,
                         const std::vector<int32_t>& token_counts,
                         int64_t num_rows, absl::string_view where);
  void CommitDocs(const std::vector<std::string>& ids,
                  const std::vector<int32_t>& token_counts);
  // Row r of `tokens` as fp32 in `row` [dim]: finite, normalised when the
  // corpus normalises, within the storage dtype's range.
  absl::Status ReadRow(const void* tokens, DType dtype, int64_t r,
                       absl::string_view where, float* row) const;
  // Appends `rows` [n, dim] of fp32 rows read by ReadRow in the builder's
  // dtype (int8 rows with their scales).
  void StoreRows(const float* rows, int64_t n);
  // Add for a corpus with pool_factor > 1.
  absl::Status AddPooled(const std::vector<std::string>& ids,
                         const std::vector<int32_t>& token_counts,
                         const void* tokens, int64_t num_rows, DType dtype,
                         absl::string_view where);

  CorpusConfig config_;
  CorpusLimits limits_;
  ThreadPool* pool_;
  SegmentData data_;
  absl::flat_hash_set<std::string> seen_ids_;
  std::optional<PlaidCodec> codec_;  // AddPlaid's
};

class CorpusStore;
struct StoredCorpus;
struct StoredSegment;

// When Corpus::Compact rewrites segments.
struct CompactionOptions {
  // Adjacent segments of one shard are merged while the merged segment's
  // token bytes stay within this; a segment this large is sealed (never
  // merged further unless for its tombstones).
  int64_t seal_bytes = int64_t{64} << 20;
  // A segment with at least this fraction of its documents deleted is
  // rewritten without them.
  double tombstone_ratio = 0.25;
};

struct DeleteResult {
  int64_t deleted = 0;
  int64_t missing = 0;
};

class Corpus {
 public:
  // `backend` must outlive the corpus. With a `store`, every write is
  // committed to it (index/FORMAT.md) before it is published: a write that
  // returns OK is durable, and one that fails leaves the corpus unchanged
  // in memory and on disk. Errors: ValidateCorpusConfig's and
  // CheckBackendServes's.
  static absl::StatusOr<std::shared_ptr<Corpus>> Create(
      const CorpusConfig& config, const CorpusLimits& limits, Backend* backend,
      std::unique_ptr<CorpusStore> store);
  // In memory only.
  static absl::StatusOr<std::shared_ptr<Corpus>> Create(
      const CorpusConfig& config, const CorpusLimits& limits, Backend* backend);
  // The corpus a store holds: `contents` as CorpusStore::Open read them.
  // Each segment goes to its recorded shard (modulo the backend's shards).
  // Errors: the config's validation (CheckBackendServes included), or the
  // backend's upload errors.
  static absl::StatusOr<std::shared_ptr<Corpus>> Restore(
      const CorpusLimits& limits, Backend* backend,
      std::unique_ptr<CorpusStore> store, StoredCorpus contents);
  ~Corpus();

  const CorpusConfig& config() const { return config_; }
  const CorpusLimits& limits() const { return limits_; }
  std::shared_ptr<const CorpusSnapshot> Snapshot() const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Appends the documents as one new segment, atomically. Errors:
  // ALREADY_EXISTS naming the first id that is live in the corpus,
  // RESOURCE_EXHAUSTED if the backend has no room; on error nothing changes.
  // Returns the number of documents added.
  //
  // A PLAID corpus takes float16 rows (DocumentBuilder's), which it
  // compresses with its codec; a corpus without one first trains it on
  // these rows. It also takes rows already compressed with `codec`
  // (imported from a PLAID index): a corpus without a codec adopts it, one
  // with a codec takes only the same codec. INVALID_ARGUMENT names
  // plaid_nbits, plaid_centroids or the codec that does not fit.
  absl::StatusOr<int64_t> Append(SegmentData data,
                                 std::optional<PlaidCodec> codec = std::nullopt)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  // Tombstones the live documents with these ids, atomically. An unknown id
  // is NOT_FOUND (nothing deleted) unless ignore_missing.
  absl::StatusOr<DeleteResult> Delete(const std::vector<std::string>& ids,
                                      bool ignore_missing)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  // Merges runs of small adjacent segments (same shard) into segments of up
  // to options.seal_bytes, and rewrites segments whose deleted fraction
  // reaches options.tombstone_ratio, dropping deleted documents; the new
  // state is committed (with a store) and published like any write.
  // Readers keep the snapshot they hold. Returns the number of segments
  // rewritten (0: nothing to do). Internal indices of live documents may
  // change; ids and scores do not.
  absl::StatusOr<int> Compact(const CompactionOptions& options)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  // Deletes the corpus's directory, if it has a store (for a drop). The
  // corpus keeps serving what it holds in memory.
  absl::Status DestroyStorage() ABSL_LOCKS_EXCLUDED(write_mu_);

 private:
  Corpus(const CorpusConfig& config, const CorpusLimits& limits,
         Backend* backend, std::unique_ptr<CorpusStore> store);
  void Publish(std::shared_ptr<const CorpusSnapshot> snapshot)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The steps of a write. NewSegmentLocked makes a segment of `data`; with
  // a store it first writes the segment's file and appends its manifest
  // entry to *stored. CommitLocked commits `stored` (no-op without a store)
  // and removes the files no manifest names: those it replaced or, after a
  // failure, those it would have named. AbandonLocked removes the files of
  // a write that failed before its commit and returns `s`.
  absl::StatusOr<std::shared_ptr<const Segment>> NewSegmentLocked(
      SegmentData data, int64_t base_index, int shard,
      std::vector<StoredSegment>* stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status CommitLocked(std::vector<StoredSegment> stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status AbandonLocked(absl::Status s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // PLAID: makes float16 rows (or rows compressed with `codec`) into rows
  // compressed with the corpus's codec, which it trains or adopts (and
  // writes, with a store) when there is none; *codec_out receives the codec
  // the segment uses, to publish with it.
  absl::StatusOr<SegmentData> CompressLocked(
      SegmentData data, std::optional<PlaidCodec> codec,
      std::shared_ptr<const CorpusCodec>* codec_out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  const CorpusConfig config_;
  const CorpusLimits limits_;
  Backend* const backend_;
  absl::Mutex write_mu_;  // serialises Append and Delete
  // Null without persistence; its manifest lists the current snapshot's
  // segments in order.
  std::unique_ptr<CorpusStore> store_ ABSL_GUARDED_BY(write_mu_);
  // PLAID: the codec of every segment, set by the first append.
  std::shared_ptr<const CorpusCodec> codec_ ABSL_GUARDED_BY(write_mu_);
  mutable absl::Mutex mu_;
  std::shared_ptr<const CorpusSnapshot> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_CORPUS_H_
