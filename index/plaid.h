// An importer of PLAID indexes (residual-compressed late-interaction
// embeddings) written by ColBERT v2 (stanford-futuredata/ColBERT) or by
// fast-plaid (lightonai/fast-plaid). Every embedding is decompressed into a
// dense fp32 token, so the result is an ordinary ImportedDocuments; a
// compressed "plaid" corpus layout comes with the compressed-corpora work.
// The files read, the residual bit order and the validation are specified
// in index/FORMAT.md, "Importing PLAID indexes".
//
// Decompression, per embedding with centroid id c and packed residual row r:
//   v[d] = centroids[c][d] + bucket_weights[PlaidResidualBucket(r, nbits, d)]
//   token = v / max(||v||_2, 1e-12)
// (both writers L2-normalise the decompressed vector before scoring).
// Arithmetic is fp32 on values widened from the stored dtypes.
//
// Errors (messages name the file and the limit):
//   NOT_FOUND         the directory, metadata.json, a chunk file or the ids
//                     file is missing;
//   DATA_LOSS         a file is malformed (zip, pickle, .npy, JSON), a code
//                     is outside [0, num_centroids), a doclen is negative;
//   INVALID_ARGUMENT  files that do not fit together or a variant this
//                     importer does not take: nbits not in {1, 2, 4, 8},
//                     dim * nbits not a multiple of 8, a residual row width
//                     other than dim * nbits / 8, bucket_weights without
//                     2^nbits entries, doclens not summing to the chunk's
//                     embeddings, ids not one per document, a dtype or
//                     shape other than the writers'; both or neither of
//                     centroids.pt and centroids.npy;
//   RESOURCE_EXHAUSTED past options.max_token_values.
// Thread-safety: pure functions.
#ifndef MAXSIMD_INDEX_PLAID_H_
#define MAXSIMD_INDEX_PLAID_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "index/importers.h"
#include "kernels/plaid_bits.h"  // PlaidResidualBucket

namespace maxsimd {

enum class PlaidWriter {
  kColbert,    // metadata.json {"config": {"dim", "nbits"}, "num_chunks"},
               // centroids.pt, buckets.pt, {i}.codes.pt, {i}.residuals.pt
  kFastPlaid,  // metadata.json {"nbits", "num_chunks"}, centroids.npy,
               // bucket_weights.npy, {i}.codes.npy, {i}.residuals.npy
};
const char* PlaidWriterName(PlaidWriter writer);  // "colbert", "fast-plaid"

// Which writer produced `dir`: centroids.pt means ColBERT, centroids.npy
// fast-plaid.
absl::StatusOr<PlaidWriter> DetectPlaidWriter(const std::string& dir);

struct PlaidOptions {
  // Ids file, one per line and one per document in passage order; empty:
  // the passage ids "0", "1", ... (position across chunks, in chunk order).
  std::string ids;
  // When > 0: RESOURCE_EXHAUSTED, before decoding, if the index holds more
  // than this many token values (embeddings x dim).
  int64_t max_token_values = 0;
};

// Reads and decompresses the whole index. Documents come in chunk order
// (0, 1, ..., num_chunks - 1), each chunk's documents in doclens order, so
// document i is PLAID passage id i. `float16` of the result is false.
absl::StatusOr<ImportedDocuments> ReadPlaidIndex(
    const std::string& dir, const PlaidOptions& options = {});

// The residual codec of an index.
struct PlaidCodec {
  int32_t dim = 0;
  int32_t nbits = 0;  // 1, 2, 4 or 8
  int64_t num_centroids = 0;
  std::vector<float> centroids;       // [num_centroids, dim], row-major
  std::vector<float> bucket_weights;  // [1 << nbits]
  // [(1 << nbits) - 1], ascending: what compressing needs besides the
  // above (index/plaid_train.h); an imported index has none.
  std::vector<float> bucket_cutoffs;
};

// An index as stored: its codec, each embedding's centroid id and packed
// residual row, documents in ReadPlaidIndex's order. Codes are checked to
// be in range (DATA_LOSS naming the codes file otherwise).
struct CompressedPlaidDocuments {
  PlaidCodec codec;
  std::vector<int32_t> codes;
  std::vector<uint8_t> residuals;  // [codes.size(), dim * nbits / 8]
  std::vector<int64_t> cu_seqlens;
  std::vector<std::string> ids;
};
absl::StatusOr<CompressedPlaidDocuments> ReadPlaidIndexCompressed(
    const std::string& dir, const PlaidOptions& options = {});

// Decompresses `n` embeddings into out[n * dim] (see the top of this file).
// DATA_LOSS naming `codes_name` for a code outside [0, num_centroids).
// REQUIRES: codec valid (nbits in {1,2,4,8}, sizes as documented);
// residuals holds n rows of dim * nbits / 8 bytes.
absl::Status DecompressPlaidEmbeddings(const PlaidCodec& codec,
                                       const std::vector<int64_t>& codes,
                                       const uint8_t* residuals, float* out,
                                       absl::string_view codes_name);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_PLAID_H_
