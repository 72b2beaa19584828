// PLAID candidate generation in batches (index/plaid_search.h): the
// centroid product against double-precision dot products and row by row
// against itself, and PlaidCandidatesBatch against PlaidCandidates per
// query and against a naive reference of steps 2 to 4 (every document of
// every segment, full sorts), on random PLAID corpora of several segments
// with deletions, random query lengths and parameters (seed printed).
// Where the product runs: on a backend that scores centroids (a fake over
// the CPU backend, counting its calls), with the host as the fallback for
// UNIMPLEMENTED and the backend's other errors failing the batch; the
// checks of Backend::ScoreCentroids' arguments, and ShardedBackend's
// forwarding to the shard named. tests/kernels/gpu_backend_centroids_test
// is the GPU twin.
#include "index/plaid_search.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/corpus.h"
#include "index/synthetic.h"
#include "kernels/maxsim_cpu.h"
#include "kernels/sharded_backend.h"
#include "tests/support/forwarding_backend.h"
#include "tests/support/ranking.h"
#include "tests/support/status_matchers.h"
#include "tests/support/synthetic_plaid.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::TestSeed;
using ::testing::HasSubstr;

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

// The CPU backend with a centroid product, as a GPU backend has one, that
// counts its calls and answers as `mode` says: kHost, the host's product
// (the values a GPU computes); kNegated, its negation (so that a test sees
// steps 2 to 4 read what the backend returned); kUnimplemented; kFail,
// UNAVAILABLE as after a device failure. Its memory is the host's, so the
// tables a CPU corpus resides in are readable here.
class ProductBackend final : public testing::ForwardingBackend {
 public:
  enum class Mode { kHost, kNegated, kUnimplemented, kFail };

  explicit ProductBackend(Mode mode)
      : ForwardingBackend(CpuBackend::Create({}).value()), mode_(mode) {}

  // The CPU backend's, so that PLAID corpora can be made on this one.
  bool SupportsDType(DType dtype, int32_t dim) const override {
    return cpu_->SupportsDType(dtype, dim);
  }
  bool ScoresCentroids() const override { return true; }
  absl::Status ScoreCentroids(int shard, const PlaidTablesView& tables,
                              int32_t dim, absl::Span<const float> tokens,
                              absl::Span<float> scores) override {
    ++calls_;
    last_shard_ = shard;
    const absl::Status valid = ValidateScoreCentroids(
        shard, num_shards(), tables, dim, tokens, scores, limits());
    if (!valid.ok()) return valid;
    if (mode_ == Mode::kUnimplemented) {
      return absl::UnimplementedError("ProductBackend: no product here");
    }
    if (mode_ == Mode::kFail) {
      return absl::UnavailableError("ProductBackend: the device has failed");
    }
    const std::vector<float> host =
        testing::HostTablesProduct(tables, dim, tokens);
    for (size_t i = 0; i < host.size(); ++i) {
      scores[i] = mode_ == Mode::kNegated ? -host[i] : host[i];
    }
    return absl::OkStatus();
  }

  int calls() const { return calls_; }
  int last_shard() const { return last_shard_; }

 private:
  const Backend* cpu_ = &inner();
  Mode mode_;
  int calls_ = 0;
  int last_shard_ = -1;
};

// `n` queries of 1 to 40 tokens near random documents of `parts`, with
// random parameters; their tokens in *tokens, which must outlive them.
std::vector<PlaidQuery> RandomQueries(std::mt19937_64& rng,
                                      const std::vector<SyntheticCorpus>& parts,
                                      int n,
                                      std::vector<std::vector<float>>* tokens) {
  tokens->assign(n, {});
  std::vector<PlaidQuery> queries(n);
  for (int i = 0; i < n; ++i) {
    const SyntheticCorpus& part = parts[rng() % parts.size()];
    const int32_t lq = std::uniform_int_distribution<int32_t>(1, 40)(rng);
    (*tokens)[i] = GenerateQueryForDocument(
        part, static_cast<int64_t>(rng() % part.ids.size()), lq, 0.5f, rng());
    queries[i].tokens = (*tokens)[i].data();
    queries[i].lq = lq;
    queries[i].params.n_ivf_probe =
        std::uniform_int_distribution<int32_t>(1, 30)(rng);
    queries[i].params.n_full_scores =
        std::uniform_int_distribution<int32_t>(1, 300)(rng);
  }
  return queries;
}

// The host's product of the queries' stacked tokens.
std::vector<float> HostProduct(const CorpusSnapshot& snap,
                               absl::Span<const PlaidQuery> queries) {
  std::vector<float> stacked;
  const int32_t dim = snap.codec()->codec().dim;
  for (const PlaidQuery& q : queries) {
    stacked.insert(stacked.end(), q.tokens, q.tokens + q.lq * dim);
  }
  return PlaidCentroidScores(snap.codec()->codec(), stacked.data(),
                             static_cast<int64_t>(stacked.size()) / dim);
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
// reference gives, with one product; and the same on a host pool (the
// product in blocks of rows, the queries' probing and pruning in
// parallel).
TEST_F(PlaidSearchTest, BatchEqualsPerQueryCandidatesOnRandomCorpora) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  ThreadPool pool(3);
  PlaidProduct pooled;
  pooled.host_pool = [&pool] { return &pool; };
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<SyntheticCorpus> parts;
    auto corpus = RandomCorpus(rng, 1 + trial % 3, &parts);
    const auto snap = corpus->Snapshot();
    ASSERT_NE(snap->codec(), nullptr);
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    std::vector<std::vector<float>> tokens;
    const std::vector<PlaidQuery> queries =
        RandomQueries(rng, parts, n, &tokens);
    PlaidBatchStats stats;
    const std::vector<std::vector<DocRef>> batch =
        PlaidCandidatesBatch(*snap, queries, {}, &stats).value();
    EXPECT_EQ(stats.centroid_products, 1);
    EXPECT_EQ(stats.device_products, 0);
    ASSERT_EQ(batch.size(), static_cast<size_t>(n));
    const std::vector<std::vector<DocRef>> on_pool =
        PlaidCandidatesBatch(*snap, queries, pooled).value();
    ASSERT_EQ(on_pool.size(), static_cast<size_t>(n));
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
      EXPECT_EQ(Show(on_pool[i]), Show(batch[i]));
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
  const auto none =
      PlaidCandidatesBatch(*empty->Snapshot(), two, {}, &stats).value();
  ASSERT_EQ(none.size(), 2u);
  EXPECT_TRUE(none[0].empty());
  EXPECT_TRUE(none[1].empty());
  EXPECT_EQ(stats.centroid_products, 0);

  const auto snap = corpus->Snapshot();
  const std::vector<PlaidQuery> mixed = {{query.data(), 5, params},
                                         {nullptr, 0, params},
                                         {query.data(), 5, params}};
  const auto got = PlaidCandidatesBatch(*snap, mixed, {}, &stats).value();
  EXPECT_EQ(stats.centroid_products, 1);
  ASSERT_EQ(got.size(), 3u);
  const std::vector<DocRef> want =
      PlaidCandidates(*snap, query.data(), 5, params);
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(Show(got[0]), Show(want));
  EXPECT_TRUE(got[1].empty());
  EXPECT_EQ(Show(got[2]), Show(want));
  EXPECT_TRUE(PlaidCandidatesBatch(*snap, {}, {}, &stats).value().empty());
  EXPECT_EQ(stats.centroid_products, 0);
}

// A backend that scores centroids runs the batch's one product (the pool
// is asked for once, for steps 2 to 4), and those read what it returned:
// the host's values give the host's candidates, their negation the
// candidates of those scores.
TEST_F(PlaidSearchTest, BatchRunsItsProductOnABackendThatScoresCentroids) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<SyntheticCorpus> parts;
  auto corpus = RandomCorpus(rng, 2, &parts);
  const auto snap = corpus->Snapshot();
  std::vector<std::vector<float>> tokens;
  const std::vector<PlaidQuery> queries = RandomQueries(rng, parts, 8, &tokens);
  const std::vector<std::vector<DocRef>> host =
      PlaidCandidatesBatch(*snap, queries).value();

  ProductBackend exact(ProductBackend::Mode::kHost);
  int asked = 0;
  PlaidProduct product;
  product.backend = &exact;
  product.host_pool = [&asked]() -> ThreadPool* {
    ++asked;
    return nullptr;
  };
  PlaidBatchStats stats;
  const auto got = PlaidCandidatesBatch(*snap, queries, product, &stats);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(exact.calls(), 1);
  EXPECT_EQ(exact.last_shard(), 0);
  EXPECT_EQ(stats.centroid_products, 1);
  EXPECT_EQ(stats.device_products, 1);
  EXPECT_EQ(asked, 1);
  ASSERT_EQ(got->size(), queries.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    EXPECT_EQ(Show((*got)[i]), Show(host[i])) << "seed " << seed << " q " << i;
  }

  ProductBackend negated(ProductBackend::Mode::kNegated);
  product.backend = &negated;
  const auto flipped = PlaidCandidatesBatch(*snap, queries, product, &stats);
  ASSERT_THAT(flipped, IsOk());
  EXPECT_EQ(negated.calls(), 1);
  std::vector<float> scores = HostProduct(*snap, queries);
  for (float& v : scores) v = -v;
  const auto want = PlaidCandidatesFromScores(*snap, queries, scores.data());
  int differ = 0;
  for (size_t i = 0; i < queries.size(); ++i) {
    EXPECT_EQ(Show((*flipped)[i]), Show(want[i]))
        << "seed " << seed << " q " << i;
    differ += Show((*flipped)[i]) != Show(host[i]);
  }
  EXPECT_GT(differ, 0) << "seed " << seed;
}

// A backend without the kernel (UNIMPLEMENTED): the host runs the product,
// on the pool the caller hands out, asked for once.
TEST_F(PlaidSearchTest, UnimplementedProductRunsOnTheHost) {
  std::mt19937_64 rng(11);
  std::vector<SyntheticCorpus> parts;
  auto corpus = RandomCorpus(rng, 1, &parts);
  const auto snap = corpus->Snapshot();
  std::vector<std::vector<float>> tokens;
  const std::vector<PlaidQuery> queries = RandomQueries(rng, parts, 5, &tokens);
  const auto host = PlaidCandidatesBatch(*snap, queries).value();

  ProductBackend none(ProductBackend::Mode::kUnimplemented);
  ThreadPool pool(2);
  int asked = 0;
  PlaidProduct product;
  product.backend = &none;
  product.host_pool = [&]() -> ThreadPool* {
    ++asked;
    return &pool;
  };
  PlaidBatchStats stats;
  const auto got = PlaidCandidatesBatch(*snap, queries, product, &stats);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(none.calls(), 1);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(stats.centroid_products, 1);
  EXPECT_EQ(stats.device_products, 0);
  for (size_t i = 0; i < queries.size(); ++i) {
    EXPECT_EQ(Show((*got)[i]), Show(host[i])) << "query " << i;
  }
  // A backend whose ScoresCentroids() is false is not asked at all.
  auto cpu = CpuBackend::Create({}).value();
  product.backend = cpu.get();
  ASSERT_THAT(PlaidCandidatesBatch(*snap, queries, product, &stats), IsOk());
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(stats.device_products, 0);
}

// Any other error of the backend fails the batch as it is: no host
// product, none counted. A batch with nothing to multiply never asks.
TEST_F(PlaidSearchTest, BackendErrorFailsTheBatch) {
  std::mt19937_64 rng(12);
  std::vector<SyntheticCorpus> parts;
  auto corpus = RandomCorpus(rng, 1, &parts);
  const auto snap = corpus->Snapshot();
  std::vector<std::vector<float>> tokens;
  const std::vector<PlaidQuery> queries = RandomQueries(rng, parts, 3, &tokens);
  ProductBackend failing(ProductBackend::Mode::kFail);
  int asked = 0;
  PlaidProduct product;
  product.backend = &failing;
  product.host_pool = [&asked]() -> ThreadPool* {
    ++asked;
    return nullptr;
  };
  PlaidBatchStats stats;
  stats.centroid_products = 7;
  EXPECT_THAT(PlaidCandidatesBatch(*snap, queries, product, &stats),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("the device has failed")));
  EXPECT_EQ(failing.calls(), 1);
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(stats.centroid_products, 0);
  EXPECT_EQ(stats.device_products, 0);

  const std::vector<PlaidQuery> empty = {{nullptr, 0, {}}};
  EXPECT_THAT(PlaidCandidatesBatch(*snap, empty, product, &stats), IsOk());
  EXPECT_EQ(failing.calls(), 1);
}

// On a sharded backend the product runs on the shard of the snapshot's
// first segment, with that shard's copy of the tables.
TEST_F(PlaidSearchTest, ShardedCorpusRunsItsProductOnTheFirstSegmentsShard) {
  std::vector<std::unique_ptr<Backend>> children;
  std::vector<ProductBackend*> shards;
  for (int i = 0; i < 2; ++i) {
    children.push_back(
        std::make_unique<ProductBackend>(ProductBackend::Mode::kHost));
    shards.push_back(static_cast<ProductBackend*>(children.back().get()));
  }
  auto sharded = ShardedBackend::Create(std::move(children), 1).value();
  SyntheticCorpusOptions o;
  o.num_docs = 200;
  o.dim = 16;
  o.num_clusters = 8;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(o);
  auto corpus =
      testing::MakeSyntheticPlaidCorpus(sharded.get(), "p", 12, synth);
  const auto snap = corpus->Snapshot();
  ASSERT_FALSE(snap->segments().empty());
  const int shard = snap->segments().front()->shard();
  const std::vector<float> q = GenerateQueryForDocument(synth, 5, 6, 0.3f, 2);
  const std::vector<PlaidQuery> queries = {{q.data(), 6, {2, 40}}};
  PlaidProduct product;
  product.backend = sharded.get();
  const auto got = PlaidCandidatesBatch(*snap, queries, product);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(shards[shard]->calls(), 1);
  EXPECT_EQ(shards[shard]->last_shard(), 0);  // the child's own memory
  EXPECT_EQ(shards[1 - shard]->calls(), 0);
  EXPECT_EQ(Show(got->front()),
            Show(PlaidCandidates(*snap, q.data(), 6, {2, 40})));
}

// ScoreCentroids' arguments: INVALID_ARGUMENT naming the field and the
// limit; a backend without the kernel answers UNIMPLEMENTED.
TEST(ScoreCentroidsTest, ValidationNamesTheFieldAndTheLimit) {
  const std::vector<float> centroids(3 * 4, 1.f);
  const std::vector<float> tokens(2 * 4, 1.f);
  std::vector<float> scores(2 * 3);
  PlaidTablesView t;
  t.centroids = centroids.data();
  t.num_centroids = 3;
  BackendLimits lim;
  lim.max_dim = 8;
  lim.max_batch_query_tokens = 2;
  EXPECT_THAT(ValidateScoreCentroids(0, 1, t, 4, tokens, scores, lim), IsOk());
  const auto bad = [](const char* what) {
    return StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what));
  };
  EXPECT_THAT(ValidateScoreCentroids(1, 1, t, 4, tokens, scores, lim),
              bad("shard is 1, must be in [0, 1)"));
  EXPECT_THAT(ValidateScoreCentroids(0, 1, t, 0, tokens, scores, lim),
              bad("dim is 0, must be in [1, 8]"));
  EXPECT_THAT(ValidateScoreCentroids(0, 1, t, 9, tokens, scores, lim),
              bad("dim is 9, must be in [1, 8]"));
  EXPECT_THAT(ValidateScoreCentroids(0, 1, t, 3, tokens, scores, lim),
              bad("tokens has 8 values, not a multiple of dim 3"));
  const std::vector<float> three(3 * 4, 1.f);
  EXPECT_THAT(ValidateScoreCentroids(0, 1, t, 4, three, scores, lim),
              bad("tokens has 3 rows, the limit is 2"));
  EXPECT_THAT(
      ValidateScoreCentroids(0, 1, t, 4, tokens,
                             absl::MakeConstSpan(scores).subspan(1), lim),
      bad("scores has 5 entries for 2 rows x 3 centroids"));
  PlaidTablesView none = t;
  none.num_centroids = 0;
  EXPECT_THAT(ValidateScoreCentroids(0, 1, none, 4, tokens, {}, lim),
              bad("tables.num_centroids is 0"));
  none = t;
  none.centroids = nullptr;
  EXPECT_THAT(ValidateScoreCentroids(0, 1, none, 4, tokens, scores, lim),
              bad("tables.centroids is null"));

  auto cpu = CpuBackend::Create({}).value();
  EXPECT_FALSE(cpu->ScoresCentroids());
  EXPECT_THAT(cpu->ScoreCentroids(0, t, 4, tokens, absl::MakeSpan(scores)),
              StatusIs(absl::StatusCode::kUnimplemented));
}

// ShardedBackend sends ScoreCentroids to the shard named, as that child's
// shard 0, refuses a shard out of range, and scores centroids when every
// shard does.
TEST(ScoreCentroidsTest, ShardedBackendForwardsToTheShardNamed) {
  std::vector<std::unique_ptr<Backend>> children;
  std::vector<ProductBackend*> shards;
  for (int i = 0; i < 2; ++i) {
    children.push_back(
        std::make_unique<ProductBackend>(ProductBackend::Mode::kHost));
    shards.push_back(static_cast<ProductBackend*>(children.back().get()));
  }
  auto sharded = ShardedBackend::Create(std::move(children), 1).value();
  EXPECT_TRUE(sharded->ScoresCentroids());
  std::mt19937_64 rng(3);
  const PlaidCodec codec = RandomCodec(rng, 5, 8);
  const std::vector<float> tokens = testing::RandomQuery(rng, 3, 8);
  PlaidTablesView t;
  t.centroids = codec.centroids.data();
  t.num_centroids = 5;
  std::vector<float> scores(3 * 5);
  ASSERT_THAT(sharded->ScoreCentroids(1, t, 8, tokens, absl::MakeSpan(scores)),
              IsOk());
  EXPECT_EQ(shards[0]->calls(), 0);
  EXPECT_EQ(shards[1]->calls(), 1);
  EXPECT_EQ(shards[1]->last_shard(), 0);
  EXPECT_EQ(scores, PlaidCentroidScores(codec, tokens.data(), 3));
  EXPECT_THAT(sharded->ScoreCentroids(2, t, 8, tokens, absl::MakeSpan(scores)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shard is 2, must be in [0, 2)")));

  std::vector<std::unique_ptr<Backend>> mixed;
  mixed.push_back(
      std::make_unique<ProductBackend>(ProductBackend::Mode::kHost));
  mixed.push_back(CpuBackend::Create({}).value());
  EXPECT_FALSE(
      ShardedBackend::Create(std::move(mixed), 1).value()->ScoresCentroids());
}

}  // namespace
}  // namespace maxsimd
