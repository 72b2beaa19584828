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
  // Near-duplicate tokens, as real documents have (a word repeated, the
  // pieces of one word, punctuation): each token after a document's first
  // is, with this probability, replaced by a copy of a random earlier token
  // of the same document (itself perhaps such a copy) plus noise of
  // `repeat_noise` (the units of `noise`; cosine about 0.99 with its source
  // at 0.1). Drawn from a stream of its own, so that with 0 (the default)
  // the corpus is the one earlier builds generated, and with more the
  // other tokens stay as they were. In [0, 1].
  float repeat_fraction = 0.f;
  float repeat_noise = 0.1f;
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
