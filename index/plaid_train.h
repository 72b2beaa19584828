// Building a PLAID residual codec from dense tokens, as ColBERTv2 does, and
// compressing tokens with it: the inverse of DecompressPlaidEmbeddings
// (index/plaid.h), so that a compressed corpus can be made on the server
// from dense input.
//
// Training, on a uniform sample of at most max_sample tokens:
//   centroids       spherical k-means: each token goes to the centroid of
//                   largest dot product, each centroid becomes its tokens'
//                   normalised mean (an emptied one takes a random sample
//                   token); `iterations` rounds from k-means++ seeds.
//                   Tokens are expected L2-normalised, as ColBERT's are.
//   bucket_cutoffs  the quantiles i / 2^nbits (i = 1 .. 2^nbits - 1) of
//   bucket_weights  every residual value (token - its centroid, all
//                   dimensions pooled), and the quantiles (i + 0.5) / 2^nbits
//                   (i = 0 .. 2^nbits - 1); linear interpolation between
//                   order statistics, as torch.quantile.
// Compressing one token: code = the centroid of largest dot product (the
// lowest index on a tie); the residual of dimension d goes to bucket
// #{cutoffs < r_d} (torch.bucketize), packed as PlaidResidualBucket reads.
//
// Everything is deterministic in (tokens, options): the thread count
// changes no result.
// Thread-safety: pure functions.
#ifndef MAXSIMD_INDEX_PLAID_TRAIN_H_
#define MAXSIMD_INDEX_PLAID_TRAIN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "index/plaid.h"

namespace maxsimd {

struct PlaidTrainOptions {
  int32_t nbits = 2;  // 1, 2, 4 or 8
  // 0: ColBERT's choice, 2^floor(log2(16 sqrt(n))), but at most one per
  // 32 sampled tokens (large corpora need a larger sample, and k-means on
  // the GPU, to get ColBERT's count).
  int64_t num_centroids = 0;
  int32_t iterations = 20;
  int64_t max_sample = int64_t{1} << 16;
  uint64_t seed = 1;
  int num_threads = 0;  // 0: one per hardware thread
};

// INVALID_ARGUMENT naming the option: nbits not in {1, 2, 4, 8}, dim * nbits
// not a multiple of 8, no tokens, num_centroids above the sampled tokens,
// iterations < 1.
absl::StatusOr<PlaidCodec> TrainPlaidCodec(const float* tokens, int64_t n,
                                           int32_t dim,
                                           const PlaidTrainOptions& options);

// Compresses n tokens [n, codec.dim] into codes[n] and residual rows
// [n, dim * nbits / 8]. REQUIRES: codec trained (bucket_cutoffs set).
void CompressPlaidEmbeddings(const PlaidCodec& codec, const float* tokens,
                             int64_t n, int64_t* codes, uint8_t* residuals,
                             int num_threads = 0);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_PLAID_TRAIN_H_
