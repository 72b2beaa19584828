#include "server/clock.h"

namespace maxsimd {
namespace {

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu) {
    if (deadline == absl::InfiniteFuture()) {
      mu->Await(cond);
      return true;
    }
    return mu->AwaitWithDeadline(cond, deadline);
  }
};

}  // namespace

const Clock* RealClock() {
  static const SystemClock* const clock = new SystemClock;
  return clock;
}

}  // namespace maxsimd
