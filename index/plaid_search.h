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
// Thread-safety: pure functions over an immutable snapshot.
#ifndef MAXSIMD_INDEX_PLAID_SEARCH_H_
#define MAXSIMD_INDEX_PLAID_SEARCH_H_

#include <cstdint>
#include <vector>

#include "index/corpus.h"
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

// Steps 1 to 4 for one query ([lq, dim] fp32, already normalised where the
// corpus asks) over `snapshot`, a PLAID corpus's. Empty when it has no
// codec (no documents yet). REQUIRES: params within the limits above.
std::vector<DocRef> PlaidCandidates(const CorpusSnapshot& snapshot,
                                    const float* query, int64_t lq,
                                    const PlaidSearchParams& params);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_PLAID_SEARCH_H_
