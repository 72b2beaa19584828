// A PLAID corpus in memory, filled with synthetic documents
// (index/synthetic.h), for tests that need a trained codec and documents
// without going through the server. Not thread-safe: call from the test's
// thread, as gtest's EXPECT macros require.
#ifndef MAXSIMD_TESTS_SUPPORT_SYNTHETIC_PLAID_H_
#define MAXSIMD_TESTS_SUPPORT_SYNTHETIC_PLAID_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "index/corpus.h"
#include "index/plaid_search.h"
#include "index/synthetic.h"
#include "kernels/backend.h"
#include "tests/support/status_matchers.h"

namespace maxsimd::testing {

// A normalising PLAID corpus `name` (2-bit residuals, `centroids`
// centroids, no store) on `backend`, which must outlive it, holding
// `segments` in order, each appended as one segment of float32 rows. The
// corpus trains its codec on the first segment. Every segment must have
// the same dim, which is the corpus's; `segments` must not be empty. A
// failed Create aborts (StatusOr::value); a failed Add or Append is a test
// failure, leaving the corpus with the segments that went in.
inline std::shared_ptr<Corpus> MakeSyntheticPlaidCorpus(
    Backend* backend, const std::string& name, int32_t centroids,
    absl::Span<const SyntheticCorpus> segments) {
  if (segments.empty()) {
    ADD_FAILURE() << "MakeSyntheticPlaidCorpus: segments is empty";
    return nullptr;
  }
  CorpusConfig config;
  config.name = name;
  config.dim = segments.front().dim;
  config.layout = Layout::kPlaid;
  config.storage_dtype = DType::kPlaid2;
  config.normalize = true;
  config.plaid_centroids = centroids;
  std::shared_ptr<Corpus> corpus =
      Corpus::Create(config, CorpusLimits{}, backend).value();
  for (const SyntheticCorpus& s : segments) {
    EXPECT_EQ(s.dim, config.dim) << "MakeSyntheticPlaidCorpus: segment dim";
    std::vector<int32_t> counts;
    for (size_t i = 0; i + 1 < s.cu_seqlens.size(); ++i) {
      counts.push_back(
          static_cast<int32_t>(s.cu_seqlens[i + 1] - s.cu_seqlens[i]));
    }
    DocumentBuilder b(config, CorpusLimits{});
    EXPECT_THAT(b.Add(s.ids, counts, s.tokens.data(), s.cu_seqlens.back(),
                      DType::kFloat32, "docs"),
                IsOk());
    EXPECT_THAT(corpus->Append(b.Take()), IsOk());
  }
  return corpus;
}

// As above, with `synth` as the corpus's one segment.
inline std::shared_ptr<Corpus> MakeSyntheticPlaidCorpus(
    Backend* backend, const std::string& name, int32_t centroids,
    const SyntheticCorpus& synth) {
  return MakeSyntheticPlaidCorpus(backend, name, centroids,
                                  absl::MakeConstSpan(&synth, 1));
}

// What Backend::ScoreCentroids computes, from PLAID tables in host memory
// (the CPU backend's): the host's product of `tokens` [m, dim] against
// every centroid, for test backends that stand in for a device's.
inline std::vector<float> HostTablesProduct(const PlaidTablesView& tables,
                                            int32_t dim,
                                            absl::Span<const float> tokens) {
  PlaidCodec codec;
  codec.dim = dim;
  codec.num_centroids = tables.num_centroids;
  codec.centroids.assign(tables.centroids,
                         tables.centroids + tables.num_centroids * dim);
  return PlaidCentroidScores(codec, tokens.data(),
                             static_cast<int64_t>(tokens.size()) / dim);
}

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_SYNTHETIC_PLAID_H_
