// The compute backend interface: exact MaxSim + top-k over ragged segments,
// implemented by the CPU backend (maxsim_cpu.h) and the GPU backend
// (gpu_backend.h, built with MAXSIMD_WITH_CUDA).
//
//   score(q, d) = sum over query tokens s of max over doc tokens t of <q_s,
//   d_t>
//
// with fp32 accumulation; a document with no tokens scores -inf. A backend
// with the kernels also runs the assignment step of k-means for PLAID codec
// training (AssignNearestCentroids) and the centroid product of PLAID
// candidate generation (ScoreCentroids).
//
// Ownership: the index owns segment data on the host and asks the backend to
// make a resident copy of each array (Upload). The returned buffer owns that
// copy (device memory for the GPU backend; the CPU backend points at the host
// array, which the index keeps alive for at least as long as the buffer).
// Search() reads views built from those buffers and writes plain host
// results.
//
// Thread-safety: every method may be called from any thread, concurrently.
// A backend serialises internally where it must (the GPU backend hands each
// call one of its worker slots, each with its own stream and workspace).
#ifndef MAXSIMD_KERNELS_BACKEND_H_
#define MAXSIMD_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/types.h"

namespace maxsimd {

// A read-only array resident where a backend computes. Destroying it frees
// the backend's copy.
class ResidentBuffer {
 public:
  virtual ~ResidentBuffer() = default;
  virtual const void* data() const = 0;
  virtual size_t bytes() const = 0;
};

// One segment as a search sees it: the host view (always valid; used for
// planning, e.g. candidate offsets) and the resident view (the backend reads
// its tokens there). For the CPU backend both views are the same memory.
struct SegmentRef {
  SegmentView host;
  SegmentView resident;
  // The shard holding the resident view (Backend::shard); 0 on a backend
  // with one shard.
  int32_t shard = 0;
  // resident.tokens is host memory made readable by Backend::Pin rather
  // than a resident copy: the GPU backend streams it to the device per
  // search (a scan in chunks through double buffers, a rerank as the
  // candidates' rows only). resident.cu_seqlens and resident.tombstones
  // are resident as usual.
  bool streamed = false;
};

// One batch of queries. Either every query scans all live documents of every
// segment (candidate_offsets == nullptr), or every query has its own
// candidate list. Scan and rerank batches never mix.
//
// Query tokens are fp32 in host memory, already L2-normalised by the caller
// where the corpus asks for it. Query i owns rows
// [query_offsets[i], query_offsets[i + 1]) of query_tokens; an empty query
// scores 0 against every document.
//
// Int8 segments (dtype kInt8, with scales) score query row i against
// document token row j as
//
//   quantize_queries false:  d_scale[j] * sum_k fp16(q[i,k]) * d[j,k]
//   quantize_queries true:   q_scale[i] * (d_scale[j] * float(sum_k
//                            qq[i,k] * d[j,k]))
//
// where fp16() rounds to the nearest float16 (ties to even, as the GPU
// stages queries for dense float16 corpora), qq and q_scale are the query
// row quantised by kernels/quantize.h, the first sum accumulates in fp32
// and the second in int32 (exact). MaxSim is then as for dense segments.
// q_scale[i] comes last so that a kernel may apply it once per row, to the
// row's maximum: scaling by a non-negative number preserves the order, so
// the result is the same. Dense segments ignore quantize_queries.
//
// PLAID segments (a PLAID dtype, with codes, scales and a codec; see
// PlaidTablesView) score query row i against token row j as
//
//   scales[j] * sum_k q[i,k] * v_j[k]
//
// with v_j decoded in fp32 (kernels/plaid_bits.h) and the sum in fp32. A
// GPU kernel may round q and v_j to float16 for its MMAs (within the
// tolerance of its tests). They ignore quantize_queries.
//
// Candidate lists: query i's candidates are
// candidates[candidate_offsets[i] .. candidate_offsets[i + 1]). Each pair is
// scored as given: a duplicate is scored (and may be returned) twice, so the
// server de-duplicates before it builds a batch. Tombstoned candidates are
// skipped.
struct SearchParams {
  const float* query_tokens = nullptr;     // [total_query_tokens, dim]
  const int64_t* query_offsets = nullptr;  // [num_queries + 1]
  int32_t num_queries = 0;
  int32_t dim = 0;
  absl::Span<const SegmentRef> segments;
  const int64_t* candidate_offsets = nullptr;  // [num_queries + 1] or null
  const DocRef* candidates = nullptr;
  const int32_t* top_k = nullptr;  // [num_queries], each in [1, kMaxTopK]
  bool quantize_queries = false;   // int8 segments only, see above
};

// The storage behind one SearchParams: stacked fp32 query tokens, offsets,
// top_k, segment refs and (for a rerank batch) candidate lists. Params()
// returns views into it, valid while the batch lives unchanged. A batch is a
// rerank batch exactly when cand_offsets is non-empty; then it holds
// num_queries + 1 entries starting at 0.
struct SearchBatch {
  std::vector<float> tokens;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> top_k;
  std::vector<SegmentRef> refs;
  std::vector<int64_t> cand_offsets;
  std::vector<DocRef> candidates;
  int32_t dim = 0;
  bool quantize_queries = false;  // SearchParams::quantize_queries

  // Appends one query of q.size() / dim tokens.
  void AddQuery(const std::vector<float>& q, int32_t k) {
    tokens.insert(tokens.end(), q.begin(), q.end());
    offsets.push_back(offsets.back() + static_cast<int64_t>(q.size()) / dim);
    top_k.push_back(k);
  }
  SearchParams Params() const {
    SearchParams p;
    p.query_tokens = tokens.data();
    p.query_offsets = offsets.data();
    p.num_queries = static_cast<int32_t>(top_k.size());
    p.dim = dim;
    p.segments = refs;
    p.top_k = top_k.data();
    p.quantize_queries = quantize_queries;
    if (!cand_offsets.empty()) {
      p.candidate_offsets = cand_offsets.data();
      p.candidates = candidates.data();
    }
    return p;
  }
};

// Where the time of one Search() went, in nanoseconds of wall time.
struct SearchTiming {
  int64_t h2d_ns = 0;     // staging + host-to-device copies
  int64_t kernel_ns = 0;  // MaxSim scoring (and fused partial top-k)
  int64_t topk_ns = 0;    // final top-k merge
  int64_t d2h_ns = 0;     // device-to-host copies of the results
  // Waiting for the device to finish other searches' scans before this
  // one's kernels start (GpuBackendOptions::serialize_scans).
  int64_t device_wait_ns = 0;
};

// Memory one backend holds on one GPU, in bytes. free_bytes and
// total_bytes describe the whole device (shared with anything else on it).
struct DeviceMemory {
  int device = 0;
  int64_t corpus_bytes = 0;     // resident arrays returned by Upload()
  int64_t pinned_bytes = 0;     // host arrays page-locked by Pin()
  int64_t workspace_bytes = 0;  // search workspaces, allocated at start-up
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// Admits an upload of `bytes` against a corpus budget (0: none), given the
// bytes `held` by live buffers: OK, or RESOURCE_EXHAUSTED naming the flag.
absl::Status CheckCorpusBudget(const std::string& backend, int64_t held,
                               int64_t bytes, int64_t budget);
// The same for any budget: `what` prefixes the message ("Pin"), `flag`
// names the flag that sets `budget`.
absl::Status CheckBudget(const char* what, const char* flag,
                         const std::string& backend, int64_t held,
                         int64_t bytes, int64_t budget);

// Limits a backend sizes its workspace for at start-up. A batch beyond them
// is refused with INVALID_ARGUMENT naming the limit.
struct BackendLimits {
  int32_t max_batch_queries = 256;
  int64_t max_batch_query_tokens = 256 * 1024;
  int64_t max_batch_candidates = 1 << 22;
  int32_t max_dim = 4096;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "gpu:<ordinal>".
  virtual std::string name() const = 0;
  // name() and the hardware behind it, for logs and for errors that say
  // why a layout is not served, e.g. "gpu:0 (NVIDIA A10, compute
  // capability 8.6, without the Hopper kernels)".
  virtual std::string description() const { return name(); }
  virtual const BackendLimits& limits() const = 0;

  // Copies `bytes` bytes from host memory into the backend's memory. The
  // CPU backend returns a view of `host` itself (no copy). Errors:
  // RESOURCE_EXHAUSTED when the device has no room, or when the live
  // buffers would exceed the backend's corpus budget (the message names
  // --corpus_budget_bytes); the caller's state is untouched.
  virtual absl::StatusOr<std::unique_ptr<ResidentBuffer>> Upload(
      const void* host, size_t bytes) = 0;

  // Makes `bytes` bytes of host memory at `host` readable by Search() in
  // place, for a SegmentRef marked `streamed`: the returned buffer's data()
  // is `host`, which the caller keeps alive and unchanged for the buffer's
  // life. The GPU backend page-locks the range (so that its copies to the
  // device run at full speed) and counts it against its pinned budget; a
  // backend that computes from host memory returns a plain view. Errors:
  // RESOURCE_EXHAUSTED past the pinned budget (the message names
  // --pinned_budget_bytes) or when the system refuses to lock the range.
  virtual absl::StatusOr<std::unique_ptr<ResidentBuffer>> Pin(const void* host,
                                                              size_t bytes) = 0;

  // Ranks documents for every query of `params`. results[i] receives query
  // i's top min(top_k[i], live documents) entries in RanksBefore order.
  // `timing` may be null.
  virtual absl::Status Search(const SearchParams& params,
                              absl::Span<std::vector<ScoredDoc>> results,
                              SearchTiming* timing) = 0;

  // False after a sticky device error; the server then reports NOT_SERVING.
  virtual bool healthy() const = 0;

  // Whether Search() scores segments stored as `dtype` with rows of `dim`
  // values. Every backend scores float16 and bfloat16 (the dense layout)
  // at any width; a backend with kernels for more says so. The index asks
  // before it accepts a corpus whose layout needs another dtype (int8), so
  // that a backend without the kernel refuses the corpus at creation
  // rather than every search.
  virtual bool SupportsDType(DType dtype, int32_t /*dim*/) const {
    return dtype == DType::kFloat16 || dtype == DType::kBFloat16;
  }

  // Whether an int8 corpus of width `dim` should quantise its queries when
  // its creator leaves the choice to the server: where this backend scores
  // quantised queries faster than float16 ones (both are as faithful to the
  // exact ranking: bench/NOTES.md).
  virtual bool PrefersQuantizedQueries(int32_t /*dim*/) const { return false; }

  // Whether Search() streams host-placed segments (SegmentRef::streamed)
  // of `dtype`. The index places such a corpus on the host only where this
  // holds: placement host is refused at creation, and placement auto keeps
  // it resident rather than fall back.
  virtual bool StreamsDType(DType /*dtype*/) const { return true; }

  // Data may be spread over shards (the GPUs of a ShardedBackend); one
  // segment lives wholly in one shard, and Search() reads each SegmentRef
  // from the shard its `shard` field names. A plain backend is its own
  // single shard.
  virtual int num_shards() const { return 1; }
  // The backend that stores shard `i`: upload a segment's arrays through
  // it. REQUIRES: 0 <= i < num_shards().
  virtual Backend* shard(int /*i*/) { return this; }

  // GPU memory per device; empty for a backend without GPUs.
  virtual std::vector<DeviceMemory> Memory() const { return {}; }

  // The assignment step of k-means (PLAID codec training, index/
  // plaid_train.h), on this backend's accelerator: codes[i] = the index of
  // the row of `centroids` [k, dim] with the largest dot product with row
  // i of `tokens` [m, dim], the lowest index on a tie, where m =
  // tokens.size() / dim and k = centroids.size() / dim. fp32, row-major,
  // host memory; codes has m entries. Each dot product is the fp32 sum of
  // the products in dimension order, every product and sum rounded
  // separately (no fused multiply-add), so the codes equal the host's
  // (AssignNearestCentroidsOnHost) bit for bit. Blocks until the codes are
  // written. Errors: UNIMPLEMENTED where the backend has no such kernel
  // (the default: the caller computes on the host); INVALID_ARGUMENT naming
  // the field for dim < 1, no tokens, no centroids, a size that is not a
  // multiple of dim, or codes of another length; RESOURCE_EXHAUSTED when
  // the scratch memory does not fit; UNAVAILABLE after a device failure.
  virtual absl::Status AssignNearestCentroids(
      absl::Span<const float> /*tokens*/, absl::Span<const float> /*centroids*/,
      int32_t /*dim*/, absl::Span<int64_t> /*codes*/) {
    return absl::UnimplementedError(
        "AssignNearestCentroids: this backend computes no k-means "
        "assignment; compute it on the host");
  }
  // Whether AssignNearestCentroids is implemented. A trainer sizes its
  // problem by it: on a GPU, ColBERT's centroid count over a larger
  // sample costs seconds; on the host, minutes.
  virtual bool AssignsNearestCentroids() const { return false; }

  // Step 1 of PLAID candidate generation (index/plaid_search.h), the
  // product Q C^T, on this backend's accelerator: scores[r * k + c] = the
  // dot product of row r of `tokens` [m, dim] and centroid c of
  // `tables.centroids` [k, dim], where m = tokens.size() / dim and k =
  // tables.num_centroids. `tables` lives in the memory of shard `shard`
  // (Backend::shard; 0 on a backend with one shard), as a PLAID codec's
  // resident tables do (CorpusCodec::ResidentTables(shard)); only its fp32
  // centroids are read. tokens and scores ([m, k]) are fp32, row-major, in
  // host memory. Each cell is computed as the host's PlaidCentroidScores
  // computes it: 16 partial sums, lane l over dimensions j = l (mod 16) in
  // ascending order, for the first dim - dim % 16 dimensions; then the
  // lanes summed in order 0..15; then the remaining dimensions added in
  // order; every product and sum rounded to fp32 separately (no fused
  // multiply-add), each accumulator starting at +0. So the scores equal the
  // host's bit for bit. Blocks until the scores are written; allocates
  // nothing. No tokens (m = 0) is a no-op. Errors: UNIMPLEMENTED where the
  // backend has no such kernel (the default: the caller computes on the
  // host); INVALID_ARGUMENT naming the field and the limit for a shard out
  // of range, dim outside [1, limits().max_dim], tokens not a multiple of
  // dim, more rows than limits().max_batch_query_tokens, tables without
  // centroids, or scores of another length; UNAVAILABLE after a device
  // failure.
  virtual absl::Status ScoreCentroids(int /*shard*/,
                                      const PlaidTablesView& /*tables*/,
                                      int32_t /*dim*/,
                                      absl::Span<const float> /*tokens*/,
                                      absl::Span<float> /*scores*/) {
    return absl::UnimplementedError(
        "ScoreCentroids: this backend computes no centroid product; compute "
        "it on the host");
  }
  // Whether ScoreCentroids is implemented (on every shard). A caller that
  // gets false computes the product on the host without asking.
  virtual bool ScoresCentroids() const { return false; }
};

// Checks AssignNearestCentroids' arguments (see there): INVALID_ARGUMENT
// naming the field and the limit. Shared by the backends that implement it.
absl::Status ValidateAssignNearestCentroids(absl::Span<const float> tokens,
                                            absl::Span<const float> centroids,
                                            int32_t dim,
                                            absl::Span<const int64_t> codes);

// Checks ScoreCentroids' arguments (see there) on a backend of
// `num_shards` shards: INVALID_ARGUMENT naming the field and the limit.
// Shared by the backends that implement it.
absl::Status ValidateScoreCentroids(int shard, int num_shards,
                                    const PlaidTablesView& tables, int32_t dim,
                                    absl::Span<const float> tokens,
                                    absl::Span<const float> scores,
                                    const BackendLimits& limits);

// Checks a batch against the limits and the views' shapes, shared by every
// backend. Names the field and the limit in the message.
absl::Status ValidateSearchParams(const SearchParams& params,
                                  const BackendLimits& limits,
                                  size_t num_results);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_BACKEND_H_
