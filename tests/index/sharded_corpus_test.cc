// Sharding: a corpus on a ShardedBackend is split by document range over its
// shards, and every scan and rerank over it returns what the same corpus on
// one backend returns. Runs on CPU backends everywhere and, as its GPU twin,
// on two GPU backends sharing GPU 0 where a GPU is present.
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "index/corpus.h"
#include "kernels/gpu_backend.h"
#include "kernels/sharded_backend.h"
#include "tests/index/corpus_test_util.h"
#include "tests/support/ranking.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::CompareRanking;
using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::TestBackend;
using ::testing::HasSubstr;

constexpr int32_t kDim = 64;

std::unique_ptr<Backend> MakeSharded(bool gpu, int shards) {
  std::vector<std::unique_ptr<Backend>> children;
  for (int i = 0; i < shards; ++i) children.push_back(TestBackend(gpu));
  return ShardedBackend::Create(std::move(children), 2).value();
}

// Synthetic documents [first, first + n) as segment data, ids "d<index>".
SegmentData Docs(const CorpusConfig& config, int64_t first, int64_t n,
                 uint64_t seed) {
  return testing::SyntheticDocs(config, n, 300, seed, "d", first);
}

class ShardedCorpusTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && GpuBackend::DeviceCount() == 0) {
      GTEST_SKIP() << "no GPU; the CPU instance of this test ran";
    }
    config_.name = "c";
    config_.dim = kDim;
    single_backend_ = TestBackend(GetParam());
    sharded_backend_ = MakeSharded(GetParam(), 3);
    single_ = Corpus::Create(config_, {}, single_backend_.get()).value();
    sharded_ = Corpus::Create(config_, {}, sharded_backend_.get()).value();
  }

  // Appends the same documents to both corpora.
  void Append(int64_t first, int64_t n, uint64_t seed) {
    ASSERT_THAT(single_->Append(Docs(config_, first, n, seed)), IsOk());
    ASSERT_THAT(sharded_->Append(Docs(config_, first, n, seed)), IsOk());
  }

  // Runs `batch` on both corpora (segments filled in here) and checks the
  // rankings agree, ids included.
  void ExpectSameResults(SearchBatch batch, const std::string& what) {
    const auto a = single_->Snapshot();
    const auto b = sharded_->Snapshot();
    SearchBatch on_b = batch;
    batch.refs = a->SegmentRefs();
    on_b.refs = b->SegmentRefs();
    if (!batch.cand_offsets.empty()) {
      // Candidates are given by id; each corpus has its own segment layout.
      on_b.candidates.clear();
      for (const DocRef& r : batch.candidates) {
        on_b.candidates.push_back(
            Locate(*b, a->segments()[r.segment]->id(r.doc)));
      }
    }
    const size_t n = batch.top_k.size();
    std::vector<std::vector<ScoredDoc>> ra(n), rb(n);
    ASSERT_THAT(
        single_backend_->Search(batch.Params(), absl::MakeSpan(ra), nullptr),
        IsOk());
    ASSERT_THAT(
        sharded_backend_->Search(on_b.Params(), absl::MakeSpan(rb), nullptr),
        IsOk());
    for (size_t q = 0; q < n; ++q) {
      ASSERT_EQ(CompareRanking(rb[q], ra[q], 1e-6), "")
          << what << ", query " << q;
      for (size_t i = 0; i < ra[q].size(); ++i) {
        EXPECT_EQ(b->IdOf(rb[q][i].index), a->IdOf(ra[q][i].index))
            << what << ", query " << q << ", rank " << i;
      }
    }
  }

  // Where `id` is stored in `snap`, deleted or not.
  static DocRef Locate(const CorpusSnapshot& snap, const std::string& id) {
    for (size_t s = 0; s < snap.segments().size(); ++s) {
      if (auto row = snap.segments()[s]->Find(id)) {
        return {static_cast<int32_t>(s), *row};
      }
    }
    ADD_FAILURE() << id << " is not stored";
    return {};
  }

  SearchBatch Queries(std::mt19937_64& rng, std::vector<int32_t> top_k) {
    SearchBatch batch;
    batch.dim = kDim;
    for (int32_t k : top_k) {
      batch.AddQuery(testing::RandomQuery(rng, 1 + rng() % 40, kDim), k);
    }
    return batch;
  }

  CorpusConfig config_;
  std::unique_ptr<Backend> single_backend_, sharded_backend_;
  std::shared_ptr<Corpus> single_, sharded_;
};

TEST_P(ShardedCorpusTest, LargeAppendSplitsOverEveryShardSmallOnesBalance) {
  Append(0, 700, 1);  // about 13 MB: split three ways
  const auto snap = sharded_->Snapshot();
  ASSERT_EQ(snap->segments().size(), 3u);
  std::set<int> shards;
  int64_t docs = 0;
  for (const auto& s : snap->segments()) {
    shards.insert(s->shard());
    EXPECT_EQ(s->base_index(), docs);  // contiguous document ranges
    docs += s->num_docs();
  }
  EXPECT_EQ(shards, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(docs, 700);
  // A small append goes whole to the shard holding the fewest bytes.
  std::vector<int64_t> held(3, 0);
  for (const auto& s : snap->segments()) held[s->shard()] += s->bytes();
  const int emptiest = static_cast<int>(
      std::min_element(held.begin(), held.end()) - held.begin());
  Append(700, 5, 2);
  const auto after = sharded_->Snapshot();
  ASSERT_EQ(after->segments().size(), 4u);
  EXPECT_EQ(after->segments().back()->shard(), emptiest);
  EXPECT_EQ(after->live_docs(), 705);
}

TEST_P(ShardedCorpusTest, ScanAndRerankMatchOneBackend) {
  std::mt19937_64 rng(testing::TestSeed());
  Append(0, 700, 1);
  Append(700, 20, 2);
  Append(720, 9, 3);
  for (const auto& corpus : {single_, sharded_}) {
    ASSERT_THAT(corpus->Delete({"d3", "d400", "d701", "d650"}, false), IsOk());
  }
  ExpectSameResults(Queries(rng, {1, 10, 100, 1000, 4096}), "scan");

  // Candidates from every shard, deleted ones among them.
  SearchBatch batch = Queries(rng, {5, 50, 1});
  const auto a = single_->Snapshot();
  batch.cand_offsets = {0};
  for (size_t q = 0; q < batch.top_k.size(); ++q) {
    std::set<int64_t> picked;  // distinct, as the server passes them
    while (picked.size() < 60) picked.insert(rng() % 729);
    for (int64_t d : picked) {
      batch.candidates.push_back(Locate(*a, "d" + std::to_string(d)));
    }
    batch.candidates.push_back(Locate(*a, "d400"));
    batch.cand_offsets.push_back(static_cast<int64_t>(batch.candidates.size()));
  }
  ExpectSameResults(std::move(batch), "rerank");
}

TEST_P(ShardedCorpusTest, RerankWithCandidatesOnOneShardOnly) {
  std::mt19937_64 rng(testing::TestSeed());
  Append(0, 700, 1);
  const auto a = single_->Snapshot();
  const auto b = sharded_->Snapshot();
  // Documents of the sharded corpus's last segment only.
  const auto& last = b->segments().back();
  SearchBatch batch = Queries(rng, {3, 3});
  batch.cand_offsets = {0};
  for (int q = 0; q < 2; ++q) {
    for (int64_t d = 0; d < 30; ++d) {
      batch.candidates.push_back(Locate(*a, last->id(d)));
    }
    batch.cand_offsets.push_back(static_cast<int64_t>(batch.candidates.size()));
  }
  ExpectSameResults(std::move(batch), "one shard");
}

// The sharded corpus placed on the host (tokens pinned, streamed by each
// shard's GPU per search) against the resident one-backend corpus.
TEST_P(ShardedCorpusTest, HostPlacedShardsMatchOneResidentBackend) {
  CorpusConfig host = config_;
  host.placement = Placement::kHost;
  sharded_ = Corpus::Create(host, {}, sharded_backend_.get()).value();
  std::mt19937_64 rng(testing::TestSeed());
  Append(0, 700, 1);
  Append(700, 20, 2);
  for (const auto& corpus : {single_, sharded_}) {
    ASSERT_THAT(corpus->Delete({"d3", "d400", "d701"}, false), IsOk());
  }
  const auto b = sharded_->Snapshot();
  int64_t token_bytes = 0;
  for (const auto& seg : b->segments()) {
    EXPECT_TRUE(seg->streamed());
    token_bytes += static_cast<int64_t>(seg->data().tokens.size());
  }
  EXPECT_EQ(b->streamed_bytes(), token_bytes);
  EXPECT_EQ(single_->Snapshot()->streamed_bytes(), 0);
  ExpectSameResults(Queries(rng, {1, 10, 100, 1000}), "scan");
  SearchBatch batch = Queries(rng, {5, 50});
  const auto a = single_->Snapshot();
  batch.cand_offsets = {0};
  for (size_t q = 0; q < batch.top_k.size(); ++q) {
    std::set<int64_t> picked;
    while (picked.size() < 80) picked.insert(rng() % 720);
    for (int64_t d : picked) {
      batch.candidates.push_back(Locate(*a, "d" + std::to_string(d)));
    }
    batch.cand_offsets.push_back(static_cast<int64_t>(batch.candidates.size()));
  }
  ExpectSameResults(std::move(batch), "rerank");
  if (GetParam()) {
    EXPECT_EQ(sharded_backend_->Memory()[0].pinned_bytes, token_bytes);
  }
}

// An int8 corpus split over shards ranks like one backend of the same
// kind, in both query modes. The GPU backend's int8 kernel needs the TMA
// kernels (sm_90): on a GPU without them the corpus is refused.
TEST_P(ShardedCorpusTest, Int8CorpusMatchesOneBackendOrIsRefused) {
  config_.layout = Layout::kInt8;
  config_.storage_dtype = DType::kInt8;
  if (GetParam() && !single_backend_->SupportsDType(DType::kInt8, kDim)) {
    EXPECT_FALSE(sharded_backend_->SupportsDType(DType::kInt8, kDim));
    EXPECT_THAT(Corpus::Create(config_, {}, sharded_backend_.get()),
                StatusIs(absl::StatusCode::kUnimplemented,
                         HasSubstr("layout: LAYOUT_INT8")));
    return;
  }
  EXPECT_TRUE(sharded_backend_->SupportsDType(DType::kInt8, kDim));
  single_ = Corpus::Create(config_, {}, single_backend_.get()).value();
  sharded_ = Corpus::Create(config_, {}, sharded_backend_.get()).value();
  std::mt19937_64 rng(testing::TestSeed());
  Append(0, 1400, 1);  // split three ways
  Append(1400, 20, 2);
  ASSERT_EQ(sharded_->Snapshot()->segments().size(), 4u);
  for (const auto& corpus : {single_, sharded_}) {
    ASSERT_THAT(corpus->Delete({"d3", "d400", "d1401"}, false), IsOk());
  }
  for (bool quantize : {false, true}) {
    SearchBatch scan = Queries(rng, {1, 10, 100});
    scan.quantize_queries = quantize;
    ExpectSameResults(scan, quantize ? "quantised scan" : "scan");
    SearchBatch rerank = Queries(rng, {5, 50});
    rerank.quantize_queries = quantize;
    const auto a = single_->Snapshot();
    rerank.cand_offsets = {0};
    for (size_t q = 0; q < rerank.top_k.size(); ++q) {
      std::set<int64_t> picked;
      while (picked.size() < 80) picked.insert(rng() % 1420);
      for (int64_t d : picked) {
        rerank.candidates.push_back(Locate(*a, "d" + std::to_string(d)));
      }
      rerank.cand_offsets.push_back(
          static_cast<int64_t>(rerank.candidates.size()));
    }
    ExpectSameResults(std::move(rerank),
                      quantize ? "quantised rerank" : "rerank");
  }
}

TEST_P(ShardedCorpusTest, ReportsMemoryPerDevice) {
  Append(0, 700, 1);
  const std::vector<DeviceMemory> m = sharded_backend_->Memory();
  if (!GetParam()) {
    EXPECT_TRUE(m.empty());
    return;
  }
  // Three shards on GPU 0 add up to one entry.
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].device, 0);
  EXPECT_GE(m[0].corpus_bytes, sharded_->Snapshot()->bytes());
  EXPECT_GT(m[0].workspace_bytes, 0);
  EXPECT_GT(m[0].total_bytes, m[0].free_bytes);
}

INSTANTIATE_TEST_SUITE_P(Backends, ShardedCorpusTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Gpu" : "Cpu";
                         });

TEST(ShardedBackendTest, CreateRejectsBadArguments) {
  EXPECT_THAT(
      ShardedBackend::Create({}, 1),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no shards")));
  std::vector<std::unique_ptr<Backend>> with_null;
  with_null.push_back(nullptr);
  EXPECT_THAT(ShardedBackend::Create(std::move(with_null), 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shards[0] is null")));
  std::vector<std::unique_ptr<Backend>> one;
  one.push_back(TestBackend(false));
  EXPECT_THAT(ShardedBackend::Create(std::move(one), 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("threads_per_shard")));
}

TEST(ShardedBackendTest, SearchRejectsAShardOutOfRange) {
  auto backend = MakeSharded(false, 2);
  std::mt19937_64 rng(1);
  testing::HostSegment seg =
      testing::RandomSegment(rng, 4, 1, 3, kDim, DType::kFloat16, 0);
  SearchBatch batch;
  batch.dim = kDim;
  batch.refs.push_back({seg.View(), seg.View(), 2});
  batch.AddQuery(testing::RandomQuery(rng, 2, kDim), 1);
  std::vector<std::vector<ScoredDoc>> out(1);
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(out), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("segments[0].shard is 2")));
}

// Every shard must score a dtype for the sharded backend to: a search that
// sends an int8 segment to a shard without the kernel is UNIMPLEMENTED.
TEST(ShardedBackendTest, Int8NeedsEveryShardToScoreIt) {
  std::vector<std::unique_ptr<Backend>> children;
  children.push_back(TestBackend(false));
  children.push_back(std::make_unique<testing::LimitedBackend>(false));
  auto backend = ShardedBackend::Create(std::move(children), 1).value();
  EXPECT_FALSE(backend->SupportsDType(DType::kInt8, kDim));
  EXPECT_TRUE(backend->SupportsDType(DType::kFloat16, kDim));
  CorpusConfig config;
  config.name = "q8";
  config.dim = kDim;
  config.layout = Layout::kInt8;
  config.storage_dtype = DType::kInt8;
  EXPECT_THAT(CheckBackendServes(config, *backend),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("layout")));
  std::mt19937_64 rng(1);
  testing::HostSegment seg =
      testing::RandomSegment(rng, 4, 1, 3, kDim, DType::kInt8, 0);
  SearchBatch batch;
  batch.dim = kDim;
  batch.refs.push_back({seg.View(), seg.View(), 1});
  batch.AddQuery(testing::RandomQuery(rng, 2, kDim), 1);
  std::vector<std::vector<ScoredDoc>> out(1);
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(out), nullptr),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("segments[0] is int8 (layout int8): shard 1, "
                                 "dense-only (Test GPU, compute capability "
                                 "8.6), has no kernel for it")));
  batch.refs[0].shard = 0;  // the CPU shard scores it
  EXPECT_THAT(backend->Search(batch.Params(), absl::MakeSpan(out), nullptr),
              IsOk());
  EXPECT_EQ(out[0].size(), 1u);
}

}  // namespace
}  // namespace maxsimd
