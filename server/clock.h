// The time source of the scheduler: Now() and a timed wait on a mutex.
//
// The scheduler reads every time it acts on (batching windows, deadlines,
// queue and compute durations) from one injected Clock, and blocks only
// through Clock::AwaitWithDeadline, so that tests drive it with a fake clock
// (tests/support/fake_clock.h) and never sleep to test timing. Production
// code uses RealClock().
//
// Thread-safety: implementations are thread-safe; one clock may serve many
// threads and mutexes at once.
#ifndef MAXSIMD_SERVER_CLOCK_H_
#define MAXSIMD_SERVER_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace maxsimd {

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // Releases *mu until `cond` holds or Now() reaches `deadline`, whichever
  // comes first, then reacquires it (absl::Mutex::AwaitWithDeadline
  // semantics). Returns the value of `cond` on return. `cond` is evaluated
  // with *mu held and must not block. `deadline` may be
  // absl::InfiniteFuture() (no time limit).
  // REQUIRES: *mu held by the caller.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu) = 0;
};

// The production clock: absl::Now() and absl::Mutex::AwaitWithDeadline.
// Stateless; the returned object lives for the whole process.
const Clock* RealClock();

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_CLOCK_H_
