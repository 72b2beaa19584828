// Building a PLAID residual codec from dense tokens, as ColBERTv2 does, and
// compressing tokens with it: the inverse of DecompressPlaidEmbeddings
// (index/plaid.h), so that a compressed corpus can be made on the server
// from dense input.
//
// Training, on a uniform sample of at most max_sample tokens:
//   centroids       spherical k-means: each token goes to the centroid of
//                   largest dot product, each centroid becomes its tokens'
//                   normalised mean (an emptied one takes a random sample
//                   token); `iterations` rounds from k-means++ seeds (or
//                   from k random sample tokens, PlaidSeeding).
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
// The assignment (token -> centroid of largest dot product) is where the
// time goes: m x k dot products per iteration. It runs on the host, or
// through PlaidTrainOptions::assign, e.g. on a GPU (Backend::
// AssignNearestCentroids), whose kernel computes every dot product with
// the host's arithmetic (fp32, in dimension order, no fused multiply-add:
// this file is compiled with -ffp-contract=off) and so gives the same
// codes and the same codec. With a GPU, PlaidTrainOptionsFor() raises the
// sample to kGpuPlaidMaxSample so that ColBERT's centroid count is not
// capped, and seeds as ColBERT does (PlaidSeeding::kRandomTokens).
//
// Everything is deterministic in (tokens, options): the thread count, and
// whether the assignment runs on the host or the GPU, change no result.
// Thread-safety: pure functions (an `assign` hook must be callable from
// the calling thread).
#ifndef MAXSIMD_INDEX_PLAID_TRAIN_H_
#define MAXSIMD_INDEX_PLAID_TRAIN_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "index/plaid.h"
#include "kernels/backend.h"

namespace maxsimd {

// The assignment step: codes[i] = the index of the row of `centroids`
// [k, dim] of largest dot product with row i of `tokens` [m, dim] (fp32,
// row-major, host memory), the lowest index on a tie; codes has m entries.
// UNIMPLEMENTED sends the computation back to the host.
using PlaidAssignFn = std::function<absl::Status(
    const float* tokens, int64_t m, int32_t dim, const float* centroids,
    int64_t k, int64_t* codes)>;

enum class PlaidSeeding {
  // k-means++: each next seed drawn with probability proportional to its
  // squared distance to the nearest seed so far. Better starts, but k
  // passes over the sample on the host, one after another: O(k m dim),
  // as much as a whole assignment, and not offloaded.
  kKMeansPlusPlus,
  // k distinct sample tokens drawn uniformly: what faiss's k-means, and so
  // ColBERT, starts from. O(k dim).
  kRandomTokens,
};

struct PlaidTrainOptions {
  int32_t nbits = 2;  // 1, 2, 4 or 8
  // 0: ColBERT's choice, 2^floor(log2(16 sqrt(n))) for n = corpus_tokens
  // (or the tokens given, when that is unset or smaller), but at most one
  // per 32 sampled tokens: the CPU's sample of 2^16 allows 2048 centroids,
  // ColBERT's count for up to 2^16 tokens; the GPU's of 2^19
  // (kGpuPlaidMaxSample) allows 16384, ColBERT's count for up to 2^22.
  int64_t num_centroids = 0;
  int32_t iterations = 20;
  int64_t max_sample = int64_t{1} << 16;
  // Tokens in the collection that `tokens` samples, when the caller
  // sampled it already (0: the tokens given). Sets ColBERT's count only.
  int64_t corpus_tokens = 0;
  PlaidSeeding seeding = PlaidSeeding::kKMeansPlusPlus;
  uint64_t seed = 1;
  int num_threads = 0;  // 0: one per hardware thread
  // Runs each assignment (every iteration's and the final one) instead of
  // the host, when set. Its codes must follow the host's rule (they are
  // checked to lie in [0, k)); with the same dot products, as on the GPU
  // backend, the codec is the one the host trains. UNIMPLEMENTED turns it
  // off for the rest of the training, which then runs on the host; any
  // other error fails the training with that error.
  PlaidAssignFn assign;
};

// The sample PlaidTrainOptionsFor() takes where k-means runs on a GPU:
// 2^19 tokens. At 16384 centroids and dim 128 an iteration is 2.2 TFLOP,
// about 0.1 s on an H100 (minutes on the host).
inline constexpr int64_t kGpuPlaidMaxSample = int64_t{1} << 19;

// The assignment through `backend` (Backend::AssignNearestCentroids), or
// an empty function when the backend has none (AssignsNearestCentroids()
// false). `backend` must outlive the function.
PlaidAssignFn BackendAssignFn(Backend* backend);

// Training options for a codec of a corpus served by `backend`: the
// defaults above when it has no k-means assignment; with one, `assign`
// set to it, max_sample kGpuPlaidMaxSample and PlaidSeeding::kRandomTokens
// (k-means++ would cost more on the host than every GPU iteration).
PlaidTrainOptions PlaidTrainOptionsFor(Backend* backend);

// INVALID_ARGUMENT naming the option: nbits not in {1, 2, 4, 8}, dim * nbits
// not a multiple of 8, no tokens, num_centroids above the sampled tokens,
// iterations < 1. INTERNAL when `assign` answers codes outside [0, k); its
// own errors other than UNIMPLEMENTED, as it answers them.
absl::StatusOr<PlaidCodec> TrainPlaidCodec(const float* tokens, int64_t n,
                                           int32_t dim,
                                           const PlaidTrainOptions& options);

// Compresses n tokens [n, codec.dim] into codes[n] and residual rows
// [n, dim * nbits / 8]. REQUIRES: codec trained (bucket_cutoffs set).
void CompressPlaidEmbeddings(const PlaidCodec& codec, const float* tokens,
                             int64_t n, int64_t* codes, uint8_t* residuals,
                             int num_threads = 0);

// The same with the codes from `assign` when it is set (the host's when it
// answers UNIMPLEMENTED); its other errors, and INTERNAL for codes outside
// [0, num_centroids), are returned with nothing guaranteed written.
absl::Status CompressPlaidEmbeddings(const PlaidCodec& codec,
                                     const float* tokens, int64_t n,
                                     int64_t* codes, uint8_t* residuals,
                                     const PlaidAssignFn& assign,
                                     int num_threads = 0);

// The host's assignment, on num_threads threads (0: one per hardware
// thread): the rule of PlaidAssignFn, each dot product an fp32 sum in
// dimension order of products rounded to fp32, unfused. The reference
// the GPU kernel matches bit for bit. n = 0 writes nothing.
void AssignNearestCentroidsOnHost(const float* tokens, int64_t n, int32_t dim,
                                  const float* centroids, int64_t k,
                                  int64_t* codes, int num_threads = 0);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_PLAID_TRAIN_H_
