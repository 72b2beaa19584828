// The CPU backend: exact MaxSim + top-k on the host, multithreaded.
//
// It serves when no GPU is present, so CI and laptops run the whole service,
// and it is the fast oracle for large kernel tests (the scalar oracle in
// maxsim_reference.h is the exact one). Accumulation is fp32 (int32 for
// the int8 dot products of quantised queries, backend.h). It scores every
// dtype, int8 corpora included.
//
// Health: the CPU backend has no device to lose, so healthy() stays true,
// except after the test-only fault point fault::kCpuSearch
// (fault_injection.h), which fails a search as a GPU kernel fault does:
// from then on healthy() is false and every call answers UNAVAILABLE, as
// the GPU backend after a sticky error. That lets the server's handling of
// a failed backend run in tests without a GPU. (Fault point
// fault::kCpuAlloc fails Upload and Pin as an allocation that does not
// fit.) In a build without fault injection, none of this is compiled in.
//
// Thread-safety: as Backend. Searches share one thread pool; concurrent
// Search() calls take turns on it.
#ifndef MAXSIMD_KERNELS_MAXSIM_CPU_H_
#define MAXSIMD_KERNELS_MAXSIM_CPU_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "kernels/backend.h"
#include "kernels/base/fault_injection.h"
#include "kernels/base/thread_pool.h"

namespace maxsimd {

struct SearchPrep;  // maxsim_cpu.cc: what a search prepares once

struct CpuBackendOptions {
  int num_threads = 0;  // <= 0: one per hardware thread
  BackendLimits limits;
  // Most bytes of corpus arrays (views of host memory) this backend serves
  // (0: no limit); an upload past it is RESOURCE_EXHAUSTED.
  int64_t corpus_budget_bytes = 0;
  // Most bytes of host-placed arrays (Pin) this backend serves (0: no
  // limit); a pin past it is RESOURCE_EXHAUSTED.
  int64_t pinned_budget_bytes = 0;
};

class CpuBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(
      const CpuBackendOptions& options);

  std::string name() const override { return "cpu"; }
  const BackendLimits& limits() const override { return options_.limits; }
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Upload(const void* host,
                                                         size_t bytes) override;
  // A view like Upload's, counted against pinned_budget_bytes instead.
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Pin(const void* host,
                                                      size_t bytes) override;
  absl::Status Search(const SearchParams& params,
                      absl::Span<std::vector<ScoredDoc>> results,
                      SearchTiming* timing) override;
  bool healthy() const override { return !fault::kEnabled || healthy_.load(); }
  // Every dtype: float32, float16, bfloat16 and int8 (with scales).
  bool SupportsDType(DType, int32_t) const override { return true; }

 private:
  explicit CpuBackend(const CpuBackendOptions& options);

  absl::Status Scan(const SearchParams& params, const SearchPrep& prep,
                    absl::Span<std::vector<ScoredDoc>> results);
  absl::Status Gather(const SearchParams& params, const SearchPrep& prep,
                      absl::Span<std::vector<ScoredDoc>> results);

  CpuBackendOptions options_;
  ThreadPool pool_;
  // False after a failure injected at fault::kCpuSearch; read only in a
  // build with fault injection.
  std::atomic<bool> healthy_{true};
  absl::Mutex upload_mu_;  // serialises Upload()'s budget check
  // Bytes of live buffers (shared: a buffer may outlive the backend).
  std::shared_ptr<std::atomic<int64_t>> corpus_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> pinned_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_MAXSIM_CPU_H_
