// Token pooling at ingest (ColBERT / PyLate "pool_factor"): a document's n
// token vectors are clustered hierarchically, and each cluster is replaced
// by the mean of its tokens, so that the document keeps
// k = ceil(n / pool_factor) vectors.
//
// What is computed, for one document of n tokens [n, dim]:
//   distances  d(i, j) = 1 - cos(t_i, t_j): the dot product (an fp32 sum in
//              dimension order, each product rounded: no fused multiply-add
//              on any target) over the product of the two L2 norms
//              (double); a zero token has cosine 0 with every token.
//   tree       Ward linkage on those dissimilarities, exactly as
//              scipy.cluster.hierarchy.linkage(condensed d, method="ward")
//              computes it (scipy 1.10, nn_chain): the Lance-Williams
//              update of Ward applied to d as given (d is not Euclidean,
//              so this is not Ward on the vectors themselves), in double:
//                d(i, x+y) = sqrt(((n_i + n_x) d(i,x)^2 + (n_i + n_y)
//                            d(i,y)^2 - n_i d(x,y)^2) / (n_i + n_x + n_y))
//              with a negative radicand (possible, d being no metric)
//              taken as 0 where scipy would give NaN.
//   cut        the first n - k merges of the tree in order of height (made
//              monotone along the tree), as fcluster(criterion="maxclust",
//              t=k) cuts it: exactly k groups.
//   output     one row per group, the mean of its tokens (summed in double
//              in token order, then rounded to fp32), scaled to unit L2
//              length when `normalize` is set (a zero mean stays zero); a
//              group of one token is that token, unchanged.
// Group order: by the index of each group's first token, so the output is
// deterministic and follows the document's order.
//
// Ties, deterministic and scipy's: the nearest-neighbour chain starts at the
// lowest live cluster; a cluster's nearest neighbour is the previous one in
// the chain unless another is strictly nearer, else the lowest-index one at
// the least distance; a merged cluster takes the higher of the two indices.
// Merges of equal height are cut in the order the chain found them (a
// stable sort, as scipy's). Where merges tie in height across the cut
// itself (exact duplicate tokens, say), fcluster takes all of them and
// gives fewer than k groups; here the first ones in that order are taken,
// so there are always k groups.
//
// Differences from PyLate's pool_embeddings_hierarchical, by design:
// PyLate keeps max(n // pool_factor, 1) groups (floor, here ceil), passes
// the square matrix 1 - T T^T to linkage (which scipy then reads as n
// observations of n features, i.e. Ward on the rows of that matrix, not on
// the distances), orders groups by fcluster's labels and keeps its
// protected tokens (the first one by default) out of the pooling.
//
// Cost: O(n^2 dim) for the distances (a blocked loop that vectorises) and
// O(n^2) for the tree (nearest-neighbour chain, valid since Ward is
// reducible), with 8 n^2 bytes of scratch for the distances: 8.5 MB at
// n = 1030, 512 MiB at kMaxPooledDocumentTokens.
//
// Thread-safety: pure functions. PoolTokenBatch runs documents in parallel
// on the pool it is given; the result does not depend on the pool.
#ifndef MAXSIMD_INDEX_TOKEN_POOLING_H_
#define MAXSIMD_INDEX_TOKEN_POOLING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace maxsimd {

class ThreadPool;

// The largest pool_factor accepted (1 keeps every token).
inline constexpr int32_t kMaxTokenPoolFactor = 1024;

// The most tokens a document may have where it is clustered (1 < k < n):
// the distance matrix takes 8 n^2 bytes, 512 MiB here.
inline constexpr int64_t kMaxPooledDocumentTokens = 8192;

struct TokenPoolingOptions {
  // k = ceil(n / pool_factor) groups per document; in [1,
  // kMaxTokenPoolFactor]. 1 copies every token unchanged.
  int32_t pool_factor = 1;
  // Scale each mean of two or more tokens to unit L2 length.
  bool normalize = true;
};

// ceil(n / pool_factor): the tokens a document of n tokens keeps.
// REQUIRES: n >= 0, pool_factor >= 1.
int64_t PooledTokenCount(int64_t n, int32_t pool_factor);

// The group of each of the n tokens of `tokens` [n, dim] (fp32, row-major):
// groups[i] in [0, k), numbered in order of their first token (so
// groups[0] == 0), as PoolDocumentTokens forms them.
// INVALID_ARGUMENT as PoolDocumentTokens.
absl::StatusOr<std::vector<int32_t>> TokenPoolingGroups(
    absl::Span<const float> tokens, int32_t dim, int32_t pool_factor);

// Pools one document: `tokens` [n, dim] fp32 row-major in, `out` [k, dim]
// (resized, its old contents dropped) out; returns k. n = 0 or 1, and
// pool_factor 1, copy the tokens unchanged.
// INVALID_ARGUMENT naming the field and its limit: dim < 1, pool_factor
// outside [1, kMaxTokenPoolFactor], tokens.size() not a multiple of dim, a
// value that is not finite, more than kMaxPooledDocumentTokens tokens
// where 1 < k < n, out null.
absl::StatusOr<int64_t> PoolDocumentTokens(absl::Span<const float> tokens,
                                           int32_t dim,
                                           const TokenPoolingOptions& options,
                                           std::vector<float>* out);

// Pools every document of a ragged batch: document d is rows
// [cu_seqlens[d], cu_seqlens[d + 1]) of `tokens` [cu_seqlens.back(), dim].
// `out_tokens` [out_cu_seqlens.back(), dim] and `out_cu_seqlens` (one entry
// per entry of cu_seqlens) are resized and overwritten; document d's rows
// are what PoolDocumentTokens gives it. Documents run in parallel on
// `pool` when it is not null (each worker holds the scratch of the
// largest document it pools), else one after another on the caller's
// thread; the result is the same.
// INVALID_ARGUMENT as PoolDocumentTokens (naming the document), and for
// cu_seqlens empty, not starting at 0, decreasing, or not ending at
// tokens.size() / dim; outputs null. Nothing is written on error.
absl::Status PoolTokenBatch(absl::Span<const float> tokens,
                            absl::Span<const int64_t> cu_seqlens, int32_t dim,
                            const TokenPoolingOptions& options,
                            ThreadPool* pool, std::vector<float>* out_tokens,
                            std::vector<int64_t>* out_cu_seqlens);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_TOKEN_POOLING_H_
