// Scheduler: batching window (size, tokens, delay), deadlines, cancellation,
// priority, queue limits, fairness between corpora, draining, and PLAID
// candidate generation run per batch (its centroid product on the host, or
// on a backend that scores centroids, whose failure fails the PLAID
// queries). Timing is driven by a fake clock; the backend records every
// batch it ran and can be held shut so that a test controls when an
// executor is busy.
#include "server/scheduler.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/plaid_search.h"
#include "index/synthetic.h"
#include "kernels/maxsim_cpu.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "server/metrics.h"
#include "tests/support/fake_clock.h"
#include "tests/support/forwarding_backend.h"
#include "tests/support/status_matchers.h"
#include "tests/support/synthetic_plaid.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::FakeClock;
using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// Real time a test waits for something that must happen; only a guard
// against hanging, never part of the timing under test.
constexpr absl::Duration kGuard = absl::Seconds(30);

// Wraps the CPU backend. Each Search() waits while the gate is shut, then
// records the batch it ran. ScoreCentroids, as `product` says: kNone, not
// implemented (the default: the scheduler's host pool runs products);
// kHost, the host's product, as a GPU computes it; kFail, UNAVAILABLE as
// after a device failure. Every call is counted.
class TestBackend final : public testing::ForwardingBackend {
 public:
  enum class Product { kNone, kHost, kFail };

  struct Call {
    int32_t num_queries = 0;
    int32_t dim = 0;
    bool rerank = false;
    int64_t candidates = 0;  // of the whole batch
    std::vector<int32_t> top_k;
  };

  TestBackend() : ForwardingBackend(CpuBackend::Create({}).value()) {
    cpu_ = &inner();
  }
  std::string name() const override { return "test"; }
  const BackendLimits& limits() const override {
    return limits_ ? *limits_ : ForwardingBackend::limits();
  }
  // Limits to report instead of the CPU backend's; set before a scheduler
  // reads them (at construction).
  void SetLimits(const BackendLimits& l) { limits_ = l; }
  // The CPU backend's, so that PLAID corpora can be made on this one.
  bool SupportsDType(DType dtype, int32_t dim) const override {
    return cpu_->SupportsDType(dtype, dim);
  }
  // Set before a scheduler runs products.
  void SetProduct(Product p) { product_ = p; }
  bool ScoresCentroids() const override { return product_ != Product::kNone; }
  absl::Status ScoreCentroids(int shard, const PlaidTablesView& tables,
                              int32_t dim, absl::Span<const float> tokens,
                              absl::Span<float> scores) override {
    product_calls_.fetch_add(1);
    if (product_ == Product::kNone) {
      return ForwardingBackend::ScoreCentroids(shard, tables, dim, tokens,
                                               scores);
    }
    if (product_ == Product::kFail) {
      return absl::UnavailableError("test: the device has failed");
    }
    // The tables are in host memory on the CPU backend.
    const std::vector<float> host =
        testing::HostTablesProduct(tables, dim, tokens);
    std::copy(host.begin(), host.end(), scores.begin());
    return absl::OkStatus();
  }
  int product_calls() const { return product_calls_.load(); }

  absl::Status Search(const SearchParams& p,
                      absl::Span<std::vector<ScoredDoc>> r,
                      SearchTiming* t) override {
    {
      absl::MutexLock lock(&mu_);
      ++entered_;
      if (on_entry_) on_entry_();
      mu_.Await(absl::Condition(&open_));
      Call c;
      c.num_queries = p.num_queries;
      c.dim = p.dim;
      c.rerank = p.candidate_offsets != nullptr;
      if (c.rerank) c.candidates = p.candidate_offsets[p.num_queries];
      c.top_k.assign(p.top_k, p.top_k + p.num_queries);
      calls_.push_back(std::move(c));
    }
    return ForwardingBackend::Search(p, r, t);
  }

  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  // Runs `f` as each later search enters (before the gate); null: nothing.
  void OnEntry(std::function<void()> f) {
    absl::MutexLock lock(&mu_);
    on_entry_ = std::move(f);
  }
  // Waits until `n` searches have started (real-time guard).
  bool WaitForEntered(int n) {
    absl::MutexLock lock(&mu_);
    struct Arg {
      TestBackend* b;
      int n;
    } arg{this, n};
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](Arg* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->b->mu_) {
              return a->b->entered_ >= a->n;
            },
            &arg),
        kGuard);
  }
  int entered() {
    absl::MutexLock lock(&mu_);
    return entered_;
  }
  std::vector<Call> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  // Queries per executed batch, in order.
  std::vector<int> batches() {
    std::vector<int> sizes;
    for (const Call& c : calls()) sizes.push_back(c.num_queries);
    return sizes;
  }
  // The first top_k of every batch, in order (tests tag tasks by top_k).
  std::vector<int> first_top_ks() {
    std::vector<int> k;
    for (const Call& c : calls()) k.push_back(c.top_k.front());
    return k;
  }

 private:
  const Backend* cpu_ = nullptr;  // the wrapped backend
  std::optional<BackendLimits> limits_;
  Product product_ = Product::kNone;
  std::atomic<int> product_calls_{0};
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> on_entry_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
};

// Where one task's answer lands.
struct Result {
  absl::Notification done;
  absl::StatusOr<QueryOutcome> out;
  bool Wait() { return done.WaitForNotificationWithTimeout(kGuard); }
};

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : metrics_(registry_, "test") {
    corpus_ = MakeCorpus("c", 2);
  }

  // A corpus of three one-token documents x, y, z.
  std::shared_ptr<Corpus> MakeCorpus(const std::string& name, int32_t dim) {
    CorpusConfig c;
    c.name = name;
    c.dim = dim;
    auto corpus = Corpus::Create(c, CorpusLimits{}, &backend_).value();
    DocumentBuilder b(c, CorpusLimits{});
    std::vector<float> t(3 * dim, 0.f);
    t[0] = 1;        // x = e0
    t[dim + 1] = 1;  // y = e1
    t[2 * dim] = 1;  // z = e0 + e1
    t[2 * dim + 1] = 1;
    EXPECT_THAT(
        b.Add({"x", "y", "z"}, {1, 1, 1}, t.data(), 3, DType::kFloat32, "m"),
        IsOk());
    EXPECT_THAT(corpus->Append(b.Take()), IsOk());
    return corpus;
  }

  Result* NewResult() { return &results_.emplace_back(); }

  // A scan task of `tokens` query tokens on `corpus` (default: corpus_),
  // tagged by `top_k`, answering into *r.
  QueryTask Task(Result* r, int32_t top_k = 3, int64_t tokens = 1,
                 std::shared_ptr<Corpus> corpus = nullptr) {
    if (corpus == nullptr) corpus = corpus_;
    QueryTask t;
    t.snapshot = corpus->Snapshot();
    const int32_t dim = corpus->config().dim;
    t.query.tokens.assign(tokens * dim, 0.f);
    for (int64_t i = 0; i < tokens; ++i) t.query.tokens[i * dim] = 1.f;
    t.query.num_tokens = tokens;
    t.query.top_k = top_k;
    t.done = [r](absl::StatusOr<QueryOutcome> out) {
      r->out = std::move(out);
      r->done.Notify();
    };
    return t;
  }

  // A rerank task over candidates x and y.
  QueryTask RerankTask(Result* r, int32_t top_k) {
    QueryTask t = Task(r, top_k);
    t.query.scan = false;
    t.query.candidates = {t.snapshot->Find("x").value(),
                          t.snapshot->Find("y").value()};
    return t;
  }

  static std::vector<QueryTask> One(QueryTask t) {
    std::vector<QueryTask> v;
    v.push_back(std::move(t));
    return v;
  }

  // Options with a batching window that only the fake clock ends.
  static SchedulerOptions LongWindow() {
    SchedulerOptions o;
    o.max_queue_delay = absl::Hours(1);
    return o;
  }

  // A PLAID corpus "p" of dim 16: 300 synthetic documents over 16
  // centroids, kept in plaid_synth_.
  std::shared_ptr<Corpus> MakePlaidCorpus() {
    SyntheticCorpusOptions o;
    o.num_docs = 300;
    o.dim = 16;
    o.min_tokens = 2;
    o.max_tokens = 12;
    o.num_clusters = 16;
    plaid_synth_ = GenerateSyntheticCorpus(o);
    return testing::MakeSyntheticPlaidCorpus(&backend_, "p", /*centroids=*/16,
                                             plaid_synth_);
  }

  // A PLAID query of 4 tokens near document `doc` of `corpus` (from
  // MakePlaidCorpus), as DecodeQuery leaves it: a rerank whose candidates
  // are still to be generated. Tagged by `top_k`.
  QueryTask PlaidTask(Result* r, const std::shared_ptr<Corpus>& corpus,
                      int64_t doc, int32_t top_k, int32_t n_full_scores = 30) {
    QueryTask t;
    t.snapshot = corpus->Snapshot();
    t.query.tokens = GenerateQueryForDocument(plaid_synth_, doc, 4, 0.2f, doc);
    t.query.num_tokens = 4;
    t.query.top_k = top_k;
    t.query.scan = false;
    t.query.plaid_search = PlaidSearchParams{2, n_full_scores};
    t.done = [r](absl::StatusOr<QueryOutcome> out) {
      r->out = std::move(out);
      r->done.Notify();
    };
    return t;
  }

  // The value of an unlabelled counter family.
  double Counter(const std::string& name) {
    for (const prometheus::MetricFamily& f : registry_.Collect()) {
      if (f.name == name && !f.metric.empty()) {
        return f.metric.front().counter.value;
      }
    }
    return -1;
  }
  double Products() { return Counter("maxsimd_plaid_centroid_products_total"); }
  double DeviceProducts() {
    return Counter("maxsimd_plaid_device_products_total");
  }
  double Generated() {
    return Counter("maxsimd_plaid_generated_queries_total");
  }

  double Rejected(const std::string& reason) {
    for (const prometheus::MetricFamily& f : registry_.Collect()) {
      if (f.name != "maxsimd_rejected_total") continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        for (const prometheus::ClientMetric::Label& l : m.label) {
          if (l.name == "reason" && l.value == reason) return m.counter.value;
        }
      }
    }
    return 0;
  }

  FakeClock clock_;
  const absl::Time t0_ = clock_.Now();
  prometheus::Registry registry_;
  Metrics metrics_;
  TestBackend backend_;
  std::shared_ptr<Corpus> corpus_;
  SyntheticCorpus plaid_synth_;
  std::deque<Result> results_;  // outlives every scheduler of a test
};

TEST_F(SchedulerTest, RunsAQueryAndReportsItsTiming) {
  backend_.Open();
  Scheduler s(&backend_, SchedulerOptions{}, nullptr);
  Result* r = NewResult();
  ASSERT_THAT(s.Submit(One(Task(r))), IsOk());
  ASSERT_TRUE(r->Wait());
  ASSERT_THAT(r->out, IsOk());
  ASSERT_EQ(r->out->results.size(), 3u);
  // x = (1,0) and z = (1,1) both score 1; x was added first.
  EXPECT_EQ(r->out->results[0].id, "x");
  EXPECT_EQ(r->out->results[1].id, "z");
  EXPECT_EQ(r->out->results[2].id, "y");
  EXPECT_EQ(r->out->batch_queries, 1);
  EXPECT_GE(r->out->compute_ns, 0);
}

TEST_F(SchedulerTest, BatchClosesAtMaxBatchQueries) {
  backend_.Open();
  SchedulerOptions o = LongWindow();
  o.max_batch_queries = 3;
  Scheduler s(&backend_, o, nullptr, &clock_);
  std::vector<Result*> r;
  for (int i = 0; i < 4; ++i) {
    r.push_back(NewResult());
    ASSERT_THAT(s.Submit(One(Task(r[i], /*top_k=*/i + 1))), IsOk());
  }
  // Three queries fill a batch at once, with no time passing.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r[i]->Wait());
  ASSERT_THAT(r[0]->out, IsOk());
  EXPECT_EQ(r[0]->out->batch_queries, 3);
  // The fourth waits for its window.
  ASSERT_TRUE(clock_.WaitForWaiter(t0_ + absl::Hours(1)));
  EXPECT_EQ(s.queued(), 1);
  EXPECT_FALSE(r[3]->done.HasBeenNotified());
  EXPECT_EQ(backend_.batches(), std::vector<int>{3});
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(r[3]->Wait());
  EXPECT_THAT(r[3]->out, IsOk());
  EXPECT_EQ(backend_.batches(), (std::vector<int>{3, 1}));
  EXPECT_EQ(backend_.calls()[0].top_k, (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(SchedulerTest, BatchClosesAtMaxBatchTokens) {
  backend_.Open();
  SchedulerOptions o = LongWindow();
  o.max_batch_tokens = 5;
  Scheduler s(&backend_, o, nullptr, &clock_);
  std::vector<Result*> r;
  for (int i = 0; i < 3; ++i) {
    r.push_back(NewResult());
    ASSERT_THAT(s.Submit(One(Task(r[i], i + 1, /*tokens=*/2))), IsOk());
  }
  // 6 queued tokens reach the limit of 5: the first two queries (4 tokens)
  // run; a third would make 6.
  ASSERT_TRUE(r[0]->Wait());
  ASSERT_TRUE(r[1]->Wait());
  ASSERT_TRUE(clock_.WaitForWaiter(t0_ + absl::Hours(1)));
  EXPECT_EQ(backend_.batches(), std::vector<int>{2});
  EXPECT_EQ(s.queued(), 1);
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(r[2]->Wait());
  EXPECT_EQ(backend_.batches(), (std::vector<int>{2, 1}));
}

TEST_F(SchedulerTest, BatchClosesWhenTheOldestQueryHasWaitedMaxQueueDelay) {
  backend_.Open();
  SchedulerOptions o;
  o.max_queue_delay = absl::Milliseconds(1);
  Scheduler s(&backend_, o, nullptr, &clock_);
  std::vector<Result*> r;
  for (int i = 0; i < 3; ++i) {
    r.push_back(NewResult());
    ASSERT_THAT(s.Submit(One(Task(r[i]))), IsOk());
  }
  ASSERT_TRUE(clock_.WaitForWaiter(t0_ + absl::Milliseconds(1)));
  clock_.Advance(absl::Microseconds(999));
  EXPECT_EQ(s.queued(), 3);
  EXPECT_EQ(backend_.entered(), 0);
  clock_.Advance(absl::Microseconds(1));
  for (Result* x : r) ASSERT_TRUE(x->Wait());
  EXPECT_EQ(backend_.batches(), std::vector<int>{3});
  ASSERT_THAT(r[0]->out, IsOk());
  EXPECT_EQ(r[0]->out->queue_ns, 1000000);  // measured on the fake clock
}

TEST_F(SchedulerTest, ZeroQueueDelayDispatchesAtOnce) {
  backend_.Open();
  SchedulerOptions o;
  o.max_queue_delay = absl::ZeroDuration();
  Scheduler s(&backend_, o, nullptr, &clock_);
  Result* r = NewResult();
  ASSERT_THAT(s.Submit(One(Task(r))), IsOk());
  ASSERT_TRUE(r->Wait());  // the fake clock never moves
  EXPECT_THAT(r->out, IsOk());
  EXPECT_EQ(r->out->queue_ns, 0);
  EXPECT_EQ(backend_.batches(), std::vector<int>{1});
}

TEST_F(SchedulerTest, QueryWhoseDeadlinePassesWhileQueuedNeverRuns) {
  backend_.Open();
  Scheduler s(&backend_, LongWindow(), &metrics_, &clock_);
  Result* late = NewResult();
  Result* patient = NewResult();
  QueryTask t = Task(late, /*top_k=*/1);
  t.deadline = t0_ + absl::Milliseconds(5);
  ASSERT_THAT(s.Submit(One(std::move(t))), IsOk());
  ASSERT_THAT(s.Submit(One(Task(patient, /*top_k=*/2))), IsOk());
  // The executor sleeps until the first deadline, not the window.
  ASSERT_TRUE(clock_.WaitForWaiter(t0_ + absl::Milliseconds(5)));
  EXPECT_FALSE(late->done.HasBeenNotified());
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(late->Wait());
  EXPECT_THAT(late->out, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                  HasSubstr("deadline passed")));
  EXPECT_EQ(s.queued(), 1);
  EXPECT_EQ(Rejected("deadline"), 1);
  s.Shutdown();  // drains the patient query
  EXPECT_THAT(patient->out, IsOk());
  ASSERT_EQ(backend_.calls().size(), 1u);
  EXPECT_EQ(backend_.calls()[0].top_k, std::vector<int32_t>{2});
}

TEST_F(SchedulerTest, QueryThatCannotFinishBeforeItsDeadlineNeverRuns) {
  backend_.Open();
  SchedulerOptions o = LongWindow();
  o.min_execution_time = absl::Milliseconds(10);
  Scheduler s(&backend_, o, nullptr, &clock_);
  Result* hopeless = NewResult();
  Result* tight = NewResult();
  QueryTask a = Task(hopeless, 1);
  a.deadline = t0_ + absl::Milliseconds(5);  // nearer than 10 ms
  QueryTask b = Task(tight, 2);
  b.deadline = t0_ + absl::Milliseconds(20);
  ASSERT_THAT(s.Submit(One(std::move(a))), IsOk());
  ASSERT_THAT(s.Submit(One(std::move(b))), IsOk());
  ASSERT_TRUE(hopeless->Wait());  // without the clock moving
  EXPECT_THAT(hopeless->out, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                      HasSubstr("--min_execution_time")));
  EXPECT_EQ(s.queued(), 1);
  // At t0 + 10 ms the second query has 10 ms left: no longer enough.
  ASSERT_TRUE(clock_.WaitForWaiter(t0_ + absl::Milliseconds(10)));
  clock_.Advance(absl::Milliseconds(10));
  ASSERT_TRUE(tight->Wait());
  EXPECT_THAT(tight->out, StatusIs(absl::StatusCode::kDeadlineExceeded));
  s.Shutdown();
  EXPECT_TRUE(backend_.calls().empty());
}

TEST_F(SchedulerTest, CancelRemovesAQueuedQueryAtOnce) {
  backend_.Open();
  Scheduler s(&backend_, LongWindow(), &metrics_, &clock_);
  const uint64_t key = s.NewCancelKey();
  ASSERT_NE(key, s.NewCancelKey());
  Result* cancelled = NewResult();
  Result* kept = NewResult();
  QueryTask a = Task(cancelled, 1);
  a.cancel_key = key;
  std::vector<QueryTask> tasks;
  tasks.push_back(std::move(a));
  tasks.push_back(Task(kept, 2));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  EXPECT_EQ(s.Cancel(key), 1);
  // Answered by Cancel itself, long before the window closes.
  EXPECT_TRUE(cancelled->done.HasBeenNotified());
  EXPECT_THAT(cancelled->out, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(s.queued(), 1);
  EXPECT_EQ(s.Cancel(key), 0);
  EXPECT_EQ(Rejected("cancelled"), 1);
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(kept->Wait());
  EXPECT_THAT(kept->out, IsOk());
  ASSERT_EQ(backend_.calls().size(), 1u);
  EXPECT_EQ(backend_.calls()[0].top_k, std::vector<int32_t>{2});
}

TEST_F(SchedulerTest, ExpiredAndCancelledQueriesBehindABusyExecutorNeverRun) {
  SchedulerOptions o;
  o.max_queue_delay = absl::ZeroDuration();
  o.max_batch_queries = 1;
  Scheduler s(&backend_, o, &metrics_, &clock_);
  Result* hold = NewResult();
  Result* late = NewResult();
  Result* gone = NewResult();
  std::vector<QueryTask> tasks;
  tasks.push_back(Task(hold, 1));
  QueryTask l = Task(late, 2);
  l.deadline = t0_ + absl::Milliseconds(3);
  tasks.push_back(std::move(l));
  QueryTask g = Task(gone, 3);
  g.is_cancelled = [] { return true; };  // polled when taken into a batch
  tasks.push_back(std::move(g));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  ASSERT_TRUE(backend_.WaitForEntered(1));  // the executor runs `hold`
  clock_.Advance(absl::Milliseconds(5));    // `late` expires in the queue
  backend_.Open();
  for (Result* r : {hold, late, gone}) ASSERT_TRUE(r->Wait());
  EXPECT_THAT(hold->out, IsOk());
  EXPECT_THAT(late->out, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(gone->out, StatusIs(absl::StatusCode::kCancelled));
  s.Shutdown();
  ASSERT_EQ(backend_.calls().size(), 1u);
  EXPECT_EQ(backend_.calls()[0].top_k, std::vector<int32_t>{1});
  EXPECT_EQ(Rejected("deadline"), 1);
  EXPECT_EQ(Rejected("cancelled"), 1);
}

TEST_F(SchedulerTest, QueuedQueryLimitRefusesAtOnceAndRecovers) {
  backend_.Open();
  SchedulerOptions o = LongWindow();
  o.max_queued_queries = 2;
  Scheduler s(&backend_, o, &metrics_, &clock_);
  std::vector<QueryTask> two;
  two.push_back(Task(NewResult()));
  two.push_back(Task(NewResult()));
  ASSERT_THAT(s.Submit(std::move(two)), IsOk());
  Result* over = NewResult();
  EXPECT_THAT(s.Submit(One(Task(over))),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--max_queued_queries is 2")));
  EXPECT_EQ(s.queued(), 2);
  EXPECT_EQ(Rejected("max_queued_queries"), 1);
  clock_.Advance(absl::Hours(1));
  for (Result& r : results_) {
    if (&r != over) {
      ASSERT_TRUE(r.Wait());
    }
  }
  EXPECT_FALSE(over->done.HasBeenNotified());
  Result* again = NewResult();
  ASSERT_THAT(s.Submit(One(Task(again))), IsOk());
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(again->Wait());
  EXPECT_THAT(again->out, IsOk());
}

TEST_F(SchedulerTest, QueuedByteLimitRefusesAtOnceAndRecovers) {
  backend_.Open();
  SchedulerOptions o = LongWindow();
  o.max_queued_bytes = 16;  // two one-token queries of dim 2 (fp32)
  Scheduler s(&backend_, o, &metrics_, &clock_);
  Result* a = NewResult();
  Result* b = NewResult();
  ASSERT_THAT(s.Submit(One(Task(a))), IsOk());
  ASSERT_THAT(s.Submit(One(Task(b))), IsOk());
  EXPECT_EQ(s.queued_bytes(), 16);
  EXPECT_THAT(s.Submit(One(Task(NewResult()))),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--max_queued_bytes is 16")));
  EXPECT_EQ(Rejected("max_queued_bytes"), 1);
  EXPECT_EQ(s.queued(), 2);
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(a->Wait());
  ASSERT_TRUE(b->Wait());
  EXPECT_EQ(s.queued_bytes(), 0);
  ASSERT_THAT(s.Submit(One(Task(NewResult()))), IsOk());
}

TEST_F(SchedulerTest, PerCorpusQueryLimitRefusesOnlyThatCorpus) {
  backend_.Open();
  auto other = MakeCorpus("other", 2);
  SchedulerOptions o = LongWindow();
  o.max_queued_queries_per_corpus = 1;
  Scheduler s(&backend_, o, &metrics_, &clock_);
  Result* first = NewResult();
  ASSERT_THAT(s.Submit(One(Task(first))), IsOk());
  EXPECT_THAT(s.Submit(One(Task(NewResult()))),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--max_queued_queries_per_corpus is 1")));
  // All or nothing: a call touching the full corpus queues nothing.
  std::vector<QueryTask> mixed;
  mixed.push_back(Task(NewResult(), 3, 1, other));
  mixed.push_back(Task(NewResult()));
  EXPECT_THAT(s.Submit(std::move(mixed)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(s.queued("other"), 0);
  Result* elsewhere = NewResult();
  ASSERT_THAT(s.Submit(One(Task(elsewhere, 3, 1, other))), IsOk());
  EXPECT_EQ(s.queued("c"), 1);
  EXPECT_EQ(s.queued("other"), 1);
  EXPECT_EQ(Rejected("max_queued_queries_per_corpus"), 2);
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(first->Wait());
  ASSERT_TRUE(elsewhere->Wait());
  ASSERT_THAT(s.Submit(One(Task(NewResult()))), IsOk());
}

TEST_F(SchedulerTest, PerCorpusByteLimitRefusesOnlyThatCorpus) {
  backend_.Open();
  auto other = MakeCorpus("other", 2);
  SchedulerOptions o = LongWindow();
  o.max_queued_bytes_per_corpus = 24;  // three tokens of dim 2
  Scheduler s(&backend_, o, &metrics_, &clock_);
  Result* big = NewResult();
  ASSERT_THAT(s.Submit(One(Task(big, 3, /*tokens=*/2))), IsOk());  // 16 B
  EXPECT_THAT(s.Submit(One(Task(NewResult(), 3, /*tokens=*/2))),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--max_queued_bytes_per_corpus is 24")));
  Result* small = NewResult();
  ASSERT_THAT(s.Submit(One(Task(small, 3, /*tokens=*/1))), IsOk());  // 24 B
  Result* elsewhere = NewResult();
  ASSERT_THAT(s.Submit(One(Task(elsewhere, 3, 2, other))), IsOk());
  EXPECT_EQ(Rejected("max_queued_bytes_per_corpus"), 1);
  EXPECT_EQ(s.queued_bytes(), 40);
  clock_.Advance(absl::Hours(1));
  for (Result* r : {big, small, elsewhere}) ASSERT_TRUE(r->Wait());
  ASSERT_THAT(s.Submit(One(Task(NewResult(), 3, 2))), IsOk());
}

TEST_F(SchedulerTest, FloodOnOneCorpusDoesNotStarveAnother) {
  auto flood = MakeCorpus("a", 2);
  auto quiet = MakeCorpus("b", 3);
  SchedulerOptions o;
  o.max_queue_delay = absl::ZeroDuration();
  o.max_batch_queries = 2;
  Scheduler s(&backend_, o, nullptr, &clock_);
  std::vector<QueryTask> burst;
  for (int i = 0; i < 10; ++i) burst.push_back(Task(NewResult(), 3, 1, flood));
  ASSERT_THAT(s.Submit(std::move(burst)), IsOk());
  ASSERT_TRUE(backend_.WaitForEntered(1));  // the executor holds 2 of them
  Result* b = NewResult();
  ASSERT_THAT(s.Submit(One(Task(b, 3, 1, quiet))), IsOk());
  backend_.Open();
  for (Result& r : results_) ASSERT_TRUE(r.Wait());
  std::vector<int32_t> dims;
  for (const TestBackend::Call& c : backend_.calls()) dims.push_back(c.dim);
  // Corpus b (dim 3) runs right after the batch in flight, not after the
  // other eight queries of corpus a (dim 2).
  EXPECT_THAT(dims, ElementsAre(2, 3, 2, 2, 2, 2));
}

TEST_F(SchedulerTest, HigherPriorityRunsFirstAndFifoWithinAPriority) {
  SchedulerOptions o;
  o.max_queue_delay = absl::ZeroDuration();
  o.max_batch_queries = 1;
  Scheduler s(&backend_, o, nullptr, &clock_);
  ASSERT_THAT(s.Submit(One(Task(NewResult(), 1))), IsOk());
  ASSERT_TRUE(backend_.WaitForEntered(1));
  // top_k tags the task; priority in parentheses.
  const std::vector<std::pair<int32_t, int32_t>> tasks = {
      {2, 0}, {3, 5}, {4, 0}, {5, 5}, {6, -1}};
  for (const auto& [tag, priority] : tasks) {
    QueryTask t = Task(NewResult(), tag);
    t.priority = priority;
    ASSERT_THAT(s.Submit(One(std::move(t))), IsOk());
  }
  backend_.Open();
  for (Result& r : results_) ASSERT_TRUE(r.Wait());
  EXPECT_THAT(backend_.first_top_ks(), ElementsAre(1, 3, 5, 2, 4, 6));
}

TEST_F(SchedulerTest, ScanAndRerankQueriesBatchSeparately) {
  backend_.Open();
  Scheduler s(&backend_, LongWindow(), nullptr, &clock_);
  std::vector<QueryTask> tasks;
  tasks.push_back(Task(NewResult(), 1));
  tasks.push_back(RerankTask(NewResult(), 2));
  tasks.push_back(Task(NewResult(), 3));
  tasks.push_back(RerankTask(NewResult(), 4));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  clock_.Advance(absl::Hours(1));
  for (Result& r : results_) ASSERT_TRUE(r.Wait());
  for (Result& r : results_) EXPECT_THAT(r.out, IsOk());
  std::vector<std::pair<bool, std::vector<int32_t>>> batches;
  for (const TestBackend::Call& c : backend_.calls()) {
    batches.emplace_back(c.rerank, c.top_k);
  }
  EXPECT_THAT(batches, UnorderedElementsAre(
                           std::make_pair(false, std::vector<int32_t>{1, 3}),
                           std::make_pair(true, std::vector<int32_t>{2, 4})));
}

TEST_F(SchedulerTest, ScanLaneStaysOpenWhileMaxRunningScansRun) {
  SchedulerOptions o;
  o.num_executors = 2;
  o.max_queue_delay = absl::ZeroDuration();
  o.max_running_scans = 1;
  Scheduler s(&backend_, o, nullptr, &clock_);
  ASSERT_THAT(s.Submit(One(Task(NewResult(), 1))), IsOk());
  ASSERT_TRUE(backend_.WaitForEntered(1));
  // One scan runs: the next two wait in their lane although their window
  // is 0 and an executor is idle; a rerank is not held.
  ASSERT_THAT(s.Submit(One(Task(NewResult(), 2))), IsOk());
  ASSERT_THAT(s.Submit(One(Task(NewResult(), 3))), IsOk());
  ASSERT_THAT(s.Submit(One(RerankTask(NewResult(), 4))), IsOk());
  ASSERT_TRUE(backend_.WaitForEntered(2));
  EXPECT_EQ(s.queued(), 2);
  backend_.Open();
  for (Result& r : results_) ASSERT_TRUE(r.Wait());
  for (Result& r : results_) EXPECT_THAT(r.out, IsOk());
  std::vector<std::vector<int32_t>> scans;
  for (const TestBackend::Call& c : backend_.calls()) {
    if (!c.rerank) scans.push_back(c.top_k);
  }
  // The held queries close as one batch when the running scan returns.
  EXPECT_EQ(scans, (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  s.Shutdown();
}

TEST_F(SchedulerTest, ScanLeadClosesTheNextScanBeforeTheRunningOneReturns) {
  backend_.Open();
  SchedulerOptions o;
  o.num_executors = 2;
  o.max_queue_delay = absl::ZeroDuration();
  o.max_running_scans = 1;
  o.scan_lead = absl::Milliseconds(2);
  Scheduler s(&backend_, o, nullptr, &clock_);
  // A first scan of one query takes 10 ms of backend time: the corpus's
  // cost per query.
  backend_.OnEntry([this] { clock_.Advance(absl::Milliseconds(10)); });
  Result* first = NewResult();
  ASSERT_THAT(s.Submit(One(Task(first, 1))), IsOk());
  ASSERT_TRUE(first->Wait());
  backend_.OnEntry(nullptr);
  backend_.Close();
  // The second is expected back 10 ms after it starts; the third may close
  // 2 ms before that, not sooner.
  ASSERT_THAT(s.Submit(One(Task(NewResult(), 2))), IsOk());
  ASSERT_TRUE(backend_.WaitForEntered(2));
  ASSERT_THAT(s.Submit(One(Task(NewResult(), 3))), IsOk());
  // The idle executor sleeps until the gate opens.
  ASSERT_TRUE(clock_.WaitForWaiter(clock_.Now() + absl::Milliseconds(8)));
  clock_.Advance(absl::Milliseconds(7));
  EXPECT_EQ(backend_.entered(), 2);
  EXPECT_EQ(s.queued(), 1);
  clock_.Advance(absl::Milliseconds(1));
  // The second scan is still in the backend.
  ASSERT_TRUE(backend_.WaitForEntered(3));
  EXPECT_EQ(s.queued(), 0);
  backend_.Open();
  for (Result& r : results_) ASSERT_TRUE(r.Wait());
  for (Result& r : results_) EXPECT_THAT(r.out, IsOk());
  // Three batches of one query each (the last two leave the gate in
  // either order).
  EXPECT_THAT(backend_.first_top_ks(), UnorderedElementsAre(1, 2, 3));
  s.Shutdown();
}

TEST_F(SchedulerTest, BatchesQueuedQueriesOfOneSnapshot) {
  SchedulerOptions o;
  o.max_queue_delay = absl::ZeroDuration();
  Scheduler s(&backend_, o, nullptr, &clock_);
  ASSERT_THAT(s.Submit(One(Task(NewResult()))), IsOk());
  ASSERT_TRUE(backend_.WaitForEntered(1));
  for (int i = 0; i < 5; ++i)
    ASSERT_THAT(s.Submit(One(Task(NewResult()))), IsOk());
  backend_.Open();
  for (Result& r : results_) ASSERT_TRUE(r.Wait());
  EXPECT_EQ(backend_.batches(), (std::vector<int>{1, 5}));
  ASSERT_THAT(results_[3].out, IsOk());
  EXPECT_EQ(results_[3].out->batch_queries, 5);
}

TEST_F(SchedulerTest, ShutdownDrainsQueuedWorkThenRefusesNewWork) {
  backend_.Open();
  Scheduler s(&backend_, LongWindow(), &metrics_, &clock_);
  std::vector<QueryTask> tasks;
  tasks.push_back(Task(NewResult()));
  tasks.push_back(Task(NewResult()));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  s.Shutdown();  // without waiting for the window
  EXPECT_TRUE(results_[0].done.HasBeenNotified());
  EXPECT_TRUE(results_[1].done.HasBeenNotified());
  EXPECT_THAT(results_[0].out, IsOk());
  EXPECT_EQ(s.queued(), 0);
  EXPECT_THAT(s.Submit(One(Task(NewResult()))),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Rejected("draining"), 1);
}

TEST_F(SchedulerTest, RealClockRunsQueriesWithTheDefaultWindow) {
  backend_.Open();
  Scheduler s(&backend_, SchedulerOptions{}, nullptr);  // RealClock()
  std::vector<QueryTask> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(Task(NewResult()));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  for (Result& r : results_) ASSERT_TRUE(r.Wait());
  EXPECT_EQ(backend_.batches(), std::vector<int>{3});
}

TEST_F(SchedulerTest, SpinningExecutorRunsWorkThenSleepsAndServesLaterWork) {
  backend_.Open();
  SchedulerOptions o;
  o.max_queue_delay = absl::ZeroDuration();
  o.idle_spin = absl::Milliseconds(1);
  o.num_executors = 2;
  Scheduler s(&backend_, o, nullptr, &clock_);
  Result* first = NewResult();
  ASSERT_THAT(s.Submit(One(Task(first, 1))), IsOk());
  ASSERT_TRUE(first->Wait());
  // The spin ends on the fake clock; the executors then sleep and must still
  // wake for new work.
  clock_.Advance(absl::Seconds(1));
  Result* second = NewResult();
  ASSERT_THAT(s.Submit(One(Task(second, 2))), IsOk());
  ASSERT_TRUE(second->Wait());
  EXPECT_THAT(second->out, IsOk());
  EXPECT_EQ(backend_.first_top_ks(), (std::vector<int>{1, 2}));
}

TEST_F(SchedulerTest, SpinningExecutorsServeConcurrentSubmitsAndShutDown) {
  backend_.Open();
  SchedulerOptions o;
  o.max_queue_delay = absl::ZeroDuration();
  o.idle_spin = absl::Hours(1);  // only new work or Shutdown() ends it
  o.num_executors = 3;
  {
    Scheduler s(&backend_, o, nullptr);  // RealClock()
    std::vector<std::thread> senders;
    for (int t = 0; t < 4; ++t) {
      std::vector<Result*> mine;
      for (int i = 0; i < 25; ++i) mine.push_back(NewResult());
      senders.emplace_back([&s, this, mine] {
        for (Result* r : mine) {
          EXPECT_THAT(s.Submit(One(Task(r))), IsOk());
          EXPECT_TRUE(r->Wait());
        }
      });
    }
    for (std::thread& t : senders) t.join();
  }  // ~Scheduler: Shutdown() must end the spin
  int queries = 0;
  for (int b : backend_.batches()) queries += b;
  EXPECT_EQ(queries, 100);
  for (Result& r : results_) EXPECT_THAT(r.out, IsOk());
}

// N PLAID queries of one Submit run as one batch with one centroid product
// for all of them, and each ranks as it does alone.
TEST_F(SchedulerTest, PlaidQueriesOfOneBatchShareOneCentroidProduct) {
  backend_.Open();
  auto plaid = MakePlaidCorpus();
  constexpr int kN = 5;
  std::vector<Result*> together;
  {
    SchedulerOptions o = LongWindow();
    o.max_batch_queries = kN;
    Scheduler s(&backend_, o, &metrics_, &clock_);
    std::vector<QueryTask> tasks;
    for (int i = 0; i < kN; ++i) {
      together.push_back(NewResult());
      tasks.push_back(PlaidTask(together[i], plaid, i * 37, /*top_k=*/5));
    }
    ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
    for (Result* r : together) ASSERT_TRUE(r->Wait());  // a full batch
  }
  ASSERT_EQ(backend_.calls().size(), 1u);
  EXPECT_EQ(backend_.calls()[0].num_queries, kN);
  EXPECT_TRUE(backend_.calls()[0].rerank);
  EXPECT_GT(backend_.calls()[0].candidates, 0);
  EXPECT_EQ(Products(), 1);
  EXPECT_EQ(Generated(), kN);

  SchedulerOptions alone;
  alone.max_queue_delay = absl::ZeroDuration();
  Scheduler s(&backend_, alone, &metrics_, &clock_);
  for (int i = 0; i < kN; ++i) {
    Result* r = NewResult();
    ASSERT_THAT(s.Submit(One(PlaidTask(r, plaid, i * 37, 5))), IsOk());
    ASSERT_TRUE(r->Wait());
    ASSERT_THAT(r->out, IsOk());
    ASSERT_THAT(together[i]->out, IsOk());
    EXPECT_EQ(r->out->batch_queries, 1);
    EXPECT_EQ(together[i]->out->batch_queries, kN);
    ASSERT_EQ(r->out->results.size(), 5u) << "query " << i;
    ASSERT_EQ(together[i]->out->results.size(), 5u) << "query " << i;
    for (size_t j = 0; j < 5; ++j) {
      EXPECT_EQ(together[i]->out->results[j].id, r->out->results[j].id)
          << "query " << i << " rank " << j;
      EXPECT_EQ(together[i]->out->results[j].score, r->out->results[j].score)
          << "query " << i << " rank " << j;
    }
  }
  EXPECT_EQ(Products(), 1 + kN);
  EXPECT_EQ(Generated(), 2 * kN);
}

// On a backend that scores centroids a batch's product runs there, once
// (the host pool never runs one), and the queries rank as they do with the
// host's product; on one that does not, the backend is never asked.
TEST_F(SchedulerTest, PlaidProductRunsOnABackendThatScoresCentroids) {
  backend_.Open();
  auto plaid = MakePlaidCorpus();
  constexpr int kN = 4;
  std::vector<Result*> runs[2];  // [0]: host product, [1]: the backend's
  for (int on_backend : {0, 1}) {
    backend_.SetProduct(on_backend ? TestBackend::Product::kHost
                                   : TestBackend::Product::kNone);
    SchedulerOptions o = LongWindow();
    o.max_batch_queries = kN;
    Scheduler s(&backend_, o, &metrics_, &clock_);
    std::vector<QueryTask> tasks;
    for (int i = 0; i < kN; ++i) {
      runs[on_backend].push_back(NewResult());
      tasks.push_back(
          PlaidTask(runs[on_backend][i], plaid, i * 53, /*top_k=*/5));
    }
    ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
    for (Result* r : runs[on_backend]) ASSERT_TRUE(r->Wait());
    EXPECT_EQ(backend_.product_calls(), on_backend);
    EXPECT_EQ(DeviceProducts(), on_backend);
  }
  EXPECT_EQ(Products(), 2);
  EXPECT_EQ(Generated(), 2 * kN);
  EXPECT_EQ(backend_.batches(), (std::vector<int>{kN, kN}));
  for (int i = 0; i < kN; ++i) {
    ASSERT_THAT(runs[0][i]->out, IsOk());
    ASSERT_THAT(runs[1][i]->out, IsOk());
    const auto& want = runs[0][i]->out->results;
    const auto& got = runs[1][i]->out->results;
    ASSERT_EQ(got.size(), want.size()) << "query " << i;
    EXPECT_FALSE(got.empty()) << "query " << i;
    for (size_t j = 0; j < got.size(); ++j) {
      EXPECT_EQ(got[j].id, want[j].id) << "query " << i << " rank " << j;
      EXPECT_EQ(got[j].score, want[j].score) << "query " << i << " rank " << j;
    }
  }
}

// A product that fails on the backend answers the PLAID queries of its
// batch with the backend's error, without a host product; the batch's
// reranks with candidates still run. A batch of PLAID queries alone then
// runs no search.
TEST_F(SchedulerTest, FailedPlaidProductFailsOnlyThePlaidQueriesOfItsBatch) {
  backend_.Open();
  auto plaid = MakePlaidCorpus();
  backend_.SetProduct(TestBackend::Product::kFail);
  Scheduler s(&backend_, LongWindow(), &metrics_, &clock_);
  Result* generated = NewResult();
  Result* given = NewResult();
  std::vector<QueryTask> tasks;
  tasks.push_back(PlaidTask(generated, plaid, 1, /*top_k=*/3));
  QueryTask t = PlaidTask(given, plaid, 2, /*top_k=*/2);
  t.query.plaid_search.reset();
  t.query.candidates = {t.snapshot->Find(plaid_synth_.ids[2]).value(),
                        t.snapshot->Find(plaid_synth_.ids[7]).value()};
  tasks.push_back(std::move(t));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(generated->Wait());
  ASSERT_TRUE(given->Wait());
  EXPECT_THAT(generated->out, StatusIs(absl::StatusCode::kUnavailable,
                                       HasSubstr("the device has failed")));
  ASSERT_THAT(given->out, IsOk());
  EXPECT_EQ(given->out->results.size(), 2u);
  EXPECT_EQ(backend_.product_calls(), 1);
  EXPECT_EQ(Products(), 0);
  EXPECT_EQ(Generated(), 0);
  ASSERT_EQ(backend_.calls().size(), 1u);
  EXPECT_EQ(backend_.calls()[0].top_k, std::vector<int32_t>{2});

  Result* alone = NewResult();
  ASSERT_THAT(s.Submit(One(PlaidTask(alone, plaid, 4, /*top_k=*/1))), IsOk());
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(alone->Wait());
  EXPECT_THAT(alone->out, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(backend_.product_calls(), 2);
  EXPECT_EQ(backend_.calls().size(), 1u);
}

// A PLAID query whose deadline passes while it is queued is answered
// DEADLINE_EXCEEDED without its candidates ever being generated: alone
// (no product at all), and when the deadline passes as its batch's window
// closes (the batch generates for its other query only).
TEST_F(SchedulerTest,
       PlaidQueryWhoseDeadlinePassesWhileQueuedIsNeverGenerated) {
  backend_.Open();
  auto plaid = MakePlaidCorpus();
  {
    Scheduler s(&backend_, LongWindow(), &metrics_, &clock_);
    Result* late = NewResult();
    QueryTask t = PlaidTask(late, plaid, 1, /*top_k=*/1);
    t.deadline = t0_ + absl::Milliseconds(5);
    ASSERT_THAT(s.Submit(One(std::move(t))), IsOk());
    ASSERT_TRUE(clock_.WaitForWaiter(t0_ + absl::Milliseconds(5)));
    clock_.Advance(absl::Milliseconds(5));
    ASSERT_TRUE(late->Wait());
    EXPECT_THAT(late->out, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    HasSubstr("deadline passed")));
    EXPECT_EQ(Products(), 0);
    EXPECT_EQ(Generated(), 0);
  }
  EXPECT_TRUE(backend_.calls().empty());

  SchedulerOptions o;
  o.max_queue_delay = absl::Milliseconds(1);
  Scheduler s(&backend_, o, &metrics_, &clock_);
  const absl::Time t1 = clock_.Now();
  Result* late = NewResult();
  Result* patient = NewResult();
  std::vector<QueryTask> tasks;
  QueryTask t = PlaidTask(late, plaid, 2, /*top_k=*/2);
  t.deadline = t1 + absl::Milliseconds(1);
  tasks.push_back(std::move(t));
  tasks.push_back(PlaidTask(patient, plaid, 3, /*top_k=*/3));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  ASSERT_TRUE(clock_.WaitForWaiter(t1 + absl::Milliseconds(1)));
  clock_.Advance(absl::Milliseconds(1));  // the deadline and the window
  ASSERT_TRUE(late->Wait());
  ASSERT_TRUE(patient->Wait());
  EXPECT_THAT(late->out, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(patient->out, IsOk());
  EXPECT_EQ(Products(), 1);
  EXPECT_EQ(Generated(), 1);
  ASSERT_EQ(backend_.calls().size(), 1u);
  EXPECT_EQ(backend_.calls()[0].top_k, std::vector<int32_t>{3});
  EXPECT_EQ(Rejected("deadline"), 2);
}

// A cancelled PLAID query is answered CANCELLED without its candidates
// ever being generated: withdrawn by Cancel() while queued, or found
// cancelled when its batch is taken (its batch generates for the others).
TEST_F(SchedulerTest, CancelledPlaidQueryIsNeverGenerated) {
  backend_.Open();
  auto plaid = MakePlaidCorpus();
  Scheduler s(&backend_, LongWindow(), &metrics_, &clock_);
  const uint64_t key = s.NewCancelKey();
  Result* withdrawn = NewResult();
  QueryTask w = PlaidTask(withdrawn, plaid, 1, /*top_k=*/1);
  w.cancel_key = key;
  ASSERT_THAT(s.Submit(One(std::move(w))), IsOk());
  EXPECT_EQ(s.Cancel(key), 1);
  EXPECT_THAT(withdrawn->out, StatusIs(absl::StatusCode::kCancelled));

  Result* gone = NewResult();
  Result* kept = NewResult();
  std::vector<QueryTask> tasks;
  QueryTask g = PlaidTask(gone, plaid, 2, /*top_k=*/2);
  g.is_cancelled = [] { return true; };  // polled when taken into a batch
  tasks.push_back(std::move(g));
  tasks.push_back(PlaidTask(kept, plaid, 3, /*top_k=*/3));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  EXPECT_EQ(Products(), 0);
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(gone->Wait());
  ASSERT_TRUE(kept->Wait());
  EXPECT_THAT(gone->out, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(kept->out, IsOk());
  EXPECT_EQ(Products(), 1);
  EXPECT_EQ(Generated(), 1);
  ASSERT_EQ(backend_.calls().size(), 1u);
  EXPECT_EQ(backend_.calls()[0].top_k, std::vector<int32_t>{3});
  EXPECT_EQ(Rejected("cancelled"), 2);
}

// A PLAID query waiting for generation counts its n_full_scores as its
// candidates: the lane is ready at the backend's max_batch_candidates, and
// a batch takes no more pending queries than generation could fill up to
// that limit.
TEST_F(SchedulerTest, PendingPlaidQueriesCountTheirFullScoresAsCandidates) {
  BackendLimits limits = backend_.limits();
  limits.max_batch_candidates = 50;
  backend_.SetLimits(limits);
  backend_.Open();
  auto plaid = MakePlaidCorpus();
  Scheduler s(&backend_, LongWindow(), &metrics_, &clock_);
  std::vector<Result*> r;
  std::vector<QueryTask> tasks;
  for (int i = 0; i < 3; ++i) {
    r.push_back(NewResult());
    tasks.push_back(PlaidTask(r[i], plaid, i * 11, /*top_k=*/i + 1,
                              /*n_full_scores=*/20));
  }
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  // 60 pending candidates reach the limit of 50 with no time passing: the
  // first two queries (40) run; a third would make 60.
  ASSERT_TRUE(r[0]->Wait());
  ASSERT_TRUE(r[1]->Wait());
  ASSERT_TRUE(clock_.WaitForWaiter(t0_ + absl::Hours(1)));
  EXPECT_EQ(backend_.batches(), std::vector<int>{2});
  EXPECT_EQ(s.queued(), 1);
  EXPECT_GT(backend_.calls()[0].candidates, 0);
  EXPECT_LE(backend_.calls()[0].candidates, 40);
  clock_.Advance(absl::Hours(1));
  ASSERT_TRUE(r[2]->Wait());
  EXPECT_THAT(r[2]->out, IsOk());
  EXPECT_EQ(backend_.batches(), (std::vector<int>{2, 1}));
  EXPECT_EQ(Products(), 2);
  EXPECT_EQ(Generated(), 3);
}

TEST(SchedulerOptionsTest, ValidationNamesTheFlag) {
  EXPECT_THAT(ValidateSchedulerOptions(SchedulerOptions{}), IsOk());
  struct Case {
    void (*set)(SchedulerOptions&);
    const char* flag;
  };
  const Case cases[] = {
      {[](SchedulerOptions& o) { o.num_executors = 0; }, "--executors"},
      {[](SchedulerOptions& o) { o.max_batch_queries = 0; },
       "--batch_max_queries"},
      {[](SchedulerOptions& o) { o.max_batch_tokens = 0; },
       "--batch_max_tokens"},
      {[](SchedulerOptions& o) { o.max_queue_delay = -absl::Milliseconds(1); },
       "--max_queue_delay"},
      {[](SchedulerOptions& o) {
         o.min_execution_time = absl::InfiniteDuration();
       },
       "--min_execution_time"},
      {[](SchedulerOptions& o) { o.idle_spin = -absl::Microseconds(1); },
       "--executor_spin"},
      {[](SchedulerOptions& o) { o.max_running_scans = -1; },
       "--max_running_scans"},
      {[](SchedulerOptions& o) { o.scan_lead = -absl::Milliseconds(1); },
       "--scan_lead"},
      {[](SchedulerOptions& o) { o.max_queued_queries = 0; },
       "--max_queued_queries"},
      {[](SchedulerOptions& o) { o.max_queued_bytes = 0; },
       "--max_queued_bytes"},
      {[](SchedulerOptions& o) { o.max_queued_queries_per_corpus = -1; },
       "--max_queued_queries_per_corpus"},
      {[](SchedulerOptions& o) { o.max_queued_bytes_per_corpus = -1; },
       "--max_queued_bytes_per_corpus"},
  };
  for (const Case& c : cases) {
    SchedulerOptions o;
    c.set(o);
    EXPECT_THAT(ValidateSchedulerOptions(o),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(std::string(c.flag) + " must be")));
  }
}

}  // namespace
}  // namespace maxsimd
