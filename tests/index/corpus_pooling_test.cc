// Token pooling at ingest (CorpusConfig::pool_factor): what DocumentBuilder
// stores for every layout, with and without normalisation and threads, the
// limits it enforces, and a pooled corpus's rankings.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "index/corpus.h"
#include "index/token_pooling.h"
#include "kernels/base/thread_pool.h"
#include "kernels/element.h"
#include "kernels/maxsim_cpu.h"
#include "kernels/quantize.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int32_t kDim = 16;

// Documents of the given lengths, random values in [-1, 1) scaled by 3 (so
// that normalisation changes them).
struct Docs {
  std::vector<std::string> ids;
  std::vector<int32_t> counts;
  std::vector<float> tokens;
};

Docs RandomDocs(const std::vector<int32_t>& lengths, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  Docs d;
  for (size_t i = 0; i < lengths.size(); ++i) {
    d.ids.push_back(absl::StrCat("doc", i));
    d.counts.push_back(lengths[i]);
    for (int64_t v = 0; v < int64_t{lengths[i]} * kDim; ++v) {
      d.tokens.push_back(u(rng));
    }
  }
  return d;
}

CorpusConfig ConfigOf(Layout layout, DType dtype, bool normalize,
                      int32_t pool_factor) {
  CorpusConfig c;
  c.name = "pooled";
  c.dim = kDim;
  c.layout = layout;
  c.storage_dtype = dtype;
  c.normalize = normalize;
  c.pool_factor = pool_factor;
  return c;
}

// What the builder must store: each row normalised (when asked), each
// document pooled by PoolTokenBatch, each pooled row converted to the
// builder's dtype (float16 for PLAID, compressed later by the append).
SegmentData Expected(const CorpusConfig& c, const Docs& d) {
  std::vector<float> rows = d.tokens;
  const int64_t n = static_cast<int64_t>(rows.size()) / kDim;
  if (c.normalize) {
    for (int64_t r = 0; r < n; ++r) {
      double norm2 = 0.0;
      for (int32_t j = 0; j < kDim; ++j) {
        norm2 += double{rows[r * kDim + j]} * rows[r * kDim + j];
      }
      ScaleToUnitNorm(rows.data() + r * kDim, kDim, norm2);
    }
  }
  std::vector<int64_t> cu{0};
  for (int32_t count : d.counts) cu.push_back(cu.back() + count);
  SegmentData out;
  std::vector<float> pooled;
  EXPECT_THAT(PoolTokenBatch(rows, cu, kDim, {c.pool_factor, c.normalize},
                             nullptr, &pooled, &out.cu_seqlens),
              IsOk());
  const int64_t k = out.cu_seqlens.back();
  out.dtype = c.layout == Layout::kPlaid ? DType::kFloat16 : c.storage_dtype;
  out.tokens.resize(static_cast<size_t>(k) * kDim * DTypeSize(out.dtype));
  if (out.dtype == DType::kInt8) {
    out.scales.resize(static_cast<size_t>(k));
    QuantizeInt8Rows(pooled.data(), k, kDim,
                     reinterpret_cast<int8_t*>(out.tokens.data()),
                     out.scales.data());
  } else {
    ConvertFromFloat(pooled.data(), k * kDim, out.dtype, out.tokens.data());
  }
  return out;
}

struct LayoutCase {
  Layout layout;
  DType dtype;
};

class PooledBuilderTest
    : public ::testing::TestWithParam<std::tuple<LayoutCase, bool, int>> {};

// Two messages, documents of 1 to 129 tokens: every document keeps
// ceil(n / pool_factor) rows, its means as PoolTokenBatch forms them, in
// the layout's storage; a pool of threads gives the same bytes.
TEST_P(PooledBuilderTest, StoresEachDocumentsClusterMeans) {
  const auto [layout_case, normalize, pool_factor] = GetParam();
  const CorpusConfig c =
      ConfigOf(layout_case.layout, layout_case.dtype, normalize, pool_factor);
  ASSERT_THAT(ValidateCorpusConfig(c, CorpusLimits{}), IsOk());
  const Docs first = RandomDocs({1, 2, 3, 7, 40, 129}, 11);
  const Docs second = RandomDocs({64, 5}, 12);
  ThreadPool threads(3);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &threads}) {
    DocumentBuilder b(c, CorpusLimits{}, pool);
    ASSERT_THAT(b.Add(first.ids, first.counts, first.tokens.data(),
                      static_cast<int64_t>(first.tokens.size()) / kDim,
                      DType::kFloat32, "m0"),
                IsOk());
    std::vector<std::string> ids2 = {"late0", "late1"};
    ASSERT_THAT(b.Add(ids2, second.counts, second.tokens.data(),
                      static_cast<int64_t>(second.tokens.size()) / kDim,
                      DType::kFloat32, "m1"),
                IsOk());
    const SegmentData got = b.Take();
    const SegmentData want_first = Expected(c, first);
    const SegmentData want_second = Expected(c, second);
    // Counts: ceil(n / pool_factor) per document, in order.
    std::vector<int64_t> want_cu = want_first.cu_seqlens;
    for (size_t i = 1; i < want_second.cu_seqlens.size(); ++i) {
      want_cu.push_back(want_first.cu_seqlens.back() +
                        want_second.cu_seqlens[i]);
    }
    EXPECT_EQ(got.cu_seqlens, want_cu);
    for (size_t i = 0; i < first.counts.size(); ++i) {
      EXPECT_EQ(got.cu_seqlens[i + 1] - got.cu_seqlens[i],
                (first.counts[i] + pool_factor - 1) / pool_factor);
    }
    EXPECT_EQ(got.ids,
              (std::vector<std::string>{"doc0", "doc1", "doc2", "doc3", "doc4",
                                        "doc5", "late0", "late1"}));
    std::vector<char> want_tokens = want_first.tokens;
    want_tokens.insert(want_tokens.end(), want_second.tokens.begin(),
                       want_second.tokens.end());
    EXPECT_EQ(got.tokens, want_tokens) << (pool ? "threads" : "one thread");
    std::vector<float> want_scales = want_first.scales;
    want_scales.insert(want_scales.end(), want_second.scales.begin(),
                       want_second.scales.end());
    EXPECT_EQ(got.scales, want_scales);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PooledBuilderTest,
    ::testing::Combine(
        ::testing::Values(LayoutCase{Layout::kDense, DType::kFloat16},
                          LayoutCase{Layout::kDense, DType::kBFloat16},
                          LayoutCase{Layout::kInt8, DType::kInt8},
                          LayoutCase{Layout::kPlaid, PlaidDType(2)}),
        ::testing::Bool(), ::testing::Values(2, 3)));

// The semantics, independent of the implementation above: a document of
// two tight bundles of near-duplicate tokens, pooled to two rows, keeps one
// unit row per bundle, along the bundle's direction, in order of first
// token.
TEST(PooledBuilderSemanticsTest, BundlesOfNearDuplicatesBecomeTheirMeans) {
  CorpusConfig c = ConfigOf(Layout::kDense, DType::kFloat16, true, 4);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> noise(0.f, 0.01f);
  std::vector<float> a(kDim, 0.f), b(kDim, 0.f);
  a[0] = 1.f;
  b[1] = 1.f;
  std::vector<float> tokens;
  for (const std::vector<float>* dir : {&a, &b, &a, &b, &a, &b, &a, &b}) {
    for (int32_t j = 0; j < kDim; ++j) tokens.push_back((*dir)[j] + noise(rng));
  }
  DocumentBuilder builder(c, CorpusLimits{});
  ASSERT_THAT(builder.Add({"x"}, {8}, tokens.data(), 8, DType::kFloat32, "m"),
              IsOk());
  const SegmentData got = builder.Take();
  ASSERT_EQ(got.cu_seqlens, (std::vector<int64_t>{0, 2}));
  std::vector<float> rows(2 * kDim);
  ConvertToFloat(got.tokens.data(), DType::kFloat16, 0, 2 * kDim, rows.data());
  EXPECT_NEAR(rows[0], 1.f, 1e-3);         // bundle a first (token 0)
  EXPECT_NEAR(rows[kDim + 1], 1.f, 1e-3);  // then bundle b
  for (int32_t j = 2; j < kDim; ++j) {
    EXPECT_NEAR(rows[j], 0.f, 0.02f);
    EXPECT_NEAR(rows[kDim + j], 0.f, 0.02f);
  }
}

TEST(PooledBuilderLimitsTest, RefusesWhatItCannotPoolAndKeepsNothing) {
  const CorpusConfig c = ConfigOf(Layout::kDense, DType::kFloat16, false, 2);
  DocumentBuilder b(c, CorpusLimits{});
  const int32_t too_long = static_cast<int32_t>(kMaxPooledDocumentTokens) + 1;
  std::vector<float> tokens(static_cast<size_t>(too_long + 3) * kDim, 0.5f);
  EXPECT_THAT(
      b.Add({"ok", "long"}, {3, too_long}, tokens.data(), too_long + 3,
            DType::kFloat32, "m0"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("m0: token_counts[1] is 8193"),
                     HasSubstr("pool_factor 2"), HasSubstr("at most 8192"))));
  // A bad value is named by its row in the message, as without pooling.
  tokens[5 * kDim + 1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(
      b.Add({"a", "b"}, {3, 4}, tokens.data(), 7, DType::kFloat32, "m1"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("m1: tokens row 5 column 1")));
  tokens[5 * kDim + 1] = 70000.f;  // past float16
  EXPECT_THAT(
      b.Add({"a", "b"}, {3, 4}, tokens.data(), 7, DType::kFloat32, "m2"),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          AllOf(HasSubstr("m2: tokens row 5 column 1"), HasSubstr("float16"))));
  EXPECT_THAT(b.AddPlaid({"z"}, {1}, PlaidCodec{}, nullptr, nullptr, 1, "m3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("m3"), HasSubstr("pool_factor 2"),
                             HasSubstr("compressed"))));
  EXPECT_EQ(b.num_docs(), 0);
  EXPECT_EQ(b.num_tokens(), 0);
  tokens[5 * kDim + 1] = 0.25f;
  ASSERT_THAT(
      b.Add({"a", "b"}, {3, 4}, tokens.data(), 7, DType::kFloat32, "m4"),
      IsOk());
  EXPECT_EQ(b.num_tokens(), 4);  // ceil(3 / 2) + ceil(4 / 2)
}

TEST(PooledBuilderLimitsTest, ConfigTakesFactorsFromOneTo1024) {
  CorpusConfig c = ConfigOf(Layout::kDense, DType::kFloat16, false, 1);
  for (int32_t ok : {1, 2, 1024}) {
    c.pool_factor = ok;
    EXPECT_THAT(ValidateCorpusConfig(c, CorpusLimits{}), IsOk()) << ok;
  }
  for (int32_t bad : {0, -1, 1025}) {
    c.pool_factor = bad;
    EXPECT_THAT(ValidateCorpusConfig(c, CorpusLimits{}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("pool_factor is ", bad,
                                                ", must be in [1, 1024]"))));
  }
}

// A pooled corpus scores its pooled documents: the same rankings, ids
// included, as a corpus without pooling given the pooled tokens.
TEST(PooledCorpusTest, RanksLikeACorpusOfItsPooledDocuments) {
  std::unique_ptr<CpuBackend> backend = CpuBackend::Create({}).value();
  const CorpusConfig pooled_config =
      ConfigOf(Layout::kDense, DType::kFloat16, true, 2);
  CorpusConfig plain_config = pooled_config;
  plain_config.name = "plain";
  plain_config.pool_factor = 1;
  std::vector<int32_t> lengths;
  for (int i = 0; i < 60; ++i) lengths.push_back(1 + (i * 37) % 90);
  const Docs docs = RandomDocs(lengths, 21);
  const SegmentData pooled_rows = Expected(pooled_config, docs);
  std::vector<int32_t> pooled_counts;
  for (size_t i = 0; i + 1 < pooled_rows.cu_seqlens.size(); ++i) {
    pooled_counts.push_back(static_cast<int32_t>(pooled_rows.cu_seqlens[i + 1] -
                                                 pooled_rows.cu_seqlens[i]));
  }
  auto pooled = Corpus::Create(pooled_config, {}, backend.get()).value();
  auto plain = Corpus::Create(plain_config, {}, backend.get()).value();
  DocumentBuilder pb(pooled_config, CorpusLimits{});
  ASSERT_THAT(pb.Add(docs.ids, docs.counts, docs.tokens.data(),
                     static_cast<int64_t>(docs.tokens.size()) / kDim,
                     DType::kFloat32, "m"),
              IsOk());
  ASSERT_THAT(pooled->Append(pb.Take()), IsOk());
  DocumentBuilder qb(plain_config, CorpusLimits{});
  ASSERT_THAT(qb.Add(docs.ids, pooled_counts, pooled_rows.tokens.data(),
                     pooled_rows.cu_seqlens.back(), DType::kFloat16, "m"),
              IsOk());
  ASSERT_THAT(plain->Append(qb.Take()), IsOk());
  EXPECT_EQ(pooled->Snapshot()->live_tokens(), pooled_rows.cu_seqlens.back());
  EXPECT_LT(pooled->Snapshot()->live_tokens() * 2,
            static_cast<int64_t>(docs.tokens.size()) / kDim + 61);

  std::mt19937_64 rng(3);
  std::normal_distribution<float> g;
  for (int q = 0; q < 4; ++q) {
    SearchBatch batch;
    batch.dim = kDim;
    std::vector<float> query(static_cast<size_t>(8) * kDim);
    for (float& v : query) v = g(rng);
    batch.AddQuery(query, 20);
    std::vector<std::vector<ScoredDoc>> got(1), want(1);
    const auto ps = pooled->Snapshot();
    const auto qs = plain->Snapshot();
    SearchBatch on_plain = batch;
    batch.refs = ps->SegmentRefs();
    on_plain.refs = qs->SegmentRefs();
    ASSERT_THAT(backend->Search(batch.Params(), absl::MakeSpan(got), nullptr),
                IsOk());
    ASSERT_THAT(
        backend->Search(on_plain.Params(), absl::MakeSpan(want), nullptr),
        IsOk());
    ASSERT_EQ(got[0].size(), want[0].size());
    for (size_t i = 0; i < got[0].size(); ++i) {
      EXPECT_EQ(ps->IdOf(got[0][i].index), qs->IdOf(want[0][i].index));
      EXPECT_EQ(got[0][i].score, want[0][i].score);
    }
  }
}

}  // namespace
}  // namespace maxsimd
