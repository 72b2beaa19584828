#include "index/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/maxsim_reference.h"
#include "kernels/types.h"

namespace maxsimd {
namespace {

SyntheticCorpusOptions SmallOptions() {
  SyntheticCorpusOptions options;
  options.num_docs = 300;
  options.dim = 64;
  options.min_tokens = 8;
  options.max_tokens = 40;
  options.num_clusters = 32;
  options.seed = 7;
  return options;
}

SegmentView ViewOf(const SyntheticCorpus& corpus) {
  SegmentView view;
  view.tokens = corpus.tokens.data();
  view.cu_seqlens = corpus.cu_seqlens.data();
  view.num_docs = static_cast<int64_t>(corpus.ids.size());
  view.num_tokens = corpus.cu_seqlens.back();
  view.dim = corpus.dim;
  view.dtype = DType::kFloat32;
  return view;
}

double Norm(const float* v, int32_t dim) {
  double s = 0;
  for (int32_t j = 0; j < dim; ++j) s += static_cast<double>(v[j]) * v[j];
  return std::sqrt(s);
}

TEST(SyntheticTest, ShapesAndIds) {
  const SyntheticCorpusOptions options = SmallOptions();
  const SyntheticCorpus corpus = GenerateSyntheticCorpus(options);
  EXPECT_EQ(corpus.dim, options.dim);
  ASSERT_EQ(corpus.ids.size(), 300u);
  ASSERT_EQ(corpus.cu_seqlens.size(), 301u);
  EXPECT_EQ(corpus.cu_seqlens[0], 0);
  EXPECT_EQ(corpus.ids[0], "doc-0");
  EXPECT_EQ(corpus.ids[299], "doc-299");
  int32_t shortest = INT32_MAX, longest = 0;
  for (size_t d = 0; d < corpus.ids.size(); ++d) {
    const int64_t len = corpus.cu_seqlens[d + 1] - corpus.cu_seqlens[d];
    shortest = std::min<int32_t>(shortest, static_cast<int32_t>(len));
    longest = std::max<int32_t>(longest, static_cast<int32_t>(len));
  }
  EXPECT_GE(shortest, options.min_tokens);
  EXPECT_LE(longest, options.max_tokens);
  // 300 uniform draws over 33 lengths reach close to both ends.
  EXPECT_LE(shortest, options.min_tokens + 3);
  EXPECT_GE(longest, options.max_tokens - 3);
  EXPECT_EQ(corpus.tokens.size(),
            static_cast<size_t>(corpus.cu_seqlens.back()) * options.dim);
}

TEST(SyntheticTest, EveryTokenIsAUnitVector) {
  const SyntheticCorpus corpus = GenerateSyntheticCorpus(SmallOptions());
  const int64_t num_tokens = corpus.cu_seqlens.back();
  for (int64_t t = 0; t < num_tokens; ++t) {
    ASSERT_NEAR(Norm(&corpus.tokens[t * corpus.dim], corpus.dim), 1.0, 1e-5)
        << "token " << t;
  }
  const std::vector<float> query =
      GenerateQueryForDocument(corpus, 5, 32, 0.35f, 3);
  ASSERT_EQ(query.size(), 32u * corpus.dim);
  for (int s = 0; s < 32; ++s) {
    EXPECT_NEAR(Norm(&query[s * corpus.dim], corpus.dim), 1.0, 1e-5);
  }
}

TEST(SyntheticTest, DeterministicForASeed) {
  const SyntheticCorpus a = GenerateSyntheticCorpus(SmallOptions());
  const SyntheticCorpus b = GenerateSyntheticCorpus(SmallOptions());
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.cu_seqlens, b.cu_seqlens);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(GenerateQueryForDocument(a, 17, 16, 0.3f, 9),
            GenerateQueryForDocument(b, 17, 16, 0.3f, 9));

  SyntheticCorpusOptions other = SmallOptions();
  other.seed = 8;
  const SyntheticCorpus c = GenerateSyntheticCorpus(other);
  EXPECT_NE(a.tokens, c.tokens);
  EXPECT_NE(GenerateQueryForDocument(a, 17, 16, 0.3f, 9),
            GenerateQueryForDocument(a, 17, 16, 0.3f, 10));
  EXPECT_NE(GenerateQueryForDocument(a, 17, 16, 0.3f, 9),
            GenerateQueryForDocument(a, 18, 16, 0.3f, 9));
}

TEST(SyntheticTest, TokensCluster) {
  // Tokens of one document share 1-4 topics, so each token's nearest other
  // token in its document is far closer than a random pair of tokens.
  const SyntheticCorpus corpus = GenerateSyntheticCorpus(SmallOptions());
  const int32_t dim = corpus.dim;
  auto dot = [&](int64_t a, int64_t b) {
    double s = 0;
    for (int32_t j = 0; j < dim; ++j) {
      s += static_cast<double>(corpus.tokens[a * dim + j]) *
           corpus.tokens[b * dim + j];
    }
    return s;
  };
  double nearest_in_doc = 0, random_pair = 0;
  int n = 0;
  for (int64_t d = 0; d < 50; ++d) {
    const int64_t t = corpus.cu_seqlens[d];
    double best = -1;
    for (int64_t u = t + 1; u < corpus.cu_seqlens[d + 1]; ++u) {
      best = std::max(best, dot(t, u));
    }
    nearest_in_doc += best;
    random_pair += dot(t, corpus.cu_seqlens[(d * 37 + 11) % 300]);
    ++n;
  }
  EXPECT_GT(nearest_in_doc / n, 0.8);
  EXPECT_LT(std::fabs(random_pair / n), 0.3);
}

// repeat_fraction replaces about that share of each document's later
// tokens by near-duplicates (cosine above 0.97) of an earlier token of the
// same document, and leaves every other token as the corpus without it.
TEST(SyntheticTest, RepeatedTokensAreNearDuplicatesOfEarlierOnes) {
  SyntheticCorpusOptions options = SmallOptions();
  const SyntheticCorpus plain = GenerateSyntheticCorpus(options);
  options.repeat_fraction = 0.5f;
  const SyntheticCorpus repeated = GenerateSyntheticCorpus(options);
  ASSERT_EQ(plain.cu_seqlens, repeated.cu_seqlens);
  ASSERT_EQ(plain.tokens.size(), repeated.tokens.size());
  const int32_t dim = plain.dim;
  auto cosine = [&](const float* a, const float* b) {
    double s = 0;
    for (int32_t j = 0; j < dim; ++j) s += static_cast<double>(a[j]) * b[j];
    return s / (Norm(a, dim) * Norm(b, dim));
  };
  int64_t later = 0, replaced = 0;
  for (size_t d = 0; d + 1 < plain.cu_seqlens.size(); ++d) {
    const int64_t begin = plain.cu_seqlens[d];
    const int64_t end = plain.cu_seqlens[d + 1];
    EXPECT_TRUE(std::equal(&plain.tokens[begin * dim],
                           &plain.tokens[(begin + 1) * dim],
                           &repeated.tokens[begin * dim]));
    for (int64_t t = begin + 1; t < end; ++t) {
      ++later;
      const float* got = &repeated.tokens[t * dim];
      EXPECT_NEAR(Norm(got, dim), 1.0, 1e-5);
      if (std::equal(got, got + dim, &plain.tokens[t * dim])) continue;
      ++replaced;
      double best = -1;
      for (int64_t u = begin; u < t; ++u) {
        best = std::max(best, cosine(got, &repeated.tokens[u * dim]));
      }
      EXPECT_GT(best, 0.97) << "document " << d << " token " << t - begin;
    }
  }
  EXPECT_NEAR(static_cast<double>(replaced) / later, 0.5, 0.03);
}

TEST(SyntheticTest, QueryRanksItsSourceDocumentFirst) {
  const SyntheticCorpus corpus = GenerateSyntheticCorpus(SmallOptions());
  const SegmentView view = ViewOf(corpus);
  const int32_t lq = 32;
  int first = 0, tried = 0;
  for (int64_t source = 0; source < view.num_docs; source += 7) {
    const std::vector<float> query = GenerateQueryForDocument(
        corpus, source, lq, SmallOptions().noise, /*seed=*/100 + source);
    ASSERT_EQ(query.size(), static_cast<size_t>(lq) * corpus.dim);
    const double source_score = ReferenceScore(query.data(), lq, view, source);
    bool best = true;
    for (int64_t d = 0; d < view.num_docs && best; ++d) {
      if (d != source &&
          ReferenceScore(query.data(), lq, view, d) >= source_score) {
        best = false;
      }
    }
    first += best ? 1 : 0;
    ++tried;
  }
  // "Most" documents: the demo relies on the source being the top hit.
  EXPECT_GE(first, tried * 9 / 10) << first << " of " << tried;
  std::printf("source ranked first for %d of %d queries\n", first, tried);
}

TEST(SyntheticTest, QueryForInvalidDocumentIsEmpty) {
  const SyntheticCorpus corpus = GenerateSyntheticCorpus(SmallOptions());
  EXPECT_TRUE(GenerateQueryForDocument(corpus, -1, 8, 0.3f, 1).empty());
  EXPECT_TRUE(GenerateQueryForDocument(corpus, 300, 8, 0.3f, 1).empty());
  EXPECT_TRUE(GenerateQueryForDocument(corpus, 0, 0, 0.3f, 1).empty());
  EXPECT_EQ(GenerateQueryForDocument(corpus, 299, 8, 0.3f, 1).size(),
            8u * corpus.dim);
}

}  // namespace
}  // namespace maxsimd
