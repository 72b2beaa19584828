// The PLAID corpus layout on the CPU backend: the codec trained on the
// first append and reused, searches against the reference, persistence of
// the codec, codes and scales, compaction, imports kept compressed, and the
// bad inputs (wrong nbits, centroid count mismatch, codes out of range,
// mixed codecs), each refused by name with the corpus unchanged. On a
// backend with a k-means kernel the codec is trained and the rows
// compressed through it, and an UNIMPLEMENTED answer leaves the work to the
// host with the same result.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "index/corpus.h"
#include "index/plaid.h"
#include "index/plaid_search.h"
#include "index/plaid_train.h"
#include "index/storage.h"
#include "index/synthetic.h"
#include "kernels/maxsim_cpu.h"
#include "kernels/maxsim_reference.h"
#include "tests/support/forwarding_backend.h"
#include "tests/support/ranking.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::CompareRanking;
using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return absl::StrCat(MAXSIMD_PLAID_TESTDATA, "/", name);
}

class PlaidCorpusTest : public ::testing::Test {
 protected:
  PlaidCorpusTest() : backend_(CpuBackend::Create({}).value()) {
    config_.name = "p";
    config_.dim = 32;
    config_.layout = Layout::kPlaid;
    config_.storage_dtype = DType::kPlaid2;
    config_.normalize = true;
  }

  // `n` clustered documents of 4..24 tokens, ids prefix + index.
  SyntheticCorpus Corpus(int64_t n, uint64_t seed) {
    SyntheticCorpusOptions o;
    o.num_docs = n;
    o.dim = config_.dim;
    o.min_tokens = 4;
    o.max_tokens = 24;
    o.num_clusters = 64;
    o.seed = seed;
    return GenerateSyntheticCorpus(o);
  }

  SegmentData Docs(const SyntheticCorpus& s, const std::string& prefix) {
    DocumentBuilder b(config_, limits_);
    std::vector<std::string> ids;
    std::vector<int32_t> counts;
    for (size_t i = 0; i + 1 < s.cu_seqlens.size(); ++i) {
      ids.push_back(prefix + std::to_string(i));
      counts.push_back(
          static_cast<int32_t>(s.cu_seqlens[i + 1] - s.cu_seqlens[i]));
    }
    EXPECT_THAT(b.Add(ids, counts, s.tokens.data(), s.cu_seqlens.back(),
                      DType::kFloat32, "docs"),
                IsOk());
    return b.Take();
  }

  // Every query's scan over the snapshot on the backend, and the
  // reference's.
  void ExpectScanMatchesReference(const CorpusSnapshot& snap,
                                  const SyntheticCorpus& s, int queries) {
    SearchBatch batch;
    batch.dim = config_.dim;
    batch.refs = snap.SegmentRefs();
    for (int q = 0; q < queries; ++q) {
      batch.AddQuery(GenerateQueryForDocument(s, q * 7, 8, 0.3f, q), 10);
    }
    std::vector<std::vector<ScoredDoc>> got(queries);
    ASSERT_THAT(backend_->Search(batch.Params(), absl::MakeSpan(got), nullptr),
                IsOk());
    const auto want = ReferenceSearch(batch.Params());
    for (int q = 0; q < queries; ++q) {
      EXPECT_EQ(CompareRanking(got[q], want[q], 1e-5), "") << "query " << q;
    }
  }

  std::unique_ptr<CpuBackend> backend_;
  CorpusConfig config_;
  CorpusLimits limits_;
};

TEST_F(PlaidCorpusTest, FirstAppendTrainsTheCodecLaterOnesReuseIt) {
  auto corpus =
      maxsimd::Corpus::Create(config_, limits_, backend_.get()).value();
  EXPECT_EQ(corpus->Snapshot()->codec(), nullptr);
  const SyntheticCorpus a = Corpus(300, 1);
  ASSERT_THAT(corpus->Append(Docs(a, "a")), IsOk());
  auto one = corpus->Snapshot();
  ASSERT_NE(one->codec(), nullptr);
  const PlaidCodec& codec = one->codec()->codec();
  EXPECT_EQ(codec.nbits, 2);
  EXPECT_EQ(codec.dim, 32);
  // ColBERT's count for the tokens, at most one per 32 of them.
  const int64_t tokens = a.cu_seqlens.back();
  EXPECT_GE(codec.num_centroids, 8);
  EXPECT_LE(codec.num_centroids, tokens / 32);
  const Segment& seg = *one->segments()[0];
  EXPECT_EQ(seg.dtype(), DType::kPlaid2);
  EXPECT_EQ(seg.data().codes.size(), static_cast<size_t>(tokens));
  EXPECT_EQ(seg.data().tokens.size(), static_cast<size_t>(tokens * 8));
  EXPECT_EQ(seg.bytes(), tokens * (8 + 4 + 4) + (300 + 1) * 8);
  EXPECT_EQ(StoredRowBytes(config_), 8 + 4 + 4);

  const SyntheticCorpus b = Corpus(50, 2);
  ASSERT_THAT(corpus->Append(Docs(b, "b")), IsOk());
  auto two = corpus->Snapshot();
  EXPECT_EQ(two->codec(), one->codec());  // the same codec, not retrained
  EXPECT_EQ(two->live_docs(), 350);
  ExpectScanMatchesReference(*two, a, 12);

  // Compressed, documents still find themselves: a query made from a
  // document's own tokens ranks it first in most cases.
  int first = 0;
  for (int64_t d = 0; d < 100; ++d) {
    SearchBatch batch;
    batch.dim = config_.dim;
    batch.refs = one->SegmentRefs();
    batch.AddQuery(GenerateQueryForDocument(a, d, 8, 0.05f, d), 1);
    std::vector<std::vector<ScoredDoc>> got(1);
    ASSERT_THAT(backend_->Search(batch.Params(), absl::MakeSpan(got), nullptr),
                IsOk());
    first += got[0].size() == 1 && got[0][0].index == d;
  }
  EXPECT_GE(first, 90);
}

TEST_F(PlaidCorpusTest, CodecCodesAndScalesSurviveReopenCompactionAndSnapshot) {
  char tmpl[] = "/tmp/plaid_corpus_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = absl::StrCat(tmpl, "/p");
  const SyntheticCorpus a = Corpus(120, 3);
  const SyntheticCorpus b = Corpus(40, 4);
  {
    auto store = CorpusStore::Create(dir, config_).value();
    auto corpus = maxsimd::Corpus::Create(config_, limits_, backend_.get(),
                                          std::move(store))
                      .value();
    ASSERT_THAT(corpus->Append(Docs(a, "a")), IsOk());
    ASSERT_THAT(corpus->Append(Docs(b, "b")), IsOk());
    ASSERT_THAT(corpus->Delete({"a3", "b7"}, false), IsOk());
    CompactionOptions merge_all;
    merge_all.seal_bytes = int64_t{1} << 30;
    ASSERT_THAT(corpus->Compact(merge_all), IsOk());
    ASSERT_EQ(corpus->Snapshot()->segments().size(), 1u);
    ASSERT_THAT(
        WriteCorpusDirectory(absl::StrCat(tmpl, "/snap"), *corpus->Snapshot()),
        IsOk());
  }
  for (const std::string& from : {dir, absl::StrCat(tmpl, "/snap")}) {
    SCOPED_TRACE(from);
    StoredCorpus contents;
    auto store = CorpusStore::Open(from, &contents);
    ASSERT_THAT(store.status(), IsOk());
    ASSERT_TRUE(contents.codec.has_value());
    auto corpus = maxsimd::Corpus::Restore(
        limits_, backend_.get(), *std::move(store), std::move(contents));
    ASSERT_THAT(corpus.status(), IsOk());
    auto snap = (*corpus)->Snapshot();
    ASSERT_NE(snap->codec(), nullptr);
    EXPECT_EQ(snap->live_docs(), 158);
    EXPECT_FALSE(snap->Find("a3").has_value());
    const SegmentData& d = snap->segments()[0]->data();
    EXPECT_EQ(d.codes.size(), d.scales.size());
    EXPECT_EQ(d.tokens.size(), d.codes.size() * 8);
    ExpectScanMatchesReference(*snap, a, 6);
    // A later append compresses with the restored codec.
    ASSERT_THAT((*corpus)->Append(Docs(Corpus(5, 9), "c")), IsOk());
    EXPECT_EQ((*corpus)->Snapshot()->codec(), snap->codec());
  }
  std::system(absl::StrCat("rm -rf ", tmpl).c_str());
}

// A ColBERT v2 index imported into a PLAID corpus keeps its codes and
// residual bytes, and scores exactly as its decompressed tokens do.
TEST_F(PlaidCorpusTest, ImportedIndexKeepsItsRowsAndScoresAsDecompressed) {
  for (const char* writer : {"colbert", "fast_plaid"}) {
    SCOPED_TRACE(writer);
    auto compressed = ReadPlaidIndexCompressed(Fixture(writer));
    ASSERT_THAT(compressed.status(), IsOk());
    auto dense = ReadPlaidIndex(Fixture(writer));
    ASSERT_THAT(dense.status(), IsOk());
    config_.dim = compressed->codec.dim;
    config_.plaid_centroids = compressed->codec.num_centroids;
    auto corpus =
        maxsimd::Corpus::Create(config_, limits_, backend_.get()).value();
    DocumentBuilder builder(config_, limits_);
    std::vector<int32_t> counts;
    for (size_t i = 0; i + 1 < compressed->cu_seqlens.size(); ++i) {
      counts.push_back(static_cast<int32_t>(compressed->cu_seqlens[i + 1] -
                                            compressed->cu_seqlens[i]));
    }
    ASSERT_THAT(
        builder.AddPlaid(compressed->ids, counts, compressed->codec,
                         compressed->codes.data(), compressed->residuals.data(),
                         compressed->cu_seqlens.back(), "import"),
        IsOk());
    std::optional<PlaidCodec> codec = builder.TakeCodec();
    ASSERT_THAT(corpus->Append(builder.Take(), codec), IsOk());
    auto snap = corpus->Snapshot();
    const SegmentData& d = snap->segments()[0]->data();
    EXPECT_EQ(d.codes, compressed->codes);
    EXPECT_EQ(std::vector<uint8_t>(d.tokens.begin(), d.tokens.end()),
              compressed->residuals);
    // Every document's score against every single-token query equals the
    // dot product with the importer's decompressed (normalised) tokens.
    for (int64_t t = 0; t < dense->cu_seqlens.back(); ++t) {
      const float* q = dense->tokens.data() + t * config_.dim;
      for (int64_t doc = 0;
           doc + 1 < static_cast<int64_t>(dense->cu_seqlens.size()); ++doc) {
        double best = -1e30;
        for (int64_t u = dense->cu_seqlens[doc]; u < dense->cu_seqlens[doc + 1];
             ++u) {
          double dot = 0;
          for (int k = 0; k < config_.dim; ++k) {
            dot += double{q[k]} * dense->tokens[u * config_.dim + k];
          }
          best = std::max(best, dot);
        }
        EXPECT_NEAR(ReferenceScore(q, 1, snap->SegmentRefs()[0].host, doc),
                    best, 1e-5);
      }
    }
  }
}

TEST_F(PlaidCorpusTest, BadCodecsAndCodesAreRefusedByNameAndChangeNothing) {
  auto compressed = ReadPlaidIndexCompressed(Fixture("colbert")).value();
  config_.dim = compressed.codec.dim;  // 16, nbits 2, 8 centroids
  std::vector<int32_t> counts;
  for (size_t i = 0; i + 1 < compressed.cu_seqlens.size(); ++i) {
    counts.push_back(static_cast<int32_t>(compressed.cu_seqlens[i + 1] -
                                          compressed.cu_seqlens[i]));
  }
  const int64_t rows = compressed.cu_seqlens.back();
  auto append = [&](const CorpusConfig& config, maxsimd::Corpus& corpus,
                    const PlaidCodec& codec, const std::vector<int32_t>& codes,
                    const std::string& prefix) -> absl::Status {
    DocumentBuilder builder(config, limits_);
    std::vector<std::string> ids;
    for (const std::string& id : compressed.ids) ids.push_back(prefix + id);
    absl::Status s =
        builder.AddPlaid(ids, counts, codec, codes.data(),
                         compressed.residuals.data(), rows, "import");
    if (!s.ok()) return s;
    std::optional<PlaidCodec> c = builder.TakeCodec();
    return corpus.Append(builder.Take(), c).status();
  };
  // Wrong nbits: a 4-bit corpus refuses 2-bit rows.
  {
    CorpusConfig c = config_;
    c.storage_dtype = DType::kPlaid4;
    auto corpus = maxsimd::Corpus::Create(c, limits_, backend_.get()).value();
    EXPECT_THAT(append(c, *corpus, compressed.codec, compressed.codes, "x"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("plaid_nbits: the documents are compressed "
                                   "with 2 bits per value")));
    EXPECT_EQ(corpus->Snapshot()->live_docs(), 0);
    EXPECT_EQ(corpus->Snapshot()->codec(), nullptr);
  }
  // Centroid count mismatch against plaid_centroids.
  {
    CorpusConfig c = config_;
    c.plaid_centroids = 16;
    auto corpus = maxsimd::Corpus::Create(c, limits_, backend_.get()).value();
    EXPECT_THAT(append(c, *corpus, compressed.codec, compressed.codes, "x"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("plaid_centroids: corpus \"p\" was created "
                                   "for 16 centroids; the documents' codec has "
                                   "8")));
    EXPECT_EQ(corpus->Snapshot()->live_docs(), 0);
  }
  auto corpus =
      maxsimd::Corpus::Create(config_, limits_, backend_.get()).value();
  // Codes out of range, and a codec whose tables do not fit.
  std::vector<int32_t> bad_codes = compressed.codes;
  bad_codes[3] = 8;
  EXPECT_THAT(append(config_, *corpus, compressed.codec, bad_codes, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("code 8 of token 3 is outside the 8 "
                                 "centroids")));
  bad_codes[3] = -1;
  EXPECT_THAT(append(config_, *corpus, compressed.codec, bad_codes, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("code -1 of token 3")));
  PlaidCodec short_weights = compressed.codec;
  short_weights.bucket_weights.pop_back();
  EXPECT_THAT(append(config_, *corpus, short_weights, compressed.codes, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("3 bucket_weights")));
  EXPECT_EQ(corpus->Snapshot()->live_docs(), 0);
  // A good import, then one of another codec: refused.
  ASSERT_THAT(append(config_, *corpus, compressed.codec, compressed.codes, "x"),
              IsOk());
  PlaidCodec other = compressed.codec;
  other.centroids[0] += 0.5f;
  EXPECT_THAT(append(config_, *corpus, other, compressed.codes, "y"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("codec: the documents were compressed with "
                                 "another codec")));
  EXPECT_EQ(corpus->Snapshot()->live_docs(), 5);
  // Dense rows compress with the adopted codec.
  SyntheticCorpusOptions o;
  o.num_docs = 3;
  o.dim = config_.dim;
  o.min_tokens = 2;
  o.max_tokens = 4;
  ASSERT_THAT(corpus->Append(Docs(GenerateSyntheticCorpus(o), "d")), IsOk());
  EXPECT_EQ(corpus->Snapshot()->live_docs(), 8);
  EXPECT_EQ(corpus->Snapshot()->codec()->codec().num_centroids, 8);
}

// More centroids than the first append has tokens cannot be trained.
TEST_F(PlaidCorpusTest, TooManyCentroidsForTheFirstAppendIsRefused) {
  config_.plaid_centroids = 4096;
  auto corpus =
      maxsimd::Corpus::Create(config_, limits_, backend_.get()).value();
  EXPECT_THAT(corpus->Append(Docs(Corpus(10, 5), "a")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plaid_centroids: training the codec")));
  EXPECT_EQ(corpus->Snapshot()->live_docs(), 0);
  EXPECT_EQ(corpus->Snapshot()->codec(), nullptr);
}

// A CPU backend that offers a k-means kernel (the host's assignment,
// counted), or answers `status` from it: what a GPU backend offers a PLAID
// corpus.
class KMeansBackend final : public ::maxsimd::testing::ForwardingBackend {
 public:
  explicit KMeansBackend(absl::Status status = absl::OkStatus())
      : ForwardingBackend(std::unique_ptr<Backend>(
            CpuBackend::Create(CpuBackendOptions()).value())),
        status_(std::move(status)) {}
  absl::Status AssignNearestCentroids(absl::Span<const float> tokens,
                                      absl::Span<const float> centroids,
                                      int32_t dim,
                                      absl::Span<int64_t> codes) override {
    ++calls;
    if (!status_.ok()) return status_;
    AssignNearestCentroidsOnHost(tokens.data(), tokens.size() / dim, dim,
                                 centroids.data(), centroids.size() / dim,
                                 codes.data(), 2);
    return absl::OkStatus();
  }
  bool AssignsNearestCentroids() const override { return true; }
  // The CPU backend's: every dtype.
  bool SupportsDType(DType, int32_t) const override { return true; }
  int calls = 0;

 private:
  absl::Status status_;
};

TEST_F(PlaidCorpusTest, TrainsAndCompressesThroughTheBackendsKMeans) {
  const SyntheticCorpus a = Corpus(300, 1);
  KMeansBackend kmeans;
  auto corpus = maxsimd::Corpus::Create(config_, limits_, &kmeans).value();
  ASSERT_THAT(corpus->Append(Docs(a, "a")), IsOk());
  // 20 iterations, the final assignment, one compressed chunk.
  EXPECT_EQ(kmeans.calls, PlaidTrainOptions().iterations + 2);
  auto snap = corpus->Snapshot();
  ASSERT_NE(snap->codec(), nullptr);
  const int64_t tokens = a.cu_seqlens.back();
  EXPECT_LE(snap->codec()->codec().num_centroids, tokens / 32);
  ExpectScanMatchesReference(*snap, a, 12);

  // Without the kernel after all: the host does the same work, with the
  // same options, so the codec and the rows are the same.
  KMeansBackend refusing(absl::UnimplementedError("no kernel"));
  auto host = maxsimd::Corpus::Create(config_, limits_, &refusing).value();
  ASSERT_THAT(host->Append(Docs(a, "a")), IsOk());
  EXPECT_EQ(refusing.calls, 2);  // asked once by training, once by compression
  auto host_snap = host->Snapshot();
  ASSERT_NE(host_snap->codec(), nullptr);
  EXPECT_TRUE(
      SamePlaidCodec(host_snap->codec()->codec(), snap->codec()->codec()));
  EXPECT_EQ(host_snap->segments()[0]->data().codes,
            snap->segments()[0]->data().codes);
  EXPECT_EQ(host_snap->segments()[0]->data().tokens,
            snap->segments()[0]->data().tokens);

  // Any other error fails the append and leaves the corpus empty.
  KMeansBackend failing(absl::UnavailableError("the device has failed"));
  auto failed = maxsimd::Corpus::Create(config_, limits_, &failing).value();
  EXPECT_THAT(failed->Append(Docs(a, "a")),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("the device has failed")));
  EXPECT_EQ(failed->Snapshot()->live_docs(), 0);
  EXPECT_EQ(failed->Snapshot()->codec(), nullptr);
}

TEST(PlaidSearchParamsTest, DefaultsFollowColbertByK) {
  EXPECT_EQ(DefaultPlaidSearchParams(10).n_ivf_probe, 1);
  EXPECT_EQ(DefaultPlaidSearchParams(10).n_full_scores, 64);
  EXPECT_EQ(DefaultPlaidSearchParams(11).n_ivf_probe, 2);
  EXPECT_EQ(DefaultPlaidSearchParams(100).n_full_scores, 256);
  EXPECT_EQ(DefaultPlaidSearchParams(101).n_ivf_probe, 4);
  EXPECT_EQ(DefaultPlaidSearchParams(101).n_full_scores, 1024);
  EXPECT_EQ(DefaultPlaidSearchParams(4000).n_full_scores, 4000);
}

// Candidate generation finds the exact top-10 on clustered data: ranking
// its candidates exactly gives (nearly) the exhaustive scan's top 10. It
// never returns a deleted document, returns at most n_full_scores, and
// nothing before the corpus has a codec.
TEST_F(PlaidCorpusTest, CandidateGenerationRecallsTheExhaustiveTopTen) {
  auto corpus =
      maxsimd::Corpus::Create(config_, limits_, backend_.get()).value();
  EXPECT_TRUE(PlaidCandidates(*corpus->Snapshot(), nullptr, 0, {}).empty());
  const SyntheticCorpus a = Corpus(1500, 11);
  ASSERT_THAT(corpus->Append(Docs(a, "a")), IsOk());
  ASSERT_THAT(corpus->Delete({"a0", "a7"}, false), IsOk());
  auto snap = corpus->Snapshot();
  int found = 0, total = 0;
  for (int q = 0; q < 20; ++q) {
    const std::vector<float> query =
        GenerateQueryForDocument(a, q * 37, 8, 0.3f, 100 + q);
    PlaidSearchParams params;
    params.n_ivf_probe = 2;
    params.n_full_scores = 128;
    const std::vector<DocRef> cands =
        PlaidCandidates(*snap, query.data(), 8, params);
    ASSERT_LE(cands.size(), 128u);
    ASSERT_FALSE(cands.empty());
    for (const DocRef& r : cands) {
      EXPECT_FALSE(r.segment == 0 && (r.doc == 0 || r.doc == 7));
    }
    EXPECT_EQ(PlaidCandidates(*snap, query.data(), 8, params).size(),
              cands.size());  // deterministic
    SearchBatch scan;
    scan.dim = config_.dim;
    scan.refs = snap->SegmentRefs();
    scan.AddQuery(query, 10);
    SearchBatch rerank = scan;
    rerank.candidates = cands;
    rerank.cand_offsets = {0, static_cast<int64_t>(cands.size())};
    std::vector<std::vector<ScoredDoc>> exact(1), got(1);
    ASSERT_THAT(backend_->Search(scan.Params(), absl::MakeSpan(exact), nullptr),
                IsOk());
    ASSERT_THAT(backend_->Search(rerank.Params(), absl::MakeSpan(got), nullptr),
                IsOk());
    for (const ScoredDoc& e : exact[0]) {
      ++total;
      for (const ScoredDoc& g : got[0]) found += g.index == e.index;
    }
  }
  EXPECT_GE(found, total * 9 / 10) << found << " of " << total;
}

}  // namespace
}  // namespace maxsimd
