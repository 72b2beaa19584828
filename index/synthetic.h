// Synthetic ColBERT-like corpora for the demo, tests and benchmarks.
//
// Real late-interaction token embeddings are unit vectors that cluster
// around a few thousand semantic centroids, and a document's tokens come
// from a handful of topics. The generator mimics that: `num_clusters`
// random unit centroids; each document draws 1 to 4 topic clusters and each
// token is its cluster centroid plus Gaussian noise, re-normalised. Queries
// are built from a chosen document's tokens plus noise, so the document is
// the expected best match: the demo and the end-to-end tests can check it.
//
// Deterministic for a given seed. Thread-safety: pure functions.
#ifndef MAXSIMD_INDEX_SYNTHETIC_H_
#define MAXSIMD_INDEX_SYNTHETIC_H_

#include <cstdint>
#include <string>
#include <vector>

namespace maxsimd {

struct SyntheticCorpusOptions {
  int64_t num_docs = 2000;
  int32_t dim = 128;
  int32_t min_tokens = 32;   // per document, inclusive
  int32_t max_tokens = 300;  // per document, inclusive
  int32_t num_clusters = 256;
  // Std-dev of per-coordinate noise before normalising, in units of a unit
  // vector's coordinate scale 1/sqrt(dim): the noise vector's norm is about
  // `noise` at any dim, and same-cluster tokens have cosine ~1/(1+noise^2).
  float noise = 0.35f;
  uint64_t seed = 1;
  std::string id_prefix = "doc-";  // ids are id_prefix + decimal index
};

struct SyntheticCorpus {
  int32_t dim = 0;
  std::vector<std::string> ids;     // [num_docs]
  std::vector<int64_t> cu_seqlens;  // [num_docs + 1]
  std::vector<float> tokens;        // [cu_seqlens.back(), dim], unit rows
};

SyntheticCorpus GenerateSyntheticCorpus(const SyntheticCorpusOptions& options);

// A query of `num_tokens` unit vectors [num_tokens, dim], each a random token
// of document `doc` plus noise of std-dev `noise` (same units as
// SyntheticCorpusOptions::noise), re-normalised. Deterministic in
// (corpus, doc, seed). Empty when `doc` is out of range, has no tokens, or
// num_tokens <= 0.
std::vector<float> GenerateQueryForDocument(const SyntheticCorpus& corpus,
                                            int64_t doc, int32_t num_tokens,
                                            float noise, uint64_t seed);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_SYNTHETIC_H_
