// Tests of client/sharded_client.h. Placement and merge are checked against
// fixed values (those of the Python client's sharded.py); the fan-out runs
// against live CPU servers: two shards that each hold half of a random
// corpus (placed by crc32(id) % 2) must answer exactly as one server that
// holds all of it, ties included, and a shard that is down or a deadline
// that passes must be reported naming the shard.
#include "client/sharded_client.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_support.h"
#include "tests/support/http.h"
#include "tests/support/ranking.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::FreePort;
using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::RandomQuery;
using ::maxsimd::testing::ServerProcess;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::TestSeed;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Placement and merge (no server).

TEST(Crc32Test, MatchesZlibAndPython) {
  // zlib.crc32(s.encode()) in Python.
  EXPECT_EQ(Crc32(""), 0u);
  EXPECT_EQ(Crc32("123456789"), 0xcbf43926u);
  EXPECT_EQ(Crc32("doc0"), 0xbe823b9du);
  EXPECT_EQ(Crc32("maxsimd"), 0xd907cadcu);
  EXPECT_EQ(Crc32("\xc3\xa9"), 0x0e048d3eu);  // "é" in UTF-8
  // crc32_shard(s, n) in Python.
  EXPECT_EQ(Crc32Shard("doc0", 2), 1);
  EXPECT_EQ(Crc32Shard("doc1", 3), 2);
  EXPECT_EQ(Crc32Shard("maxsimd", 2), 0);
  EXPECT_EQ(Crc32Shard("maxsimd", 3), 1);
  EXPECT_EQ(Crc32Shard("anything", 1), 0);
}

v1::RerankResponse Answer(
    const std::vector<std::pair<std::string, float>>& results, int64_t total_ns,
    const std::string& request_id = "r") {
  v1::RerankResponse response;
  response.set_request_id(request_id);
  for (const auto& [id, score] : results) {
    v1::ScoredDocument* doc = response.add_results();
    doc->set_id(id);
    doc->set_score(score);
  }
  if (total_ns >= 0) response.mutable_timing()->set_total_ns(total_ns);
  return response;
}

std::vector<std::string> Ids(const v1::RerankResponse& response) {
  std::vector<std::string> ids;
  for (const v1::ScoredDocument& doc : response.results()) {
    ids.push_back(doc.id());
  }
  return ids;
}

TEST(MergeRerankResponsesTest, TiesGoToTheFirstShardThenKeepItsOrder) {
  const std::vector<v1::RerankResponse> shards = {
      Answer({{"a0", 5.f}, {"a1", 3.f}, {"a2", 3.f}, {"a3", 1.f}}, 10),
      Answer({{"b0", 5.f}, {"b1", 4.f}, {"b2", 3.f}}, 30),
      Answer({{"c0", 6.f}, {"c1", 3.f}, {"c2", 3.f}}, 20),
  };
  const v1::RerankResponse merged = MergeRerankResponses(shards, 100);
  EXPECT_THAT(Ids(merged), ElementsAre("c0", "a0", "b0", "b1", "a1", "a2", "b2",
                                       "c1", "c2", "a3"));
  EXPECT_EQ(merged.results(0).score(), 6.f);
  EXPECT_EQ(merged.results(9).score(), 1.f);
  EXPECT_EQ(merged.timing().total_ns(), 30);  // the slowest shard's
  EXPECT_EQ(merged.request_id(), "r");

  // The cut at top_k falls inside a run of ties.
  EXPECT_THAT(Ids(MergeRerankResponses(shards, 6)),
              ElementsAre("c0", "a0", "b0", "b1", "a1", "a2"));
  EXPECT_THAT(Ids(MergeRerankResponses(shards, 1)), ElementsAre("c0"));
}

TEST(MergeRerankResponsesTest, DefaultTopKTimingAndOddScores) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::pair<std::string, float>> many;
  for (int i = 0; i < 15; ++i) many.push_back({absl::StrCat("m", i), -1.f});
  const std::vector<v1::RerankResponse> shards = {
      Answer({{"nan", nan}, {"neg", -inf}}, -1, "first"),
      Answer(many, 7, "second"),
      Answer({{"pos", inf}, {"zero", -0.f}}, 7, "third"),
  };
  const v1::RerankResponse merged = MergeRerankResponses(shards, 0);
  ASSERT_EQ(merged.results_size(), 10);  // 0 means 10
  EXPECT_EQ(merged.results(0).id(), "pos");
  EXPECT_EQ(merged.results(1).id(), "zero");
  EXPECT_EQ(merged.results(2).id(), "m0");
  EXPECT_EQ(merged.results(9).id(), "m7");
  // Equal total_ns: the first shard with a timing wins.
  EXPECT_EQ(merged.timing().total_ns(), 7);
  EXPECT_EQ(merged.request_id(), "first");

  // NaN sorts last, after -inf.
  EXPECT_THAT(Ids(MergeRerankResponses({shards[0]}, 5)),
              ElementsAre("neg", "nan"));
  EXPECT_FALSE(MergeRerankResponses({shards[0]}, 5).has_timing());
  EXPECT_EQ(MergeRerankResponses({}, 5).results_size(), 0);
}

TEST(ShardedClientCreateTest, RejectsBadArguments) {
  ClientOptions options;
  EXPECT_THAT(ShardedClient::Create({}, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("targets is empty")));
  EXPECT_THAT(
      ShardedClient::Create({"127.0.0.1:1", ""}, options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard 1 ('')")));
  options.lb_policy = "weighted_by_mood";
  EXPECT_THAT(
      ShardedClient::Create({"127.0.0.1:1"}, options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lb_policy")));
}

TEST(ShardedClientCreateTest, PlacementUsesTheShardFunction) {
  ClientOptions options;
  absl::StatusOr<std::unique_ptr<ShardedClient>> crc =
      ShardedClient::Create({"127.0.0.1:1", "127.0.0.1:2"}, options);
  MAXSIMD_ASSERT_OK(crc);
  EXPECT_EQ((*crc)->num_shards(), 2);
  EXPECT_EQ((*crc)->target(1), "127.0.0.1:2");
  EXPECT_EQ((*crc)->ShardOf("doc0").value_or(-1), 1);
  EXPECT_EQ((*crc)->ShardOf("maxsimd").value_or(-1), 0);
  absl::StatusOr<std::vector<std::vector<std::string>>> parts =
      (*crc)->Partition({"doc0", "maxsimd", "doc1", "123456789"});
  MAXSIMD_ASSERT_OK(parts);
  EXPECT_THAT(*parts, ElementsAre(ElementsAre("maxsimd", "123456789"),
                                  ElementsAre("doc0", "doc1")));

  absl::StatusOr<std::unique_ptr<ShardedClient>> custom = ShardedClient::Create(
      {"127.0.0.1:1", "127.0.0.1:2"}, options,
      [](absl::string_view id, int n) { return id == "x" ? n : 0; });
  MAXSIMD_ASSERT_OK(custom);
  EXPECT_EQ((*custom)->ShardOf("doc0").value_or(-1), 0);
  EXPECT_THAT((*custom)->ShardOf("x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shard_of('x') is 2; need 0..1")));
  Query query;
  query.corpus = "c";
  query.dim = 2;
  query.tokens = {1.f, 0.f};
  query.candidate_ids = {"a", "x"};
  EXPECT_THAT(
      (*custom)->Rerank(query),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard_of('x')")));
}

// ---------------------------------------------------------------------------
// Live servers: two shards against one server holding the whole corpus.

constexpr int kDim = 32;
constexpr int kUniqueDocs = 150;
constexpr int kCopies = 150;  // documents that repeat a unique one's tokens
constexpr int kNumDocs = kUniqueDocs + kCopies;
constexpr char kCorpus[] = "sharded";

// The corpus, its placement, and the servers, shared by the live tests.
struct Live {
  uint64_t seed = 0;
  std::vector<std::string> ids;  // in generation order
  absl::flat_hash_map<std::string, std::vector<float>> tokens;  // [len, dim]
  std::vector<std::vector<std::string>> parts;  // ids of each shard, in order
  std::unique_ptr<ServerProcess> whole;
  std::unique_ptr<ServerProcess> shards[2];
};

DocumentBatch BatchOf(const Live& live, const std::vector<std::string>& ids) {
  DocumentBatch batch;
  batch.dim = kDim;
  batch.cu_seqlens.push_back(0);
  for (const std::string& id : ids) {
    const std::vector<float>& t = live.tokens.at(id);
    batch.ids.push_back(id);
    batch.tokens.insert(batch.tokens.end(), t.begin(), t.end());
    batch.cu_seqlens.push_back(batch.cu_seqlens.back() +
                               static_cast<int64_t>(t.size()) / kDim);
  }
  return batch;
}

absl::Status Upload(const ServerProcess& server, const DocumentBatch& batch) {
  std::unique_ptr<Client> client = server.NewClient();
  v1::CreateCorpusRequest create;
  create.set_name(kCorpus);
  create.set_dim(kDim);
  absl::Status status = client->CreateCorpus(create).status();
  if (!status.ok()) return status;
  return client->AddDocuments(kCorpus, batch).status();
}

absl::StatusOr<std::unique_ptr<Live>> StartLive() {
  auto live = std::make_unique<Live>();
  live->seed = TestSeed();
  std::mt19937_64 rng(live->seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> length(1, 24);
  std::vector<std::vector<float>> unique(kUniqueDocs);
  for (std::vector<float>& t : unique) {
    t.resize(static_cast<size_t>(length(rng)) * kDim);
    for (float& v : t) v = normal(rng);
  }
  // Copies repeat a unique document's tokens under another id, so equal
  // scores are common and most of them fall on different shards.
  for (int d = 0; d < kNumDocs; ++d) {
    const std::string id = absl::StrCat("doc", d);
    live->ids.push_back(id);
    live->tokens[id] =
        d < kUniqueDocs ? unique[d] : unique[rng() % kUniqueDocs];
  }
  live->parts.assign(2, {});
  for (const std::string& id : live->ids) {
    live->parts[Crc32Shard(id, 2)].push_back(id);
  }
  // The whole corpus is added shard by shard, in target order: the order
  // under which a single server's ties match the merge's.
  std::vector<std::string> whole_order = live->parts[0];
  whole_order.insert(whole_order.end(), live->parts[1].begin(),
                     live->parts[1].end());

  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({});
  if (!server.ok()) return server.status();
  live->whole = *std::move(server);
  absl::Status status = Upload(*live->whole, BatchOf(*live, whole_order));
  if (!status.ok()) return status;
  for (int s = 0; s < 2; ++s) {
    server = ServerProcess::Start({});
    if (!server.ok()) return server.status();
    live->shards[s] = *std::move(server);
    status = Upload(*live->shards[s], BatchOf(*live, live->parts[s]));
    if (!status.ok()) return status;
  }
  return live;
}

class ShardedClientLiveTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<Live>> live = StartLive();
    if (live.ok()) {
      live_ = live->release();
    } else {
      *setup_error_ = live.status().ToString();
    }
  }
  static void TearDownTestSuite() {
    delete live_;
    live_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(live_, nullptr) << *setup_error_;
    whole_ = live_->whole->NewClient();
  }

  std::vector<std::string> ShardTargets() const {
    return {live_->shards[0]->target(), live_->shards[1]->target()};
  }
  std::unique_ptr<ShardedClient> Sharded(
      const std::vector<std::string>& targets,
      absl::Duration timeout = absl::Seconds(30)) const {
    ClientOptions options;
    options.timeout = timeout;
    absl::StatusOr<std::unique_ptr<ShardedClient>> sharded =
        ShardedClient::Create(targets, options);
    EXPECT_THAT(sharded, IsOk());
    return sharded.ok() ? *std::move(sharded) : nullptr;
  }

  Query RandomScan(std::mt19937_64& rng, int32_t top_k) const {
    Query query;
    query.corpus = kCorpus;
    query.dim = kDim;
    query.tokens =
        RandomQuery(rng, std::uniform_int_distribution<int>(1, 8)(rng), kDim);
    query.top_k = top_k;
    query.request_id = absl::StrCat("q", rng() % 1000000);
    return query;
  }

  static Live* live_;
  static std::string* setup_error_;
  std::unique_ptr<Client> whole_;
};

Live* ShardedClientLiveTest::live_ = nullptr;
std::string* ShardedClientLiveTest::setup_error_ = new std::string;

// Same ids in the same order with bitwise-equal scores: both sides scored
// the same stored tokens with the same backend.
void ExpectSameAnswer(const absl::StatusOr<v1::RerankResponse>& got,
                      const absl::StatusOr<v1::RerankResponse>& want) {
  ASSERT_THAT(want, IsOk());
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->request_id(), want->request_id());
  EXPECT_TRUE(got->has_timing());
  ASSERT_EQ(got->results_size(), want->results_size());
  for (int i = 0; i < got->results_size(); ++i) {
    EXPECT_EQ(got->results(i).id(), want->results(i).id()) << "rank " << i;
    EXPECT_EQ(got->results(i).score(), want->results(i).score())
        << "rank " << i << " id " << want->results(i).id();
  }
}

// Adjacent results with equal scores that come from different shards: the
// places where the tie rule decides the order.
int CrossShardTies(const v1::RerankResponse& response) {
  int ties = 0;
  for (int i = 1; i < response.results_size(); ++i) {
    if (response.results(i).score() == response.results(i - 1).score() &&
        Crc32Shard(response.results(i).id(), 2) !=
            Crc32Shard(response.results(i - 1).id(), 2)) {
      ++ties;
    }
  }
  return ties;
}

TEST_F(ShardedClientLiveTest, ScanMatchesOneServerHoldingEverything) {
  // Both shards hold documents (the placement is not degenerate).
  ASSERT_GT(live_->parts[0].size(), kNumDocs / 4);
  ASSERT_GT(live_->parts[1].size(), kNumDocs / 4);
  std::unique_ptr<ShardedClient> sharded = Sharded(ShardTargets());
  ASSERT_NE(sharded, nullptr);
  std::mt19937_64 rng(live_->seed + 1);
  int ties = 0;
  for (int32_t top_k : {1, 2, 5, 0, 17, 64, kNumDocs, kNumDocs + 10}) {
    for (int rep = 0; rep < 3; ++rep) {
      SCOPED_TRACE(absl::StrCat("top_k ", top_k, " rep ", rep));
      const Query query = RandomScan(rng, top_k);
      const absl::StatusOr<v1::RerankResponse> want = whole_->Rerank(query);
      const absl::StatusOr<v1::RerankResponse> got = sharded->Rerank(query);
      ExpectSameAnswer(got, want);
      if (got.ok()) ties += CrossShardTies(*got);
    }
  }
  // The copies make ties across shards common; without them this test
  // would not check the tie rule.
  EXPECT_GT(ties, 10);
}

TEST_F(ShardedClientLiveTest, RerankMatchesOneServerHoldingEverything) {
  std::unique_ptr<ShardedClient> sharded = Sharded(ShardTargets());
  ASSERT_NE(sharded, nullptr);
  std::mt19937_64 rng(live_->seed + 2);
  std::uniform_int_distribution<int> doc(0, kNumDocs - 1);
  int ties = 0;
  for (int rep = 0; rep < 30; ++rep) {
    SCOPED_TRACE(absl::StrCat("rep ", rep));
    Query query =
        RandomScan(rng, std::uniform_int_distribution<int32_t>(1, 40)(rng));
    // Drawn with replacement: a repeated id goes to its shard twice, which
    // ranks it once, as the single server does.
    const int n = std::uniform_int_distribution<int>(1, 80)(rng);
    for (int i = 0; i < n; ++i) {
      query.candidate_ids.push_back(live_->ids[doc(rng)]);
    }
    const absl::StatusOr<v1::RerankResponse> want = whole_->Rerank(query);
    const absl::StatusOr<v1::RerankResponse> got = sharded->Rerank(query);
    ExpectSameAnswer(got, want);
    if (got.ok()) ties += CrossShardTies(*got);
  }
  EXPECT_GT(ties, 0);
}

TEST_F(ShardedClientLiveTest, ConcurrentCallersGetTheirOwnAnswers) {
  std::unique_ptr<ShardedClient> sharded = Sharded(ShardTargets());
  ASSERT_NE(sharded, nullptr);
  constexpr int kThreads = 4;
  constexpr int kQueries = 8;
  std::mt19937_64 rng(live_->seed + 3);
  std::vector<std::vector<Query>> queries(kThreads);
  std::vector<std::vector<absl::StatusOr<v1::RerankResponse>>> want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int q = 0; q < kQueries; ++q) {
      queries[t].push_back(RandomScan(rng, 10));
      if (q % 2 == 1) {
        for (int i = 0; i < 20; ++i) {
          queries[t].back().candidate_ids.push_back(
              live_->ids[rng() % kNumDocs]);
        }
      }
      want[t].push_back(whole_->Rerank(queries[t].back()));
    }
  }
  std::vector<std::vector<absl::StatusOr<v1::RerankResponse>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (const Query& q : queries[t]) got[t].push_back(sharded->Rerank(q));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int q = 0; q < kQueries; ++q) {
      SCOPED_TRACE(absl::StrCat("thread ", t, " query ", q));
      ExpectSameAnswer(got[t][q], want[t][q]);
    }
  }
}

TEST_F(ShardedClientLiveTest, ShardDownIsUnavailableNamingIt) {
  const std::string down = absl::StrCat("127.0.0.1:", FreePort());
  std::mt19937_64 rng(live_->seed + 4);
  const Query scan = RandomScan(rng, 10);
  {
    std::unique_ptr<ShardedClient> sharded =
        Sharded({live_->shards[0]->target(), down});
    ASSERT_NE(sharded, nullptr);
    EXPECT_THAT(sharded->Rerank(scan),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr(absl::StrCat("shard 1 (", down, "): "))));
    // A rerank whose candidates all live on the shard that is up never
    // calls the one that is down.
    Query rerank = scan;
    rerank.candidate_ids.assign(live_->parts[0].begin(),
                                live_->parts[0].begin() + 30);
    ExpectSameAnswer(sharded->Rerank(rerank), whole_->Rerank(rerank));
    rerank.candidate_ids.push_back(live_->parts[1][0]);
    EXPECT_THAT(sharded->Rerank(rerank),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr(absl::StrCat("shard 1 (", down, ")"))));
  }
  {
    std::unique_ptr<ShardedClient> sharded =
        Sharded({down, live_->shards[1]->target()});
    ASSERT_NE(sharded, nullptr);
    EXPECT_THAT(sharded->Rerank(scan),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr(absl::StrCat("shard 0 (", down, "): "))));
    // Destroyed at once, while the call to the live shard may still be in
    // flight: that call keeps its Client alive until it ends.
  }
  // The shards still answer.
  std::unique_ptr<ShardedClient> sharded = Sharded(ShardTargets());
  ASSERT_NE(sharded, nullptr);
  ExpectSameAnswer(sharded->Rerank(scan), whole_->Rerank(scan));
}

TEST_F(ShardedClientLiveTest, DeadlineBoundsTheWholeFanOut) {
  std::unique_ptr<ShardedClient> sharded =
      Sharded(ShardTargets(), absl::Microseconds(1));
  ASSERT_NE(sharded, nullptr);
  std::mt19937_64 rng(live_->seed + 5);
  EXPECT_THAT(
      sharded->Rerank(RandomScan(rng, 10)),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("shard ")));
}

// The replicas of one shard behind one target: round_robin spreads calls
// over both addresses of an ipv4: list; pick_first (the default) stays on
// the first. The two shard servers stand in for replicas: which half of the
// corpus an answer comes from tells which one served it.
TEST_F(ShardedClientLiveTest, RoundRobinReachesEveryReplica) {
  const std::string replicas =
      absl::StrCat("ipv4:127.0.0.1:", live_->shards[0]->port(),
                   ",127.0.0.1:", live_->shards[1]->port());
  std::mt19937_64 rng(live_->seed + 6);
  const Query scan = RandomScan(rng, 1);
  auto served_by = [&](const std::string& lb_policy) {
    ClientOptions options;
    options.target = replicas;
    options.lb_policy = lb_policy;
    options.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    EXPECT_THAT(client, IsOk());
    absl::flat_hash_set<int> shards;
    for (int i = 0; client.ok() && i < 40; ++i) {
      absl::StatusOr<v1::RerankResponse> got = (*client)->Rerank(scan);
      EXPECT_THAT(got, IsOk());
      if (!got.ok() || got->results_size() != 1) break;
      shards.insert(Crc32Shard(got->results(0).id(), 2));
    }
    return shards;
  };
  EXPECT_EQ(served_by("round_robin").size(), 2u);
  EXPECT_EQ(served_by("").size(), 1u);
  EXPECT_EQ(served_by("pick_first").size(), 1u);

  // A dns:/// name, as for a headless Service, resolved by gRPC itself.
  ClientOptions options;
  options.target = absl::StrCat("dns:///localhost:", live_->shards[0]->port());
  options.lb_policy = "round_robin";
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  MAXSIMD_ASSERT_OK(client);
  for (int i = 0; i < 5; ++i) MAXSIMD_EXPECT_OK((*client)->Rerank(scan));
}

}  // namespace
}  // namespace maxsimd
