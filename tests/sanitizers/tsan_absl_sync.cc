// Makes abseil's synchronisation visible to ThreadSanitizer when abseil
// itself is not built with it (Debian's packages are not): preloaded into a
// TSan test (scripts/tsan.sh), this library interposes the public entry
// points of absl::Mutex, CondVar, Notification and BlockingCounter, calls
// the real ones (dlsym RTLD_NEXT) and tells TSan the happens-before edge
// each one makes: a release on the object before anything that gives it up
// or signals through it, an acquire after anything that takes it or waits
// on it.
//
// Conditions are the exception: abseil evaluates them inside Await, at times
// (and in threads) this library cannot annotate, so here Await and the
// *When forms poll instead: evaluate the condition holding the mutex, and if
// it is false, unlock, sleep briefly and lock again. Slower, the same
// semantics, and every evaluation runs in a critical section TSan sees.
//
// Not modelled: Notification::HasBeenNotified() is inline in abseil's
// header, so a test that polls it instead of waiting sees no edge.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

#define MAXSIMD_STRINGIFY_INNER(x) #x
#define MAXSIMD_STRINGIFY(x) MAXSIMD_STRINGIFY_INNER(x)
constexpr char kInlineNamespace[] =
    MAXSIMD_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);

// The real definition of `name`, a symbol of abseil's namespace given
// without the "_ZN4absl<len><inline namespace>" prefix (or "_ZNK..." for
// const members: `konst`).
template <typename Fn>
Fn Real(const char* name, bool konst = false) {
  const std::string ns = kInlineNamespace;
  const std::string symbol = std::string(konst ? "_ZNK4absl" : "_ZN4absl") +
                             std::to_string(ns.size()) + ns + name;
  void* fn = dlsym(RTLD_NEXT, symbol.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found\n", symbol.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// abseil's lock-order checker keeps its graph under abseil's own spin lock,
// which TSan cannot see either; it is off in these runs.
__attribute__((constructor)) void TurnOffDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

namespace {

// Waits, holding `mu` (as a reader when `reader`), until `cond` holds or
// `deadline` passes; returns whether it holds.
bool Poll(Mutex* mu, const Condition& cond, Time deadline, bool reader) {
  while (!cond.Eval()) {
    if (Now() >= deadline) return false;
    if (reader) {
      mu->ReaderUnlock();
    } else {
      mu->Unlock();
    }
    SleepFor(Microseconds(20));
    if (reader) {
      mu->ReaderLock();
    } else {
      mu->Lock();
    }
  }
  return true;
}

}  // namespace

// Await is only ever called with the mutex held exclusively in this project
// (no reader locks wait on conditions).
void Mutex::Await(const Condition& cond) {
  Poll(this, cond, InfiniteFuture(), /*reader=*/false);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  return Poll(this, cond, Now() + timeout, /*reader=*/false);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  return Poll(this, cond, deadline, /*reader=*/false);
}

void Mutex::LockWhen(const Condition& cond) {
  Lock();
  Await(cond);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  ReaderLock();
  Poll(this, cond, InfiniteFuture(), /*reader=*/true);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  Lock();
  return AwaitWithTimeout(cond, timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  Lock();
  return AwaitWithDeadline(cond, deadline);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  ReaderLock();
  return Poll(this, cond, Now() + timeout, /*reader=*/true);
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  ReaderLock();
  return Poll(this, cond, deadline, /*reader=*/true);
}

void CondVar::Wait(Mutex* mu) {
  static const auto real =
      Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  static const auto real =
      Real<void (*)(Notification*)>("12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  static const auto real = Real<void (*)(const Notification*)>(
      "12Notification19WaitForNotificationEv", /*konst=*/true);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static const auto real = Real<bool (*)(const Notification*, Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE",
      /*konst=*/true);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static const auto real = Real<bool (*)(const Notification*, Time)>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE",
      /*konst=*/true);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool BlockingCounter::DecrementCount() {
  static const auto real =
      Real<bool (*)(BlockingCounter*)>("15BlockingCounter14DecrementCountEv");
  __tsan_release(this);
  return real(this);
}

void BlockingCounter::Wait() {
  static const auto real =
      Real<void (*)(BlockingCounter*)>("15BlockingCounter4WaitEv");
  real(this);
  __tsan_acquire(this);
}

ABSL_NAMESPACE_END
}  // namespace absl
