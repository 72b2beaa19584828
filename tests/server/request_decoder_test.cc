// One test per bad query input: each gets the documented code and a message
// that names the field. And a PLAID query without candidates: decoded to a
// rerank whose candidate generation is recorded, not run.
#include "server/request_decoder.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "index/plaid_search.h"
#include "index/synthetic.h"
#include "kernels/base/half.h"
#include "kernels/maxsim_cpu.h"
#include "tests/support/status_matchers.h"
#include "tests/support/synthetic_plaid.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

class RequestDecoderTest : public ::testing::Test {
 protected:
  RequestDecoderTest() : backend_(CpuBackend::Create({}).value()) {
    CorpusConfig c;
    c.name = "c";
    c.dim = 4;
    corpus_ = Corpus::Create(c, CorpusLimits{}, backend_.get()).value();
    DocumentBuilder b(c, CorpusLimits{});
    const std::vector<float> t(3 * 4, 0.5f);
    EXPECT_THAT(
        b.Add({"d0", "d1", "d2"}, {1, 1, 1}, t.data(), 3, DType::kFloat32, "m"),
        IsOk());
    EXPECT_THAT(corpus_->Append(b.Take()), IsOk());
    limits_.max_query_tokens = 8;
    limits_.max_candidates = 3;
    limits_.max_top_k = 100;
  }

  // A valid fp32 query of `rows` tokens.
  v1::RerankRequest Request(int rows = 2) {
    v1::RerankRequest r;
    r.set_corpus("c");
    r.mutable_query()->set_dtype(v1::DTYPE_FLOAT32);
    r.mutable_query()->add_shape(rows);
    r.mutable_query()->add_shape(4);
    std::vector<float> v(rows * 4, 0.25f);
    r.mutable_query()->set_data(v.data(), v.size() * sizeof(float));
    return r;
  }

  absl::StatusOr<DecodedQuery> Decode(const v1::RerankRequest& r) {
    return DecodeQuery(r, *corpus_->Snapshot(), limits_, "");
  }

  std::unique_ptr<CpuBackend> backend_;
  std::shared_ptr<Corpus> corpus_;
  RequestLimits limits_;
};

TEST_F(RequestDecoderTest, AcceptsAValidScanAndRerank) {
  auto q = Decode(Request());
  ASSERT_THAT(q, IsOk());
  EXPECT_TRUE(q->scan);
  EXPECT_EQ(q->num_tokens, 2);
  EXPECT_EQ(q->top_k, kDefaultTopK);
  v1::RerankRequest r = Request();
  r.add_candidate_ids("d2");
  r.add_candidate_ids("d0");
  r.add_candidate_ids("d2");  // duplicate: ranked once
  r.set_top_k(5);
  q = Decode(r);
  ASSERT_THAT(q, IsOk());
  EXPECT_FALSE(q->scan);
  ASSERT_EQ(q->candidates.size(), 2u);
  EXPECT_EQ(q->candidates[0].doc, 2);
  EXPECT_EQ(q->candidates[1].doc, 0);
}

TEST_F(RequestDecoderTest, AcceptsFloat16AndBFloat16) {
  for (auto [wire, enc] : {std::pair{v1::DTYPE_FLOAT16, &FloatToHalf},
                           std::pair{v1::DTYPE_BFLOAT16, &FloatToBFloat16}}) {
    v1::RerankRequest r = Request(1);
    r.mutable_query()->set_dtype(wire);
    std::vector<uint16_t> v(4, enc(1.5f));
    r.mutable_query()->set_data(v.data(), v.size() * 2);
    auto q = Decode(r);
    ASSERT_THAT(q, IsOk());
    EXPECT_EQ(q->tokens[3], 1.5f);
  }
}

TEST_F(RequestDecoderTest, WrongByteLength) {
  v1::RerankRequest r = Request();
  r.mutable_query()->mutable_data()->pop_back();
  EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("query.data has 31 bytes")));
}

TEST_F(RequestDecoderTest, DimMismatch) {
  v1::RerankRequest r = Request();
  r.mutable_query()->set_shape(1, 8);
  EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("query.shape[1] is 8")));
}

TEST_F(RequestDecoderTest, UnknownDtype) {
  v1::RerankRequest r = Request();
  r.mutable_query()->set_dtype(static_cast<v1::DType>(42));
  EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("query.dtype is 42")));
  r.mutable_query()->set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("query.dtype")));
}

TEST_F(RequestDecoderTest, Int8IsAStorageDtypeOnly) {
  v1::RerankRequest r = Request();
  r.mutable_query()->set_dtype(v1::DTYPE_INT8);
  EXPECT_THAT(Decode(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("query.dtype is DTYPE_INT8, a storage dtype "
                                 "only")));
}

// An int8 corpus that rounds queries to fp16 refuses values past its
// range; one that quantises them takes any finite value.
TEST_F(RequestDecoderTest, Int8CorpusQueriesMustFitFloat16UnlessQuantised) {
  for (bool quantize : {false, true}) {
    CorpusConfig c;
    c.name = "q8";
    c.dim = 4;
    c.layout = Layout::kInt8;
    c.storage_dtype = DType::kInt8;
    c.quantize_queries = quantize;
    auto corpus = Corpus::Create(c, CorpusLimits{}, backend_.get()).value();
    v1::RerankRequest r = Request(2);
    std::vector<float> v(8, 0.25f);
    v[6] = -70000.f;
    r.mutable_query()->set_data(v.data(), v.size() * sizeof(float));
    auto q = DecodeQuery(r, *corpus->Snapshot(), limits_, "queries[1]");
    if (quantize) {
      ASSERT_THAT(q, IsOk());
      EXPECT_EQ(q->tokens[6], -70000.f);
    } else {
      EXPECT_THAT(q, StatusIs(absl::StatusCode::kInvalidArgument,
                              HasSubstr("queries[1].query.data row 1 column 2 "
                                        "is -70000, outside the float16")));
    }
  }
}

TEST_F(RequestDecoderTest, EmptyQuery) {
  EXPECT_THAT(Decode(Request(0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("query.shape[0] is 0; must be in [1, 8]")));
  v1::RerankRequest r = Request();
  r.clear_query();
  EXPECT_THAT(Decode(r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("query")));
}

TEST_F(RequestDecoderTest, NanAndInfValues) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    v1::RerankRequest r = Request();
    std::string* data = r.mutable_query()->mutable_data();
    std::memcpy(data->data() + 5 * sizeof(float), &bad, sizeof(float));
    EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("row 1 column 1")));
  }
}

TEST_F(RequestDecoderTest, QueryTokensOverTheLimit) {
  EXPECT_THAT(Decode(Request(9)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("query.shape[0] is 9; must be in [1, 8]")));
}

TEST_F(RequestDecoderTest, TopKOutOfRange) {
  v1::RerankRequest r = Request();
  r.set_top_k(101);
  EXPECT_THAT(Decode(r),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("top_k is 101; must be in [1, 100]")));
  r.set_top_k(-1);
  EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("top_k is -1")));
}

TEST_F(RequestDecoderTest, TooManyCandidates) {
  v1::RerankRequest r = Request();
  for (const char* id : {"d0", "d1", "d2", "d0"}) r.add_candidate_ids(id);
  EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("candidate_ids has 4 ids; the "
                                            "limit is 3")));
}

TEST_F(RequestDecoderTest, UnknownOrDeletedCandidateId) {
  v1::RerankRequest r = Request();
  r.add_candidate_ids("d0");
  r.add_candidate_ids("zz");
  EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kNotFound,
                                  HasSubstr("candidate_ids[1]: \"zz\"")));
  ASSERT_THAT(corpus_->Delete({"d0"}, false), IsOk());
  r.set_candidate_ids(1, "d1");
  EXPECT_THAT(Decode(r), StatusIs(absl::StatusCode::kNotFound,
                                  HasSubstr("candidate_ids[0]: \"d0\"")));
}

TEST_F(RequestDecoderTest, FieldPrefixNamesTheBatchEntry) {
  v1::RerankRequest r = Request();
  r.mutable_query()->set_shape(1, 3);
  EXPECT_THAT(DecodeQuery(r, *corpus_->Snapshot(), limits_, "queries[7]"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("queries[7].query.shape[1]")));
}

TEST_F(RequestDecoderTest, NormalizesQueriesForNormalizedCorpora) {
  CorpusConfig c;
  c.name = "n";
  c.dim = 4;
  c.normalize = true;
  auto corpus = Corpus::Create(c, CorpusLimits{}, backend_.get()).value();
  auto q = DecodeQuery(Request(1), *corpus->Snapshot(), limits_, "");
  ASSERT_THAT(q, IsOk());
  for (float v : q->tokens) EXPECT_FLOAT_EQ(v, 0.5f);
}

// Found by tests/fuzz (request): a query row of subnormal values has a norm
// whose inverse is past the float range; it must still normalise to a unit
// row, not to Inf and NaN.
TEST_F(RequestDecoderTest, NormalizesSubnormalQueryRowsToFiniteUnitRows) {
  CorpusConfig c;
  c.name = "n";
  c.dim = 4;
  c.normalize = true;
  auto corpus = Corpus::Create(c, CorpusLimits{}, backend_.get()).value();
  v1::RerankRequest r = Request(1);
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> v = {tiny, 0.f, -tiny, 0.f};
  r.mutable_query()->set_data(v.data(), v.size() * sizeof(float));
  auto q = DecodeQuery(r, *corpus->Snapshot(), limits_, "");
  ASSERT_THAT(q, IsOk());
  EXPECT_FLOAT_EQ(q->tokens[0], std::sqrt(0.5f));
  EXPECT_EQ(q->tokens[1], 0.f);
  EXPECT_FLOAT_EQ(q->tokens[2], -std::sqrt(0.5f));
  EXPECT_EQ(q->tokens[3], 0.f);
}

// A PLAID corpus "p" of dim 16 with documents (so with a codec), and a
// request for it: a query close to one of its documents.
class PlaidRequestDecoderTest : public RequestDecoderTest {
 protected:
  PlaidRequestDecoderTest() {
    SyntheticCorpusOptions o;
    o.num_docs = 200;
    o.dim = 16;
    o.min_tokens = 2;
    o.max_tokens = 10;
    o.num_clusters = 16;
    synth_ = GenerateSyntheticCorpus(o);
    plaid_ = testing::MakeSyntheticPlaidCorpus(backend_.get(), "p",
                                               /*centroids=*/16, synth_);
    limits_.max_candidates = 100;
  }

  v1::RerankRequest PlaidRequest() {
    query_ = GenerateQueryForDocument(synth_, 5, 4, 0.2f, 1);
    v1::RerankRequest r;
    r.set_corpus("p");
    r.mutable_query()->set_dtype(v1::DTYPE_FLOAT32);
    r.mutable_query()->add_shape(4);
    r.mutable_query()->add_shape(16);
    r.mutable_query()->set_data(query_.data(), query_.size() * sizeof(float));
    return r;
  }

  absl::StatusOr<DecodedQuery> DecodePlaid(const v1::RerankRequest& r,
                                           absl::string_view field = "") {
    return DecodeQuery(r, *plaid_->Snapshot(), limits_, field);
  }

  std::shared_ptr<Corpus> plaid_;
  SyntheticCorpus synth_;
  std::vector<float> query_;
};

// A PLAID query without candidates decodes to a rerank whose candidates are
// still to be generated (by the scheduler's executor), with the parameters
// resolved: defaults by top_k, given values, n_full_scores at least top_k
// and at most --max_candidates. Generation would find candidates here, so
// empty candidates mean decoding generated none.
TEST_F(PlaidRequestDecoderTest, RecordsTheSearchWithoutGeneratingCandidates) {
  auto q = DecodePlaid(PlaidRequest());
  ASSERT_THAT(q, IsOk());
  EXPECT_FALSE(q->scan);
  EXPECT_TRUE(q->candidates.empty());
  ASSERT_TRUE(q->plaid_search.has_value());
  EXPECT_EQ(q->plaid_search->n_ivf_probe,
            DefaultPlaidSearchParams(kDefaultTopK).n_ivf_probe);
  EXPECT_EQ(q->plaid_search->n_full_scores,
            DefaultPlaidSearchParams(kDefaultTopK).n_full_scores);
  EXPECT_FALSE(PlaidCandidates(*plaid_->Snapshot(), q->tokens.data(),
                               q->num_tokens, *q->plaid_search)
                   .empty());

  v1::RerankRequest r = PlaidRequest();
  r.mutable_plaid()->set_n_ivf_probe(3);
  r.mutable_plaid()->set_n_full_scores(40);
  q = DecodePlaid(r);
  ASSERT_THAT(q, IsOk());
  ASSERT_TRUE(q->plaid_search.has_value());
  EXPECT_TRUE(q->candidates.empty());
  EXPECT_EQ(q->plaid_search->n_ivf_probe, 3);
  EXPECT_EQ(q->plaid_search->n_full_scores, 40);

  // Fewer than top_k are raised to top_k; the default is capped by
  // --max_candidates.
  r.set_top_k(60);
  q = DecodePlaid(r);
  ASSERT_THAT(q, IsOk());
  EXPECT_EQ(q->plaid_search->n_full_scores, 60);
  r.mutable_plaid()->set_n_full_scores(0);
  r.set_top_k(50);  // default ndocs 1024: n_full_scores 256, over 100
  q = DecodePlaid(r);
  ASSERT_THAT(q, IsOk());
  EXPECT_EQ(q->plaid_search->n_full_scores, 100);

  // Exhaustive: a scan, nothing to generate.
  r = PlaidRequest();
  r.mutable_plaid()->set_exhaustive(true);
  q = DecodePlaid(r);
  ASSERT_THAT(q, IsOk());
  EXPECT_TRUE(q->scan);
  EXPECT_FALSE(q->plaid_search.has_value());

  // Candidate ids of a PLAID corpus: reranked as given.
  r = PlaidRequest();
  r.add_candidate_ids(synth_.ids[3]);
  q = DecodePlaid(r);
  ASSERT_THAT(q, IsOk());
  EXPECT_FALSE(q->scan);
  EXPECT_EQ(q->candidates.size(), 1u);
  EXPECT_FALSE(q->plaid_search.has_value());

  // A dense corpus's scan has no PLAID search.
  q = Decode(Request());
  ASSERT_THAT(q, IsOk());
  EXPECT_TRUE(q->scan);
  EXPECT_FALSE(q->plaid_search.has_value());
}

// Every refusal of the plaid field, with its code and message.
TEST_F(PlaidRequestDecoderTest, RefusesThePlaidFieldWhereItDoesNotApply) {
  v1::RerankRequest dense = Request();
  dense.mutable_plaid()->set_n_ivf_probe(2);
  EXPECT_THAT(Decode(dense),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plaid is set; corpus \"c\" is not a "
                                 "LAYOUT_PLAID corpus")));
  dense.mutable_plaid()->Clear();
  dense.mutable_plaid()->set_exhaustive(true);
  EXPECT_THAT(Decode(dense), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("plaid is set; corpus")));

  v1::RerankRequest with_ids = PlaidRequest();
  with_ids.add_candidate_ids(synth_.ids[0]);
  with_ids.mutable_plaid()->set_n_ivf_probe(2);
  EXPECT_THAT(DecodePlaid(with_ids, "queries[2]"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("queries[2].plaid is set with candidate_ids; "
                                 "it applies only to a request without "
                                 "them")));

  for (int32_t probe : {-1, kMaxIvfProbe + 1}) {
    v1::RerankRequest r = PlaidRequest();
    r.mutable_plaid()->set_n_ivf_probe(probe);
    EXPECT_THAT(DecodePlaid(r),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("plaid.n_ivf_probe is ", probe,
                                                "; must be in [1, 1024] (0: "
                                                "the default)"))));
  }
  for (int32_t full : {-1, 101}) {
    v1::RerankRequest r = PlaidRequest();
    r.mutable_plaid()->set_n_full_scores(full);
    EXPECT_THAT(DecodePlaid(r),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat(
                             "plaid.n_full_scores is ", full,
                             "; must be in [1, 100] (0: the default; "
                             "--max_candidates bounds it)"))));
  }
  // Checks that come before the plaid field's still come first.
  v1::RerankRequest r = PlaidRequest();
  r.set_top_k(1000);
  r.mutable_plaid()->set_n_full_scores(-1);
  EXPECT_THAT(DecodePlaid(r), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("top_k is 1000")));
}

}  // namespace
}  // namespace maxsimd
