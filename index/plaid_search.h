// PLAID candidate generation: how a PLAID corpus answers a query that comes
// without candidates, the way PLAID engines do (ColBERTv2/PLAID):
//   1. score the query tokens against every centroid (Q C^T, fp32);
//   2. take each token's top n_ivf_probe centroids (cells);
//   3. take the union of the live documents with a token in those cells
//      (the segments' inverted files, Segment::ivf);
//   4. score each by its centroids only, sum over query tokens of the max
//      over its tokens of Q C^T[s, code], and keep the best n_full_scores;
//   5. (the caller) rank those exactly, decompressed, with a rerank batch.
// Ties in steps 2 and 4 go to the lower centroid id / internal index, so the
// result is deterministic.
//
// Queries are generated in batches: step 1 for every query of a batch is one
// product over their stacked tokens (PlaidCentroidScores), and steps 2 to 4
// then run per query on its rows of that product (PlaidCandidatesFromScores).
// A row's scores do not depend on the other rows, so a query gets the same
// candidates alone or in any batch. The product is the part a device takes
// over: PlaidCandidatesBatch runs it with Backend::ScoreCentroids where the
// backend has that kernel (the GPU's computes the host's values bit for
// bit, so the candidates are the same), else on the host; a caller that
// computes Q C^T elsewhere passes its rows to PlaidCandidatesFromScores.
//
// Thread-safety: pure functions over an immutable snapshot (a backend
// passed in is thread-safe, as Backend is).
#ifndef MAXSIMD_INDEX_PLAID_SEARCH_H_
#define MAXSIMD_INDEX_PLAID_SEARCH_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "index/corpus.h"
#include "kernels/backend.h"
#include "kernels/base/thread_pool.h"
#include "kernels/types.h"

namespace maxsimd {

struct PlaidSearchParams {
  int32_t n_ivf_probe = 1;
  int32_t n_full_scores = 256;
};

// Most cells per query token and documents a request may ask for.
inline constexpr int32_t kMaxIvfProbe = 1024;
inline constexpr int32_t kMaxFullScores = 1 << 16;

// ColBERT's defaults by k: k <= 10: ncells 1, ndocs 256; k <= 100: 2,
// 1024; else 4, max(4k, 4096); with n_full_scores = ndocs / 4 (PLAID ranks
// a quarter of ndocs exactly), and at least k.
PlaidSearchParams DefaultPlaidSearchParams(int32_t top_k);

// One query of a batch: `lq` tokens [lq, dim] fp32 (dim: the codec's),
// already normalised where the corpus asks, not owned (they must outlive
// the call). REQUIRES: params within the limits above.
struct PlaidQuery {
  const float* tokens = nullptr;
  int64_t lq = 0;
  PlaidSearchParams params;
};

// What one batch cost, for metrics.
struct PlaidBatchStats {
  // Q C^T products run: 1 for a batch with a codec and at least one token
  // whose product succeeded, else 0.
  int64_t centroid_products = 0;
  // Of those, the ones the backend ran (Backend::ScoreCentroids); the
  // others ran on the host.
  int64_t device_products = 0;
};

// Where PlaidCandidatesBatch runs a batch's product.
struct PlaidProduct {
  // Runs it with backend->ScoreCentroids on the codec's tables resident on
  // the shard of the snapshot's first segment (every shard holds them), so
  // it must be the backend the snapshot's corpus lives on. Null, a backend
  // whose ScoresCentroids() is false, or one that answers UNIMPLEMENTED:
  // the host runs it.
  Backend* backend = nullptr;
  // The host's threads: the product where the host runs it
  // (PlaidCentroidScores' pool), and steps 2 to 4, one query per task
  // (PlaidCandidatesFromScores' pool). Asked for once the batch has tokens
  // and a codec, so that a caller may start them on first use. Null, or
  // returning null: the calling thread alone.
  std::function<ThreadPool*()> host_pool;
};

// Step 1: Q C^T of `rows` stacked query tokens ([rows, codec.dim] fp32,
// row-major) against every centroid of `codec`: [rows, num_centroids] fp32,
// row-major. Each cell is computed the same way whatever the other rows, so
// a query's rows are the same in any batch.
// With `pool`, its threads take blocks of token rows in parallel (the same
// values: a row's scores never depend on how rows are split).
std::vector<float> PlaidCentroidScores(const PlaidCodec& codec,
                                       const float* tokens, int64_t rows,
                                       ThreadPool* pool = nullptr);

// Steps 2 to 4 for each query of a batch over `snapshot`, a PLAID corpus's,
// given the batch's Q C^T: `scores` [sum of queries[i].lq,
// num_centroids], the rows of queries[0] first, then those of queries[1],
// and so on. Returns each query's candidates, best centroid-only score
// first, at most its n_full_scores; all empty when the snapshot has no
// codec. With `pool`, its threads take the queries in parallel (each
// query's candidates are the same either way).
std::vector<std::vector<DocRef>> PlaidCandidatesFromScores(
    const CorpusSnapshot& snapshot, absl::Span<const PlaidQuery> queries,
    const float* scores, ThreadPool* pool = nullptr);

// Steps 1 to 4 for a batch of queries over `snapshot`, a PLAID corpus's,
// with one product for the whole batch, run where `product` says. Returns
// one candidate list per query, in order; all empty when the snapshot has
// no codec (no documents yet), and empty for a query of no tokens. `stats`
// (optional) receives what the batch ran. Errors: the backend's
// ScoreCentroids error other than UNIMPLEMENTED (e.g. UNAVAILABLE after a
// device failure), as it is. A product that fails on the device fails the
// batch rather than falling back to the host: the failure is the
// backend's to report (its health follows it), and a device that fails
// every product would otherwise turn each batch into a slow host product
// behind a healthy-looking server.
absl::StatusOr<std::vector<std::vector<DocRef>>> PlaidCandidatesBatch(
    const CorpusSnapshot& snapshot, absl::Span<const PlaidQuery> queries,
    const PlaidProduct& product = {}, PlaidBatchStats* stats = nullptr);

// PlaidCandidatesBatch for one query ([lq, dim] fp32), its product on the
// calling thread: the same candidates as that query gets in any batch.
std::vector<DocRef> PlaidCandidates(const CorpusSnapshot& snapshot,
                                    const float* query, int64_t lq,
                                    const PlaidSearchParams& params);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_PLAID_SEARCH_H_
