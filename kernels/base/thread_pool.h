// A fixed pool of worker threads for data-parallel loops on the host.
//
// Thread-safety: ParallelFor may be called from several threads at once;
// calls are serialised, one loop runs on the pool at a time.
#ifndef MAXSIMD_KERNELS_BASE_THREAD_POOL_H_
#define MAXSIMD_KERNELS_BASE_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/synchronization/mutex.h"

namespace maxsimd {

class ThreadPool {
 public:
  // num_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(worker, begin, end) over [0, n) in chunks of at most `grain`
  // items. `worker` is in [0, size()) and no two concurrent calls of fn share
  // one, so fn may use per-worker scratch. The caller's thread takes part.
  // Returns when every chunk has run.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int, int64_t, int64_t)>& fn)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WorkerLoop(int worker);
  void RunChunks(int worker);

  std::vector<std::thread> workers_;
  absl::Mutex run_mu_;  // serialises ParallelFor calls
  absl::Mutex mu_;
  absl::CondVar work_cv_;  // signalled when generation_ or stop_ changes
  absl::CondVar idle_cv_;  // signalled when active_ drops to zero
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  // The current loop; written under mu_ before generation_ advances.
  const std::function<void(int, int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  std::atomic<int64_t> next_{0};
};

// A ThreadPool started on first use, for work that may never come (its
// threads are not started until then).
//
// Thread-safety: Get may be called from several threads at once.
class LazyThreadPool {
 public:
  // num_threads as ThreadPool's (<= 0: one per hardware thread).
  explicit LazyThreadPool(int num_threads = 0) : num_threads_(num_threads) {}

  ThreadPool* Get() {
    absl::call_once(
        once_, [this] { pool_ = std::make_unique<ThreadPool>(num_threads_); });
    return pool_.get();
  }

 private:
  const int num_threads_;
  absl::once_flag once_;
  std::unique_ptr<ThreadPool> pool_;  // written once, under once_
};

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_BASE_THREAD_POOL_H_
