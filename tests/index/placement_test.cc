// Corpus placement: `host` keeps tokens in (pinned) host memory, `auto`
// keeps segments resident while the corpus budget has room and on the host
// past it, `gpu` refuses a write past the budget; every placement ranks
// alike, and a refused write leaves the corpus as it was. Runs on the CPU
// backend everywhere and, as its GPU twin, on GPU 0 where one is present.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "index/corpus.h"
#include "kernels/gpu_backend.h"
#include "tests/index/corpus_test_util.h"
#include "tests/support/ranking.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::TestBackend;
using ::testing::HasSubstr;

constexpr int32_t kDim = 64;
constexpr int64_t kDocs = 200;

// kDocs synthetic documents, ids "<prefix><i>".
SegmentData Docs(const CorpusConfig& config, const std::string& prefix,
                 uint64_t seed) {
  return testing::SyntheticDocs(config, kDocs, 100, seed, prefix, 0);
}

class PlacementTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && GpuBackend::DeviceCount() == 0) {
      GTEST_SKIP() << "no GPU; the CPU instance of this test ran";
    }
    config_.name = "c";
    config_.dim = kDim;
    // The reference: everything resident, no budget.
    reference_backend_ = TestBackend(GetParam(), 0, 0);
    reference_ = Corpus::Create(config_, {}, reference_backend_.get()).value();
    ASSERT_THAT(reference_->Append(Docs(config_, "a", 1)), IsOk());
    ASSERT_THAT(reference_->Append(Docs(config_, "b", 2)), IsOk());
    // One append's segment: tokens plus offsets.
    const auto snap = reference_->Snapshot();
    segment_bytes_ = snap->segments()[0]->bytes();
  }

  std::shared_ptr<Corpus> Make(Backend* backend, Placement placement) {
    CorpusConfig c = config_;
    c.placement = placement;
    return Corpus::Create(c, {}, backend).value();
  }

  // Scans and reranks `corpus` and the reference alike; every query must
  // rank the same documents with the same scores.
  void ExpectRanksLikeReference(Backend* backend, const Corpus& corpus) {
    std::mt19937_64 rng(testing::TestSeed());
    SearchBatch scan;
    scan.dim = kDim;
    for (int32_t k : {1, 20, 400}) {
      scan.AddQuery(testing::RandomQuery(rng, 1 + rng() % 32, kDim), k);
    }
    SearchBatch rerank = scan;
    rerank.cand_offsets = {0};
    const auto snap = corpus.Snapshot();
    const auto ref = reference_->Snapshot();
    for (size_t q = 0; q < rerank.top_k.size(); ++q) {
      for (int i = 0; i < 50; ++i) {
        const std::string id =
            (i % 2 ? "a" : "b") + std::to_string((q * 37 + i * 7) % kDocs);
        rerank.candidates.push_back(*snap->Find(id));
      }
      rerank.cand_offsets.push_back(
          static_cast<int64_t>(rerank.candidates.size()));
    }
    for (SearchBatch* batch : {&scan, &rerank}) {
      SearchBatch on_ref = *batch;
      batch->refs = snap->SegmentRefs();
      on_ref.refs = ref->SegmentRefs();
      if (!on_ref.cand_offsets.empty()) {
        for (DocRef& r : on_ref.candidates) {
          r = *ref->Find(snap->segments()[r.segment]->id(r.doc));
        }
      }
      const size_t n = batch->top_k.size();
      std::vector<std::vector<ScoredDoc>> got(n), want(n);
      ASSERT_THAT(
          backend->Search(batch->Params(), absl::MakeSpan(got), nullptr),
          IsOk());
      ASSERT_THAT(reference_backend_->Search(on_ref.Params(),
                                             absl::MakeSpan(want), nullptr),
                  IsOk());
      for (size_t q = 0; q < n; ++q) {
        ASSERT_EQ(got[q].size(), want[q].size());
        for (size_t i = 0; i < got[q].size(); ++i) {
          EXPECT_EQ(snap->IdOf(got[q][i].index), ref->IdOf(want[q][i].index))
              << "query " << q << " rank " << i;
          EXPECT_NEAR(got[q][i].score, want[q][i].score, 1e-5);
        }
      }
    }
  }

  CorpusConfig config_;
  std::unique_ptr<Backend> reference_backend_;
  std::shared_ptr<Corpus> reference_;
  int64_t segment_bytes_ = 0;
};

TEST_P(PlacementTest, HostPlacementStreamsEverySegment) {
  auto backend = TestBackend(GetParam(), 0, 0);
  auto corpus = Make(backend.get(), Placement::kHost);
  ASSERT_THAT(corpus->Append(Docs(config_, "a", 1)), IsOk());
  ASSERT_THAT(corpus->Append(Docs(config_, "b", 2)), IsOk());
  const auto snap = corpus->Snapshot();
  for (const auto& seg : snap->segments()) EXPECT_TRUE(seg->streamed());
  for (const SegmentRef& r : snap->SegmentRefs()) EXPECT_TRUE(r.streamed);
  EXPECT_GT(snap->streamed_bytes(), 0);
  ExpectRanksLikeReference(backend.get(), *corpus);
}

// A budget with room for one segment: `auto` puts the first on the device
// and the second on the host; `gpu` refuses the second and keeps the first.
TEST_P(PlacementTest, AutoGoesToTheHostPastTheBudgetGpuRefuses) {
  const int64_t budget = segment_bytes_ + segment_bytes_ / 2;
  auto backend = TestBackend(GetParam(), budget, 0);
  auto autop = Make(backend.get(), Placement::kAuto);
  ASSERT_THAT(autop->Append(Docs(config_, "a", 1)), IsOk());
  ASSERT_THAT(autop->Append(Docs(config_, "b", 2)), IsOk());
  const auto snap = autop->Snapshot();
  ASSERT_EQ(snap->segments().size(), 2u);
  EXPECT_FALSE(snap->segments()[0]->streamed());
  EXPECT_TRUE(snap->segments()[1]->streamed());
  EXPECT_EQ(snap->streamed_bytes(),
            static_cast<int64_t>(snap->segments()[1]->data().tokens.size()));
  ExpectRanksLikeReference(backend.get(), *autop);

  auto other = TestBackend(GetParam(), budget, 0);
  auto gpu = Make(other.get(), Placement::kGpu);
  ASSERT_THAT(gpu->Append(Docs(config_, "a", 1)), IsOk());
  EXPECT_THAT(gpu->Append(Docs(config_, "b", 2)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--corpus_budget_bytes")));
  EXPECT_EQ(gpu->Snapshot()->live_docs(), kDocs);
  EXPECT_EQ(gpu->Snapshot()->segments().size(), 1u);
}

TEST_P(PlacementTest, PinnedBudgetRefusesAWriteAndKeepsTheCorpus) {
  auto backend = TestBackend(GetParam(), 0, segment_bytes_);
  auto corpus = Make(backend.get(), Placement::kHost);
  ASSERT_THAT(corpus->Append(Docs(config_, "a", 1)), IsOk());
  EXPECT_THAT(corpus->Append(Docs(config_, "b", 2)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--pinned_budget_bytes")));
  const auto snap = corpus->Snapshot();
  EXPECT_EQ(snap->live_docs(), kDocs);
  EXPECT_EQ(snap->segments().size(), 1u);
  EXPECT_TRUE(snap->Find("a5").has_value());
  EXPECT_FALSE(snap->Find("b5").has_value());
}

INSTANTIATE_TEST_SUITE_P(Backends, PlacementTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Gpu" : "Cpu";
                         });

}  // namespace
}  // namespace maxsimd
