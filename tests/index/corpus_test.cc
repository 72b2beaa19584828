// Corpus, DocumentBuilder and CorpusRegistry: appends, deletes, snapshot
// isolation and input validation; the int8 layout's configuration, its
// quantisation at append time, its byte accounting, and its ranking quality
// against the exact one.
#include "index/corpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "index/registry.h"
#include "index/synthetic.h"
#include "kernels/element.h"
#include "kernels/maxsim_cpu.h"
#include "kernels/quantize.h"
#include "tests/index/corpus_test_util.h"
#include "tests/support/sanitizer.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

class CorpusTest : public ::testing::Test {
 protected:
  CorpusTest() : backend_(CpuBackend::Create({}).value()) {
    config_.name = "c";
    config_.dim = 4;
  }

  // Builds `n` documents with ids prefix0.. of `len` tokens each.
  SegmentData Docs(const std::string& prefix, int n, int len) {
    DocumentBuilder b(config_, limits_);
    std::vector<std::string> ids;
    std::vector<int32_t> counts;
    std::vector<float> tokens;
    for (int i = 0; i < n; ++i) {
      ids.push_back(prefix + std::to_string(i));
      counts.push_back(len);
      for (int t = 0; t < len * config_.dim; ++t)
        tokens.push_back(0.25f * (i + t % 3));
    }
    EXPECT_THAT(
        b.Add(ids, counts, tokens.data(), n * len, DType::kFloat32, "m"),
        IsOk());
    return b.Take();
  }

  std::unique_ptr<CpuBackend> backend_;
  CorpusConfig config_;
  CorpusLimits limits_;
};

TEST_F(CorpusTest, AppendPublishesANewSnapshotAndKeepsOldOnes) {
  auto corpus = Corpus::Create(config_, limits_, backend_.get()).value();
  auto empty = corpus->Snapshot();
  ASSERT_THAT(corpus->Append(Docs("a", 3, 2)), IsOk());
  auto one = corpus->Snapshot();
  ASSERT_THAT(corpus->Append(Docs("b", 2, 5)), IsOk());
  auto two = corpus->Snapshot();
  EXPECT_EQ(empty->live_docs(), 0);
  EXPECT_EQ(one->live_docs(), 3);
  EXPECT_EQ(two->live_docs(), 5);
  EXPECT_EQ(two->live_tokens(), 3 * 2 + 2 * 5);
  EXPECT_EQ(two->segments().size(), 2u);
  EXPECT_FALSE(one->Find("b0").has_value());
  ASSERT_TRUE(two->Find("b1").has_value());
  EXPECT_EQ(two->Find("b1")->segment, 1);
  EXPECT_EQ(two->IdOf(4), "b1");  // internal indexes follow insertion order
  EXPECT_EQ(two->IdOf(0), "a0");
}

TEST_F(CorpusTest, DuplicateIdIsRejectedAndNothingIsAdded) {
  auto corpus = Corpus::Create(config_, limits_, backend_.get()).value();
  ASSERT_THAT(corpus->Append(Docs("a", 3, 2)), IsOk());
  EXPECT_THAT(corpus->Append(Docs("a", 1, 2)),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("\"a0\"")));
  EXPECT_EQ(corpus->Snapshot()->live_docs(), 3);
  EXPECT_EQ(corpus->Snapshot()->segments().size(), 1u);
}

TEST_F(CorpusTest, DeleteTombstonesWithoutChangingHeldSnapshots) {
  auto corpus = Corpus::Create(config_, limits_, backend_.get()).value();
  ASSERT_THAT(corpus->Append(Docs("a", 4, 3)), IsOk());
  auto before = corpus->Snapshot();
  auto r = corpus->Delete({"a1", "a1", "a3"}, false);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->deleted, 2);
  auto after = corpus->Snapshot();
  EXPECT_EQ(before->live_docs(), 4);
  EXPECT_TRUE(before->Find("a1").has_value());
  EXPECT_EQ(after->live_docs(), 2);
  EXPECT_EQ(after->live_tokens(), 6);
  EXPECT_EQ(after->deleted_docs(), 2);
  EXPECT_FALSE(after->Find("a1").has_value());
  // The resident tombstone bitmap matches the host one.
  const auto refs = after->SegmentRefs();
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_TRUE(IsTombstoned(refs[0].resident.tombstones, 1));
  EXPECT_FALSE(IsTombstoned(refs[0].resident.tombstones, 2));
}

TEST_F(CorpusTest, DeleteOfUnknownIdIsAtomic) {
  auto corpus = Corpus::Create(config_, limits_, backend_.get()).value();
  ASSERT_THAT(corpus->Append(Docs("a", 2, 1)), IsOk());
  EXPECT_THAT(corpus->Delete({"a0", "nope"}, false),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ids[1]")));
  EXPECT_EQ(corpus->Snapshot()->live_docs(), 2);
  auto r = corpus->Delete({"a0", "nope"}, true);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->deleted, 1);
  EXPECT_EQ(r->missing, 1);
}

TEST_F(CorpusTest, DeletedIdCanBeAddedAgain) {
  auto corpus = Corpus::Create(config_, limits_, backend_.get()).value();
  ASSERT_THAT(corpus->Append(Docs("a", 2, 1)), IsOk());
  ASSERT_THAT(corpus->Delete({"a0"}, false), IsOk());
  ASSERT_THAT(corpus->Append(Docs("a", 1, 3)), IsOk());
  auto snap = corpus->Snapshot();
  ASSERT_TRUE(snap->Find("a0").has_value());
  EXPECT_EQ(snap->Find("a0")->segment, 1);
  EXPECT_EQ(snap->live_docs(), 2);
}

TEST_F(CorpusTest, FindManyAgreesWithFindAcrossSegmentsAndDeletes) {
  auto corpus = Corpus::Create(config_, limits_, backend_.get()).value();
  ASSERT_THAT(corpus->Append(Docs("a", 40, 1)), IsOk());
  ASSERT_THAT(corpus->Append(Docs("b", 30, 2)), IsOk());
  ASSERT_THAT(corpus->Delete({"a0", "b7", "a11"}, false), IsOk());
  ASSERT_THAT(corpus->Append(Docs("a", 1, 1)), IsOk());  // a0 live again
  auto snap = corpus->Snapshot();
  // More ids than the lookup's pipeline depth, live, deleted, re-added,
  // unknown and repeated, in no particular order.
  std::vector<std::string> names;
  for (int i = 39; i >= 0; --i) names.push_back(absl::StrCat("a", i));
  for (int i = 0; i < 31; ++i) names.push_back(absl::StrCat("b", i));
  names.insert(names.end(), {"c0", "a0", "", "b7", "a3"});
  const std::vector<absl::string_view> ids(names.begin(), names.end());
  std::vector<DocRef> refs(ids.size(), DocRef{7, 7});
  int64_t expected_found = 0;
  const int64_t found = snap->FindMany(ids, refs.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::optional<DocRef> one = snap->Find(ids[i]);
    expected_found += one.has_value() ? 1 : 0;
    ASSERT_EQ(refs[i].segment, one ? one->segment : -1) << ids[i];
    if (one) {
      EXPECT_EQ(refs[i].doc, one->doc) << ids[i];
    }
  }
  // The 40 "a" less a11 (a0 is live in segment 2), the 30 "b" less b7,
  // then a0 and a3 again.
  EXPECT_EQ(found, expected_found);
  EXPECT_EQ(found, 39 + 29 + 2);
  EXPECT_EQ(refs[39].segment, 2);        // "a0": the newer segment
  EXPECT_EQ(refs[40 + 30].segment, -1);  // "b30"
  EXPECT_EQ(refs[40 + 31].segment, -1);  // "c0"
  EXPECT_EQ(snap->FindMany({}, nullptr), 0);
}

TEST_F(CorpusTest, BuilderRejectsBadInputAndStaysUnchanged) {
  DocumentBuilder b(config_, limits_);
  const std::vector<float> four(4, 1.f);
  EXPECT_THAT(b.Add({"x", "y"}, {1}, four.data(), 1, DType::kFloat32, "m0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token_counts has 1")));
  EXPECT_THAT(b.Add({"x"}, {2}, four.data(), 1, DType::kFloat32, "m0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token_counts sum to 2")));
  EXPECT_THAT(b.Add({"x"}, {0}, four.data(), 0, DType::kFloat32, "m0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token_counts[0] is 0")));
  EXPECT_THAT(
      b.Add({""}, {1}, four.data(), 1, DType::kFloat32, "m0"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ids[0]")));
  std::vector<float> nan = four;
  nan[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(b.Add({"x"}, {1}, nan.data(), 1, DType::kFloat32, "m0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("row 0 column 2")));
  std::vector<float> inf = four;
  inf[0] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(
      b.Add({"x"}, {1}, inf.data(), 1, DType::kFloat32, "m0"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  std::vector<float> big = four;
  big[1] = 1e6f;  // beyond fp16
  EXPECT_THAT(
      b.Add({"x"}, {1}, big.data(), 1, DType::kFloat32, "m0"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("float16")));
  EXPECT_EQ(b.num_docs(), 0);
  ASSERT_THAT(b.Add({"x"}, {1}, four.data(), 1, DType::kFloat32, "m1"), IsOk());
  EXPECT_THAT(
      b.Add({"x"}, {1}, four.data(), 1, DType::kFloat32, "m2"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("appears twice")));
  EXPECT_EQ(b.num_docs(), 1);
  EXPECT_EQ(b.num_tokens(), 1);
}

TEST_F(CorpusTest, NormalizeStoresUnitRows) {
  config_.normalize = true;
  DocumentBuilder b(config_, limits_);
  const std::vector<float> row{3.f, 0.f, 4.f, 0.f};
  ASSERT_THAT(b.Add({"x"}, {1}, row.data(), 1, DType::kFloat32, "m"), IsOk());
  SegmentData d = b.Take();
  std::vector<float> back(4);
  ConvertToFloat(d.tokens.data(), d.dtype, 0, 4, back.data());
  EXPECT_NEAR(back[0], 0.6f, 1e-3);
  EXPECT_NEAR(back[2], 0.8f, 1e-3);
}

// A row of subnormal values: 1 / norm is past the float range, and the row
// must still be stored as a unit row (it was refused as "outside the range"
// when the scaling overflowed to Inf).
TEST_F(CorpusTest, NormalizeStoresSubnormalRowsAsUnitRows) {
  config_.normalize = true;
  DocumentBuilder b(config_, limits_);
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> row{tiny, 0.f, -tiny, 0.f};
  ASSERT_THAT(b.Add({"x"}, {1}, row.data(), 1, DType::kFloat32, "m"), IsOk());
  SegmentData d = b.Take();
  std::vector<float> back(4);
  ConvertToFloat(d.tokens.data(), d.dtype, 0, 4, back.data());
  EXPECT_NEAR(back[0], std::sqrt(0.5f), 1e-3);
  EXPECT_EQ(back[1], 0.f);
  EXPECT_NEAR(back[2], -std::sqrt(0.5f), 1e-3);
  EXPECT_EQ(back[3], 0.f);
}

TEST(CorpusConfigTest, ValidatesNameDimLayoutAndDtype) {
  CorpusLimits limits;
  CorpusConfig c;
  c.name = "ok_name-1.2";
  c.dim = 128;
  EXPECT_THAT(ValidateCorpusConfig(c, limits), IsOk());
  c.name = "bad name";
  EXPECT_THAT(ValidateCorpusConfig(c, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  c.name = "x";
  c.dim = 0;
  EXPECT_THAT(
      ValidateCorpusConfig(c, limits),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim is 0")));
  c.dim = limits.max_dim + 1;
  EXPECT_THAT(ValidateCorpusConfig(c, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim")));
  c.dim = 8;
  c.layout = Layout::kDense;
  c.storage_dtype = DType::kFloat32;
  EXPECT_THAT(
      ValidateCorpusConfig(c, limits),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("storage_dtype")));
}

TEST(CorpusConfigTest, Int8TakesTheInt8DtypeAndOnlyItQuantizesQueries) {
  CorpusLimits limits;
  CorpusConfig c;
  c.name = "q";
  c.dim = 8;
  c.layout = Layout::kInt8;
  c.storage_dtype = DType::kInt8;
  EXPECT_THAT(ValidateCorpusConfig(c, limits), IsOk());
  c.quantize_queries = true;
  EXPECT_THAT(ValidateCorpusConfig(c, limits), IsOk());
  for (DType other : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    c.storage_dtype = other;
    EXPECT_THAT(ValidateCorpusConfig(c, limits),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("storage_dtype is")))
        << DTypeName(other);
  }
  c.layout = Layout::kDense;
  c.storage_dtype = DType::kInt8;
  c.quantize_queries = false;
  EXPECT_THAT(ValidateCorpusConfig(c, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("storage_dtype is int8")));
  c.storage_dtype = DType::kFloat16;
  c.quantize_queries = true;
  EXPECT_THAT(ValidateCorpusConfig(c, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("quantize_queries")));
}

// LAYOUT_PLAID takes a PLAID dtype whose rows are whole bytes, a centroid
// count in range, and no quantize_queries; each refusal names its field.
TEST(CorpusConfigTest, PlaidTakesAPlaidDtypeAndACentroidCount) {
  CorpusLimits limits;
  CorpusConfig c;
  c.name = "p";
  c.dim = 8;
  c.layout = Layout::kPlaid;
  for (int nbits : {1, 2, 4, 8}) {
    c.storage_dtype = PlaidDType(nbits);
    EXPECT_THAT(ValidateCorpusConfig(c, limits), IsOk()) << nbits;
  }
  for (DType other : {DType::kFloat16, DType::kInt8}) {
    c.storage_dtype = other;
    EXPECT_THAT(ValidateCorpusConfig(c, limits),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("LAYOUT_PLAID stores PLAID rows")));
  }
  c.storage_dtype = DType::kPlaid1;
  c.dim = 7;
  EXPECT_THAT(ValidateCorpusConfig(c, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plaid_nbits is 1 and dim 7")));
  c.dim = 8;
  for (int64_t k : {int64_t{-1}, kMaxPlaidCentroids + 1}) {
    c.plaid_centroids = k;
    EXPECT_THAT(ValidateCorpusConfig(c, limits),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("plaid_centroids is")));
  }
  c.plaid_centroids = 64;
  c.quantize_queries = true;
  EXPECT_THAT(ValidateCorpusConfig(c, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("quantize_queries")));
}

TEST_F(CorpusTest, Int8BuilderQuantisesEveryRowAtAppend) {
  config_.layout = Layout::kInt8;
  config_.storage_dtype = DType::kInt8;
  // No range limit: a value past fp16's is fine in int8 (fp32 scales).
  const std::vector<float> rows = {3.f,  0.f,   -4.f, 1e6f,  //
                                   0.f,  0.f,   0.f,  0.f,   //
                                   0.5f, -1.5f, 2.5f, 127.f};
  DocumentBuilder b(config_, limits_);
  ASSERT_THAT(b.Add({"x", "y"}, {1, 2}, rows.data(), 3, DType::kFloat32, "m"),
              IsOk());
  SegmentData d = b.Take();
  EXPECT_EQ(d.dtype, DType::kInt8);
  ASSERT_EQ(d.tokens.size(), 12u);
  ASSERT_EQ(d.scales.size(), 3u);
  std::vector<int8_t> want(12);
  std::vector<float> want_scales(3);
  QuantizeInt8Rows(rows.data(), 3, 4, want.data(), want_scales.data());
  EXPECT_EQ(std::vector<int8_t>(d.tokens.begin(), d.tokens.end()), want);
  EXPECT_EQ(d.scales, want_scales);
  EXPECT_EQ(d.scales[1], 0.f);  // the zero row
  EXPECT_EQ(std::vector<int8_t>(d.tokens.begin() + 8, d.tokens.end()),
            (std::vector<int8_t>{0, -2, 2, 127}));  // step 1, ties to even
  // A rejected message leaves nothing, scales included.
  std::vector<float> nan(4, 1.f);
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_THAT(b.Add({"z"}, {1}, rows.data(), 1, DType::kFloat32, "m"), IsOk());
  EXPECT_THAT(
      b.Add({"w"}, {1}, nan.data(), 1, DType::kFloat32, "m"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  d = b.Take();
  EXPECT_EQ(d.tokens.size(), 4u);
  EXPECT_EQ(d.scales.size(), 1u);

  // Normalised corpora quantise the unit rows.
  config_.normalize = true;
  DocumentBuilder n(config_, limits_);
  const std::vector<float> row = {3.f, 0.f, 4.f, 0.f};
  ASSERT_THAT(n.Add({"u"}, {1}, row.data(), 1, DType::kFloat32, "m"), IsOk());
  d = n.Take();
  std::vector<float> back(4);
  DequantizeInt8Row(reinterpret_cast<const int8_t*>(d.tokens.data()),
                    d.scales[0], 4, back.data());
  // {0.6, 0, 0.8, 0}: codes {95, 0, 127, 0} on the step 0.8 / 127, and
  // the fitted scale (kernels/quantize.h).
  EXPECT_EQ(std::vector<int8_t>(d.tokens.begin(), d.tokens.end()),
            (std::vector<int8_t>{95, 0, 127, 0}));
  EXPECT_EQ(d.scales[0],
            static_cast<float>((double{0.6f} * 95 + double{0.8f} * 127) /
                               (95 * 95 + 127 * 127)));
  EXPECT_NEAR(back[0], 0.6f, 0.8f / 127.f / 2);
  EXPECT_NEAR(back[2], 0.8f, 0.8f / 127.f / 2);
}

TEST_F(CorpusTest, Int8BytesCountCodesAndScales) {
  config_.layout = Layout::kInt8;
  config_.storage_dtype = DType::kInt8;
  EXPECT_EQ(StoredRowBytes(config_), 4 + 4);
  for (Placement placement : {Placement::kGpu, Placement::kHost}) {
    config_.placement = placement;
    auto corpus = Corpus::Create(config_, limits_, backend_.get()).value();
    ASSERT_THAT(corpus->Append(Docs("a", 3, 2)), IsOk());
    ASSERT_THAT(corpus->Append(Docs("b", 2, 5)), IsOk());
    auto snap = corpus->Snapshot();
    const int64_t tokens = 3 * 2 + 2 * 5;
    // dim 4 int8 codes + one fp32 scale per token, and the offsets.
    EXPECT_EQ(snap->bytes(), tokens * (4 + 4) + (4 + 3) * 8);
    EXPECT_EQ(snap->streamed_bytes(),
              placement == Placement::kHost ? tokens * (4 + 4) : 0);
    const SegmentView v = snap->segments()[1]->ResidentView(nullptr);
    ASSERT_NE(v.scales, nullptr);
    EXPECT_EQ(v.scales, snap->segments()[1]->data().scales.data());
    EXPECT_EQ(snap->segments()[1]->HostView(nullptr).scales, v.scales);
  }
  config_.layout = Layout::kDense;
  config_.storage_dtype = DType::kFloat16;
  EXPECT_EQ(StoredRowBytes(config_), 4 * 2);
  auto dense = Corpus::Create(config_, limits_, backend_.get()).value();
  ASSERT_THAT(dense->Append(Docs("a", 3, 2)), IsOk());
  EXPECT_EQ(dense->Snapshot()->bytes(), 6 * 8 + 4 * 8);
  EXPECT_EQ(dense->Snapshot()->segments()[0]->HostView(nullptr).scales,
            nullptr);
}

TEST_F(CorpusTest, AppendRefusesScalesThatDoNotFitTheTokens) {
  config_.layout = Layout::kInt8;
  config_.storage_dtype = DType::kInt8;
  auto corpus = Corpus::Create(config_, limits_, backend_.get()).value();
  SegmentData d = Docs("a", 2, 3);
  d.scales.pop_back();
  EXPECT_THAT(
      corpus->Append(std::move(d)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("5 scales and 0 codes for 6 int8 token rows")));
  EXPECT_EQ(corpus->Snapshot()->live_docs(), 0);
}

// A backend without the int8 kernel (the GPU backend before sm_90) refuses an
// int8 corpus when it is created or loaded, naming `layout` and the GPU
// (Backend::description), and a
// registry with a data directory leaves nothing of it on disk.
TEST_F(CorpusTest, Int8CorpusIsRefusedByABackendWithoutTheKernel) {
  testing::LimitedBackend dense_only(false);
  EXPECT_FALSE(dense_only.SupportsDType(DType::kInt8, 16));
  EXPECT_TRUE(dense_only.SupportsDType(DType::kBFloat16, 16));
  config_.layout = Layout::kInt8;
  config_.storage_dtype = DType::kInt8;
  EXPECT_THAT(CheckBackendServes(config_, *backend_), IsOk());
  EXPECT_THAT(
      Corpus::Create(config_, limits_, &dense_only),
      StatusIs(absl::StatusCode::kUnimplemented,
               HasSubstr("layout: LAYOUT_INT8 needs a backend that scores "
                         "int8 tokens; backend dense-only (Test GPU, compute "
                         "capability 8.6) has no kernel")));
  char dir_template[] = "/tmp/maxsimd_corpus_testXXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  {
    CorpusRegistry reg(&dense_only, limits_, dir);
    ASSERT_THAT(reg.LoadAll(), IsOk());
    EXPECT_THAT(reg.Create(config_), StatusIs(absl::StatusCode::kUnimplemented,
                                              HasSubstr("layout")));
    struct stat st;
    EXPECT_NE(stat((dir + "/corpora/c").c_str(), &st), 0);
    EXPECT_THAT(reg.Get("c"), StatusIs(absl::StatusCode::kNotFound));
  }
  {
    // Made by a server that has the kernel, then opened by one without it:
    // served as a load error naming `layout`, and kept on disk.
    CorpusRegistry reg(backend_.get(), limits_, dir);
    ASSERT_THAT(reg.LoadAll(), IsOk());
    auto corpus = reg.Create(config_);
    ASSERT_THAT(corpus, IsOk());
    ASSERT_THAT((*corpus)->Append(Docs("a", 2, 3)), IsOk());
  }
  {
    CorpusRegistry reg(&dense_only, limits_, dir);
    ASSERT_THAT(reg.LoadAll(), IsOk());
    EXPECT_THAT(reg.Get("c"), StatusIs(absl::StatusCode::kUnimplemented,
                                       HasSubstr("layout")));
  }
  CorpusRegistry reg(backend_.get(), limits_, dir);
  ASSERT_THAT(reg.LoadAll(), IsOk());
  ASSERT_THAT(reg.Get("c"), IsOk());
  EXPECT_EQ(reg.Get("c").value()->Snapshot()->live_docs(), 2);
  EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
}

// A backend that scores int8 but streams only dense corpora from host
// memory (the GPU backend) refuses an int8 corpus placed on the host,
// naming `placement`; placement auto keeps it resident past the corpus
// budget (RESOURCE_EXHAUSTED, the corpus unchanged) rather than fall back,
// while a dense corpus on the same backend does fall back.
TEST_F(CorpusTest, Int8CorpusStaysOffTheHostOfABackendThatCannotStreamIt) {
  testing::LimitedBackend backend(true, /*corpus_budget=*/4096);
  config_.layout = Layout::kInt8;
  config_.storage_dtype = DType::kInt8;
  config_.placement = Placement::kHost;
  EXPECT_THAT(
      Corpus::Create(config_, limits_, &backend),
      StatusIs(absl::StatusCode::kUnimplemented,
               HasSubstr("placement: PLACEMENT_HOST needs a backend that "
                         "streams int8 tokens")));
  config_.placement = Placement::kAuto;
  auto int8 = Corpus::Create(config_, limits_, &backend);
  ASSERT_THAT(int8, IsOk());
  ASSERT_THAT((*int8)->Append(Docs("a", 2, 3)), IsOk());
  EXPECT_THAT((*int8)->Append(Docs("b", 200, 8)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--corpus_budget_bytes")));
  EXPECT_EQ((*int8)->Snapshot()->live_docs(), 2);
  EXPECT_EQ((*int8)->Snapshot()->streamed_bytes(), 0);

  CorpusConfig dense = config_;
  dense.name = "d";
  dense.layout = Layout::kDense;
  dense.storage_dtype = DType::kFloat16;
  auto d = Corpus::Create(dense, limits_, &backend);
  ASSERT_THAT(d, IsOk());
  config_ = dense;  // Docs() builds documents of config_'s dtype
  ASSERT_THAT((*d)->Append(Docs("b", 200, 8)), IsOk());
  EXPECT_GT((*d)->Snapshot()->streamed_bytes(), 0);
}

// Per-token int8 keeps the ranking: on a clustered synthetic corpus, the
// top 10 of an int8 corpus (both query modes) overlap the exact fp32
// ranking's top 10 in at least 95% of their entries on average (99.75%
// when this was written). A quantiser that loses the per-token scales
// scores 82% here, one that keeps 8 levels instead of 255 92%; the exact
// codes are quantize_test's business. Sanitized builds (which score some
// 20 times slower) rank a fifth of the documents with half the queries.
TEST(Int8RankingTest, TopTenOverlapsTheExactRanking) {
  SyntheticCorpusOptions o;
  o.num_docs = testing::kSanitized ? 300 : 1500;
  o.dim = 128;
  o.min_tokens = 8;
  o.max_tokens = 64;
  o.num_clusters = 256;
  o.seed = 7;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(o);
  auto backend = CpuBackend::Create({}).value();
  // The exact ranking: fp32 tokens, fp32 queries.
  SegmentView exact;
  exact.tokens = synth.tokens.data();
  exact.dtype = DType::kFloat32;
  exact.cu_seqlens = synth.cu_seqlens.data();
  exact.num_docs = o.num_docs;
  exact.num_tokens = synth.cu_seqlens.back();
  exact.dim = o.dim;
  constexpr int kQueries = testing::kSanitized ? 20 : 40;
  SearchBatch exact_batch;
  exact_batch.dim = o.dim;
  exact_batch.refs = {SegmentRef{exact, exact}};
  for (int q = 0; q < kQueries; ++q) {
    exact_batch.AddQuery(GenerateQueryForDocument(synth, (q * 37) % o.num_docs,
                                                  32, 0.6f, 1000 + q),
                         10);
  }
  std::vector<std::vector<ScoredDoc>> want(kQueries);
  ASSERT_THAT(
      backend->Search(exact_batch.Params(), absl::MakeSpan(want), nullptr),
      IsOk());
  for (bool quantize : {false, true}) {
    CorpusConfig config;
    config.name = "q8";
    config.dim = o.dim;
    config.layout = Layout::kInt8;
    config.storage_dtype = DType::kInt8;
    config.quantize_queries = quantize;
    auto corpus = Corpus::Create(config, {}, backend.get()).value();
    std::vector<int32_t> counts;
    for (int64_t d = 0; d < o.num_docs; ++d) {
      counts.push_back(
          static_cast<int32_t>(synth.cu_seqlens[d + 1] - synth.cu_seqlens[d]));
    }
    DocumentBuilder b(config, {});
    ASSERT_THAT(b.Add(synth.ids, counts, synth.tokens.data(),
                      synth.cu_seqlens.back(), DType::kFloat32, "m"),
                IsOk());
    ASSERT_THAT(corpus->Append(b.Take()), IsOk());
    const auto snap = corpus->Snapshot();
    SearchBatch int8_batch = exact_batch;
    int8_batch.quantize_queries = quantize;
    int8_batch.refs = snap->SegmentRefs();
    std::vector<std::vector<ScoredDoc>> got(kQueries);
    ASSERT_THAT(
        backend->Search(int8_batch.Params(), absl::MakeSpan(got), nullptr),
        IsOk());
    int overlap = 0, first = 0;
    for (int q = 0; q < kQueries; ++q) {
      ASSERT_EQ(got[q].size(), 10u);
      std::set<int64_t> exact_top;
      for (const ScoredDoc& d : want[q]) exact_top.insert(d.index);
      for (const ScoredDoc& d : got[q]) overlap += exact_top.count(d.index);
      first += got[q][0].index == want[q][0].index;
    }
    const double mean = overlap / (10.0 * kQueries);
    std::printf("quantize_queries %d: top-10 overlap %.4f, same first %d/%d\n",
                quantize, mean, first, kQueries);
    EXPECT_GE(mean, 0.95) << "quantize_queries " << quantize;
  }
}

TEST(CorpusRegistryTest, CreateGetDropList) {
  auto backend = CpuBackend::Create({}).value();
  CorpusRegistry reg(backend.get(), CorpusLimits{});
  CorpusConfig c;
  c.name = "b";
  c.dim = 8;
  ASSERT_THAT(reg.Create(c), IsOk());
  c.name = "a";
  ASSERT_THAT(reg.Create(c), IsOk());
  EXPECT_THAT(reg.Create(c), StatusIs(absl::StatusCode::kAlreadyExists));
  auto list = reg.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->config().name, "a");
  auto held = reg.Get("a").value();
  ASSERT_THAT(reg.Drop("a"), IsOk());
  EXPECT_THAT(reg.Get("a"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(reg.Drop("a"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(held->config().name, "a");  // still usable by its holder
}

}  // namespace
}  // namespace maxsimd
