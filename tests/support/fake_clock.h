// A Clock for tests: time moves only when the test calls Advance(), and
// AwaitWithDeadline() returns when its condition holds or Advance() reaches
// its deadline, so batching windows and deadlines are tested without real
// sleeps. WaitForWaiter() lets a test wait until a thread is blocked on a
// given fake deadline, which is how a test knows that the scheduler has
// looked at its queue and decided to wait.
//
// Thread-safety: thread-safe. Advance() must not race with the destruction
// of a mutex that a thread waits on through this clock.
#ifndef MAXSIMD_TESTS_SUPPORT_FAKE_CLOCK_H_
#define MAXSIMD_TESTS_SUPPORT_FAKE_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/clock.h"

namespace maxsimd::testing {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_ns_(absl::ToUnixNanos(start)) {}

  absl::Time Now() const override {
    return absl::FromUnixNanos(now_ns_.load(std::memory_order_acquire));
  }

  // Moves time forward and wakes every waiter whose deadline it reaches.
  void Advance(absl::Duration d) {
    now_ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_acq_rel);
    std::vector<absl::Mutex*> mutexes;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [mu, deadline] : waiters_) mutexes.push_back(mu);
    }
    // Releasing a mutex makes absl re-evaluate its waiters' conditions,
    // which read the new time.
    for (absl::Mutex* mu : mutexes) {
      mu->Lock();
      mu->Unlock();
    }
  }

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu) {
    struct Wait {
      const FakeClock* clock;
      const absl::Condition* cond;
      absl::Time deadline;
    } wait{this, &cond, deadline};
    {
      absl::MutexLock lock(&mu_);
      waiters_.emplace(mu, deadline);
    }
    mu->Await(absl::Condition(
        +[](Wait* w) {
          return w->cond->Eval() || w->clock->Now() >= w->deadline;
        },
        &wait));
    {
      absl::MutexLock lock(&mu_);
      for (auto it = waiters_.lower_bound(mu);
           it != waiters_.end() && it->first == mu; ++it) {
        if (it->second == deadline) {
          waiters_.erase(it);
          break;
        }
      }
    }
    return cond.Eval();
  }

  // Blocks until some thread waits in AwaitWithDeadline() with exactly this
  // deadline, or `timeout` of real time passes (a guard so that a broken
  // scheduler fails the test instead of hanging it). Returns whether it saw
  // such a waiter.
  bool WaitForWaiter(absl::Time deadline,
                     absl::Duration timeout = absl::Seconds(30)) const {
    struct Want {
      const FakeClock* clock;
      absl::Time deadline;
    } want{this, deadline};
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](Want* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->clock->mu_) {
              for (const auto& [mu, d] : w->clock->waiters_) {
                if (d == w->deadline) return true;
              }
              return false;
            },
            &want),
        timeout);
  }

 private:
  std::atomic<int64_t> now_ns_;
  mutable absl::Mutex mu_;
  mutable std::multimap<absl::Mutex*, absl::Time> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_FAKE_CLOCK_H_
