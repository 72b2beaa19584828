// Corpus, DocumentBuilder and CorpusRegistry: appends, deletes, snapshot
// isolation and input validation.
#include "index/corpus.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "index/registry.h"
#include "kernels/element.h"
#include "kernels/maxsim_cpu.h"
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
  c.layout = Layout::kPlaid;
  EXPECT_THAT(ValidateCorpusConfig(c, limits),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("layout")));
  c.layout = Layout::kDense;
  c.storage_dtype = DType::kFloat32;
  EXPECT_THAT(
      ValidateCorpusConfig(c, limits),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("storage_dtype")));
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
