#include "kernels/base/fault_injection.h"

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"

namespace maxsimd::fault {
namespace internal {

std::atomic<int> armed_points{0};

}  // namespace internal

namespace {

struct PointState {
  bool armed = false;
  Schedule schedule;
  int64_t hits = 0;
  int64_t failures = 0;
};

struct Registry {
  absl::Mutex mu;
  std::map<std::string, PointState, std::less<>> points ABSL_GUARDED_BY(mu);

  // REQUIRES: mu held.
  void SetArmedLocked(PointState& state, bool armed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (state.armed != armed) {
      internal::armed_points.fetch_add(armed ? 1 : -1,
                                       std::memory_order_relaxed);
    }
    state.armed = armed;
  }
};

// Never destroyed: a point may be hit by a thread that outlives main().
Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

void Arm(absl::string_view point, Schedule schedule) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  PointState& state = r.points[std::string(point)];
  state.schedule = schedule;
  state.hits = 0;
  state.failures = 0;
  r.SetArmedLocked(state, true);
}

void Disarm(absl::string_view point) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.points.find(point);
  if (it != r.points.end()) r.SetArmedLocked(it->second, false);
}

void DisarmAll() {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  for (auto& [name, state] : r.points) r.SetArmedLocked(state, false);
  r.points.clear();
}

int64_t Hits(absl::string_view point) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.points.find(point);
  return it == r.points.end() ? 0 : it->second.hits;
}

int64_t Failures(absl::string_view point) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.points.find(point);
  return it == r.points.end() ? 0 : it->second.failures;
}

namespace internal {

bool Hit(absl::string_view point) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.points.find(point);
  if (it == r.points.end() || !it->second.armed) return false;
  PointState& state = it->second;
  const int64_t n = state.hits++;  // hits before this one
  const Schedule& s = state.schedule;
  const bool fail = n >= s.skip && (s.times < 0 || n - s.skip < s.times);
  if (fail) ++state.failures;
  return fail;
}

}  // namespace internal
}  // namespace maxsimd::fault
