// Scheduler: queue limit, expiry, cancellation, batching and draining, with
// a backend whose searches the test can hold back.
#include "server/scheduler.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "kernels/maxsim_cpu.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;

// Wraps the CPU backend; each Search() waits until the test opens the gate
// and records the batch size it saw.
class GatedBackend final : public Backend {
 public:
  GatedBackend() : cpu_(CpuBackend::Create({}).value()) {}
  std::string name() const override { return "gated"; }
  const BackendLimits& limits() const override { return cpu_->limits(); }
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Upload(const void* h,
                                                         size_t n) override {
    return cpu_->Upload(h, n);
  }
  absl::Status Search(const SearchParams& p,
                      absl::Span<std::vector<ScoredDoc>> r,
                      SearchTiming* t) override {
    entered_.fetch_add(1);
    gate_.WaitForNotification();
    batches_.push_back(p.num_queries);
    return cpu_->Search(p, r, t);
  }
  bool healthy() const override { return true; }

  void Open() { gate_.Notify(); }
  int entered() const { return entered_.load(); }
  std::vector<int> batches_;  // written by the one executor only

 private:
  std::unique_ptr<CpuBackend> cpu_;
  absl::Notification gate_;
  std::atomic<int> entered_{0};
};

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() {
    CorpusConfig c;
    c.name = "c";
    c.dim = 2;
    corpus_ = Corpus::Create(c, CorpusLimits{}, &backend_).value();
    DocumentBuilder b(c, CorpusLimits{});
    const std::vector<float> t{1, 0, 0, 1, 1, 1};
    EXPECT_THAT(
        b.Add({"x", "y", "z"}, {1, 1, 1}, t.data(), 3, DType::kFloat32, "m"),
        IsOk());
    EXPECT_THAT(corpus_->Append(b.Take()), IsOk());
  }

  // A scan task whose outcome lands in *out.
  QueryTask Task(absl::StatusOr<QueryOutcome>* out, absl::Notification* done) {
    QueryTask t;
    t.snapshot = corpus_->Snapshot();
    t.query.tokens = {1.f, 0.f};
    t.query.num_tokens = 1;
    t.query.top_k = 3;
    t.done = [out, done](absl::StatusOr<QueryOutcome> r) {
      *out = std::move(r);
      done->Notify();
    };
    return t;
  }

  GatedBackend backend_;
  std::shared_ptr<Corpus> corpus_;
};

TEST_F(SchedulerTest, RunsAQueryAndReportsItsTiming) {
  backend_.Open();
  Scheduler s(&backend_, SchedulerOptions{}, nullptr);
  absl::StatusOr<QueryOutcome> out;
  absl::Notification done;
  std::vector<QueryTask> tasks;
  tasks.push_back(Task(&out, &done));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  done.WaitForNotification();
  ASSERT_THAT(out, IsOk());
  ASSERT_EQ(out->results.size(), 3u);
  // x = (1,0) and z = (1,1) both score 1; x was added first.
  EXPECT_EQ(out->results[0].id, "x");
  EXPECT_EQ(out->results[1].id, "z");
  EXPECT_EQ(out->results[2].id, "y");
  EXPECT_EQ(out->batch_queries, 1);
  EXPECT_GE(out->compute_ns, 0);
}

TEST_F(SchedulerTest, RejectsBeyondTheQueueLimitAtOnce) {
  SchedulerOptions o;
  o.max_queued_queries = 2;
  Scheduler s(&backend_, o, nullptr);
  std::vector<absl::StatusOr<QueryOutcome>> out(4);
  std::vector<absl::Notification> done(4);
  std::vector<QueryTask> first;
  first.push_back(Task(&out[0], &done[0]));
  ASSERT_THAT(s.Submit(std::move(first)), IsOk());
  while (backend_.entered() == 0) absl::SleepFor(absl::Milliseconds(1));
  // The executor holds task 0; two more fill the queue, a third is refused.
  for (int i = 1; i <= 2; ++i) {
    std::vector<QueryTask> t;
    t.push_back(Task(&out[i], &done[i]));
    ASSERT_THAT(s.Submit(std::move(t)), IsOk());
  }
  std::vector<QueryTask> over;
  over.push_back(Task(&out[3], &done[3]));
  EXPECT_THAT(s.Submit(std::move(over)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(s.queued(), 2);
  backend_.Open();
  for (int i = 0; i <= 2; ++i) {
    done[i].WaitForNotification();
    EXPECT_THAT(out[i], IsOk());
  }
  EXPECT_FALSE(done[3].HasBeenNotified());
}

TEST_F(SchedulerTest, ExpiredAndCancelledQueriesNeverRun) {
  Scheduler s(&backend_, SchedulerOptions{}, nullptr);
  std::vector<absl::StatusOr<QueryOutcome>> out(3);
  std::vector<absl::Notification> done(3);
  std::vector<QueryTask> hold;
  hold.push_back(Task(&out[0], &done[0]));
  ASSERT_THAT(s.Submit(std::move(hold)), IsOk());
  while (backend_.entered() == 0) absl::SleepFor(absl::Milliseconds(1));
  std::vector<QueryTask> tasks;
  tasks.push_back(Task(&out[1], &done[1]));
  tasks.back().deadline = absl::Now() + absl::Milliseconds(1);
  tasks.push_back(Task(&out[2], &done[2]));
  tasks.back().is_cancelled = [] { return true; };
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  absl::SleepFor(absl::Milliseconds(5));  // let the deadline pass
  backend_.Open();
  for (auto& d : done) d.WaitForNotification();
  EXPECT_THAT(out[0], IsOk());
  EXPECT_THAT(out[1], StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(out[2], StatusIs(absl::StatusCode::kCancelled));
  s.Shutdown();
  EXPECT_EQ(backend_.batches_, std::vector<int>{1});  // only task 0 ran
}

TEST_F(SchedulerTest, BatchesQueuedQueriesOfOneSnapshot) {
  Scheduler s(&backend_, SchedulerOptions{}, nullptr);
  std::vector<absl::StatusOr<QueryOutcome>> out(6);
  std::vector<absl::Notification> done(6);
  std::vector<QueryTask> hold;
  hold.push_back(Task(&out[0], &done[0]));
  ASSERT_THAT(s.Submit(std::move(hold)), IsOk());
  while (backend_.entered() == 0) absl::SleepFor(absl::Milliseconds(1));
  for (int i = 1; i < 6; ++i) {
    std::vector<QueryTask> t;
    t.push_back(Task(&out[i], &done[i]));
    ASSERT_THAT(s.Submit(std::move(t)), IsOk());
  }
  backend_.Open();
  for (auto& d : done) d.WaitForNotification();
  s.Shutdown();
  EXPECT_EQ(backend_.batches_, (std::vector<int>{1, 5}));
  EXPECT_EQ(out[3]->batch_queries, 5);
}

TEST_F(SchedulerTest, ShutdownDrainsQueuedWorkThenRefusesNewWork) {
  Scheduler s(&backend_, SchedulerOptions{}, nullptr);
  std::vector<absl::StatusOr<QueryOutcome>> out(3);
  std::vector<absl::Notification> done(3);
  std::vector<QueryTask> tasks;
  for (int i = 0; i < 2; ++i) tasks.push_back(Task(&out[i], &done[i]));
  ASSERT_THAT(s.Submit(std::move(tasks)), IsOk());
  backend_.Open();
  s.Shutdown();
  EXPECT_TRUE(done[0].HasBeenNotified());
  EXPECT_TRUE(done[1].HasBeenNotified());
  std::vector<QueryTask> late;
  late.push_back(Task(&out[2], &done[2]));
  EXPECT_THAT(s.Submit(std::move(late)),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace maxsimd
