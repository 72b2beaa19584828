#include "kernels/base/thread_pool.h"

#include <algorithm>

namespace maxsimd {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = std::max(1u, std::thread::hardware_concurrency());
  }
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    work_cv_.SignalAll();
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks(int worker) {
  for (;;) {
    const int64_t begin = next_.fetch_add(grain_);
    if (begin >= n_) return;
    (*fn_)(worker, begin, std::min(n_, begin + grain_));
  }
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && generation_ == seen) work_cv_.Wait(&mu_);
      if (stop_) return;
      seen = generation_;
      ++active_;
    }
    RunChunks(worker);
    absl::MutexLock lock(&mu_);
    if (--active_ == 0) idle_cv_.SignalAll();
  }
}

void ThreadPool::ParallelFor(
    int64_t n, int64_t grain,
    const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  absl::MutexLock run_lock(&run_mu_);
  {
    absl::MutexLock lock(&mu_);
    // A worker that woke late for the previous loop may still be in
    // RunChunks (finding no work); let it leave before the loop changes.
    while (active_ != 0) idle_cv_.Wait(&mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = std::max<int64_t>(1, grain);
    next_.store(0);
    ++generation_;
    work_cv_.SignalAll();
  }
  RunChunks(0);
  // Wait until no worker is still inside this loop's chunks.
  absl::MutexLock lock(&mu_);
  while (active_ != 0) idle_cv_.Wait(&mu_);
}

}  // namespace maxsimd
