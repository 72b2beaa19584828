// PLAID candidate generation in batches (index/plaid_search.h): the
// centroid product against double-precision dot products and row by row
// against itself, and PlaidCandidatesBatch against PlaidCandidates per
// query and against a naive reference of steps 2 to 4 (every document of
// every segment, full sorts), on random PLAID corpora of several segments
// with deletions, random query lengths and parameters (seed printed).
#include "index/plaid_search.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "index/corpus.h"
#include "index/synthetic.h"
#include "kernels/maxsim_cpu.h"
#include "tests/support/ranking.h"
#include "tests/support/status_matchers.h"
#include "tests/support/synthetic_plaid.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::TestSeed;

// A codec of `k` random centroids of `dim`, for the product alone.
PlaidCodec RandomCodec(std::mt19937_64& rng, int64_t k, int32_t dim) {
  PlaidCodec c;
  c.dim = dim;
  c.nbits = 2;
  c.num_centroids = k;
  std::normal_distribution<float> normal(0.f, 1.f);
  c.centroids.resize(static_cast<size_t>(k * dim));
  for (float& v : c.centroids) v = normal(rng);
  return c;
}

// Steps 2 to 4 without the inverted files: every live document of every
// segment that has a token in one of the probed cells, full sorts.
std::vector<DocRef> NaiveCandidates(const CorpusSnapshot& snap,
                                    const float* query, int64_t lq,
                                    const PlaidSearchParams& params) {
  if (snap.codec() == nullptr || lq == 0) return {};
  const PlaidCodec& codec = snap.codec()->codec();
  const int64_t k = codec.num_centroids;
  const std::vector<float> qc = PlaidCentroidScores(codec, query, lq);
  std::set<int32_t> cells;
  for (int64_t s = 0; s < lq; ++s) {
    const float* row = qc.data() + s * k;
    std::vector<int32_t> order(static_cast<size_t>(k));
    for (int32_t c = 0; c < k; ++c) order[c] = c;
    std::sort(order.begin(), order.end(), [row](int32_t a, int32_t b) {
      return row[a] != row[b] ? row[a] > row[b] : a < b;
    });
    const int64_t probe = std::min<int64_t>(params.n_ivf_probe, k);
    cells.insert(order.begin(), order.begin() + probe);
  }
  struct Found {
    float approx;
    int64_t index;
    DocRef ref;
  };
  std::vector<Found> found;
  for (size_t si = 0; si < snap.segments().size(); ++si) {
    const Segment& seg = *snap.segments()[si];
    const SegmentData& d = seg.data();
    const TombstoneSet* dead = snap.tombstones(si);
    for (int32_t doc = 0; doc < seg.num_docs(); ++doc) {
      if (dead != nullptr && dead->Contains(doc)) continue;
      bool hit = false;
      for (int64_t t = d.cu_seqlens[doc]; t < d.cu_seqlens[doc + 1]; ++t) {
        hit = hit || cells.count(d.codes[t]) > 0;
      }
      if (!hit) continue;
      float approx = 0.f;
      for (int64_t s = 0; s < lq; ++s) {
        float best = -INFINITY;
        for (int64_t t = d.cu_seqlens[doc]; t < d.cu_seqlens[doc + 1]; ++t) {
          best = std::max(best, qc[s * k + d.codes[t]]);
        }
        approx += best;
      }
      found.push_back({approx, seg.base_index() + doc,
                       DocRef{static_cast<int32_t>(si), doc}});
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.approx != b.approx ? a.approx > b.approx : a.index < b.index;
  });
  std::vector<DocRef> out;
  for (size_t i = 0;
       i < found.size() && i < static_cast<size_t>(params.n_full_scores); ++i) {
    out.push_back(found[i].ref);
  }
  return out;
}

std::string Show(const std::vector<DocRef>& refs) {
  std::string s;
  for (const DocRef& r : refs) absl::StrAppend(&s, r.segment, ":", r.doc, " ");
  return s;
}

class PlaidSearchTest : public ::testing::Test {
 protected:
  PlaidSearchTest() : backend_(CpuBackend::Create({}).value()) {}

  // A PLAID corpus of dim 16 over `appends` appends of 60..140 synthetic
  // documents each (so as many segments), with a few documents deleted.
  std::shared_ptr<Corpus> RandomCorpus(std::mt19937_64& rng, int appends,
                                       std::vector<SyntheticCorpus>* parts) {
    // Draws from `rng` in a fixed order (the centroids, then each part's
    // size, seed and deletions), so a printed seed replays the same corpus.
    const int32_t centroids = std::uniform_int_distribution<int>(8, 24)(rng);
    const size_t first = parts->size();
    std::set<std::string> deleted;
    for (int a = 0; a < appends; ++a) {
      SyntheticCorpusOptions o;
      o.num_docs = std::uniform_int_distribution<int>(60, 140)(rng);
      o.dim = 16;
      o.min_tokens = 1;
      o.max_tokens = 12;
      o.num_clusters = 12;
      o.seed = rng();
      o.id_prefix = absl::StrCat("s", a, "-");
      SyntheticCorpus s = GenerateSyntheticCorpus(o);
      for (int i = 0; i < 5; ++i) {
        deleted.insert(s.ids[rng() % s.ids.size()]);
      }
      parts->push_back(std::move(s));
    }
    auto corpus = testing::MakeSyntheticPlaidCorpus(
        backend_.get(), "p", centroids,
        absl::MakeConstSpan(*parts).subspan(first));
    EXPECT_THAT(corpus->Delete({deleted.begin(), deleted.end()},
                               /*ignore_missing=*/false),
                IsOk());
    return corpus;
  }

  std::unique_ptr<CpuBackend> backend_;
};

// Each cell is a dot product within fp32 rounding, and a row's cells do not
// depend on the rows around it (block edges at 32 rows included).
TEST_F(PlaidSearchTest, CentroidScoresAreDotProductsRowByRow) {
  ThreadPool pool(3);
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  for (int32_t dim : {4, 16, 33, 128}) {
    for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{100}}) {
      const PlaidCodec codec = RandomCodec(rng, k, dim);
      const int64_t rows = 70;  // three blocks, the last partial
      const std::vector<float> tokens = testing::RandomQuery(rng, rows, dim);
      const std::vector<float> all =
          PlaidCentroidScores(codec, tokens.data(), rows);
      ASSERT_EQ(all.size(), static_cast<size_t>(rows * k));
      // The blocks on a pool's threads: the same values, bit for bit.
      EXPECT_EQ(PlaidCentroidScores(codec, tokens.data(), rows, &pool), all)
          << "seed " << seed << " dim " << dim;
      for (int64_t s = 0; s < rows; ++s) {
        const std::vector<float> alone =
            PlaidCentroidScores(codec, tokens.data() + s * dim, 1);
        for (int64_t c = 0; c < k; ++c) {
          double want = 0;
          for (int32_t j = 0; j < dim; ++j) {
            want += double{tokens[s * dim + j]} * codec.centroids[c * dim + j];
          }
          ASSERT_NEAR(all[s * k + c], want, 1e-4 * std::sqrt(dim))
              << "seed " << seed << " dim " << dim << " row " << s;
          ASSERT_EQ(all[s * k + c], alone[c])
              << "seed " << seed << " dim " << dim << " row " << s;
        }
      }
    }
  }
}

// A batch of queries of random lengths and parameters gets, query by
// query, what PlaidCandidates gives each alone and what the naive
// reference gives, with one product.
TEST_F(PlaidSearchTest, BatchEqualsPerQueryCandidatesOnRandomCorpora) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<SyntheticCorpus> parts;
    auto corpus = RandomCorpus(rng, 1 + trial % 3, &parts);
    const auto snap = corpus->Snapshot();
    ASSERT_NE(snap->codec(), nullptr);
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    std::vector<std::vector<float>> tokens(n);
    std::vector<PlaidQuery> queries(n);
    for (int i = 0; i < n; ++i) {
      const SyntheticCorpus& part = parts[rng() % parts.size()];
      const int32_t lq = std::uniform_int_distribution<int32_t>(1, 40)(rng);
      tokens[i] = GenerateQueryForDocument(
          part, static_cast<int64_t>(rng() % part.ids.size()), lq, 0.5f, rng());
      queries[i].tokens = tokens[i].data();
      queries[i].lq = lq;
      queries[i].params.n_ivf_probe =
          std::uniform_int_distribution<int32_t>(1, 30)(rng);
      queries[i].params.n_full_scores =
          std::uniform_int_distribution<int32_t>(1, 300)(rng);
    }
    PlaidBatchStats stats;
    const std::vector<std::vector<DocRef>> batch =
        PlaidCandidatesBatch(*snap, queries, &stats);
    EXPECT_EQ(stats.centroid_products, 1);
    ASSERT_EQ(batch.size(), static_cast<size_t>(n));
    int found = 0;
    for (int i = 0; i < n; ++i) {
      const PlaidQuery& q = queries[i];
      SCOPED_TRACE(absl::StrCat("seed ", seed, " trial ", trial, " query ", i,
                                " of ", n, ": lq ", q.lq, " probe ",
                                q.params.n_ivf_probe, " n_full_scores ",
                                q.params.n_full_scores));
      const std::vector<DocRef> alone =
          PlaidCandidates(*snap, q.tokens, q.lq, q.params);
      const std::vector<DocRef> naive =
          NaiveCandidates(*snap, q.tokens, q.lq, q.params);
      found += !batch[i].empty();
      EXPECT_LE(batch[i].size(), static_cast<size_t>(q.params.n_full_scores));
      EXPECT_EQ(Show(batch[i]), Show(alone));
      EXPECT_EQ(Show(batch[i]), Show(naive));
    }
    EXPECT_GT(found, 0) << "seed " << seed << " trial " << trial;
  }
}

// No codec yet: every list empty and no product. A query of no tokens gets
// nothing and leaves the others of its batch as they are.
TEST_F(PlaidSearchTest, EmptyCorpusAndEmptyQueries) {
  std::mt19937_64 rng(7);
  std::vector<SyntheticCorpus> parts;
  auto corpus = RandomCorpus(rng, 1, &parts);
  const std::vector<float> query =
      GenerateQueryForDocument(parts[0], 3, 5, 0.3f, 1);
  const PlaidSearchParams params{2, 50};

  CorpusConfig c = corpus->config();
  c.name = "empty";
  auto empty = Corpus::Create(c, CorpusLimits{}, backend_.get()).value();
  PlaidBatchStats stats;
  const std::vector<PlaidQuery> two = {{query.data(), 5, params},
                                       {query.data(), 5, params}};
  const auto none = PlaidCandidatesBatch(*empty->Snapshot(), two, &stats);
  ASSERT_EQ(none.size(), 2u);
  EXPECT_TRUE(none[0].empty());
  EXPECT_TRUE(none[1].empty());
  EXPECT_EQ(stats.centroid_products, 0);

  const auto snap = corpus->Snapshot();
  const std::vector<PlaidQuery> mixed = {{query.data(), 5, params},
                                         {nullptr, 0, params},
                                         {query.data(), 5, params}};
  const auto got = PlaidCandidatesBatch(*snap, mixed, &stats);
  EXPECT_EQ(stats.centroid_products, 1);
  ASSERT_EQ(got.size(), 3u);
  const std::vector<DocRef> want =
      PlaidCandidates(*snap, query.data(), 5, params);
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(Show(got[0]), Show(want));
  EXPECT_TRUE(got[1].empty());
  EXPECT_EQ(Show(got[2]), Show(want));
  EXPECT_TRUE(PlaidCandidatesBatch(*snap, {}, &stats).empty());
  EXPECT_EQ(stats.centroid_products, 0);
}

}  // namespace
}  // namespace maxsimd
