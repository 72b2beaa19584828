// Checks that the ThreadSanitizer job can pass and can fail (scripts/
// tsan.sh): `locked` and `await` synchronise through absl::Mutex and must
// run clean with tsan_absl_sync preloaded (without it, TSan reports them);
// `racy` writes from two threads with no lock and must be reported.
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace {

absl::Mutex mu;
long counter = 0;    // guarded by mu, except in `racy`
bool ready = false;  // guarded by mu
long published = 0;  // written before `ready`, read after it

void Add(bool lock) {
  for (int i = 0; i < 100000; ++i) {
    if (lock) {
      absl::MutexLock l(&mu);
      ++counter;
    } else {
      ++counter;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "await") == 0) {
    std::thread writer([] {
      published = 42;
      absl::MutexLock l(&mu);
      ready = true;
    });
    mu.LockWhen(absl::Condition(&ready));
    mu.Unlock();
    const long seen = published;
    writer.join();
    std::printf("await: %ld\n", seen);
    return seen == 42 ? 0 : 1;
  }
  const bool lock = std::strcmp(mode, "locked") == 0;
  if (!lock && std::strcmp(mode, "racy") != 0) {
    std::fprintf(stderr, "usage: tsan_probe locked|await|racy\n");
    return 2;
  }
  std::thread a(Add, lock), b(Add, lock);
  a.join();
  b.join();
  std::printf("%s: %ld\n", mode, counter);
  return 0;
}
