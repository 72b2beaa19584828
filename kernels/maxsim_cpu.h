// The CPU backend: exact MaxSim + top-k on the host, multithreaded.
//
// It serves when no GPU is present, so CI and laptops run the whole service,
// and it is the fast oracle for large kernel tests (the scalar oracle in
// maxsim_reference.h is the exact one). Accumulation is fp32.
//
// Thread-safety: as Backend. Searches share one thread pool; concurrent
// Search() calls take turns on it.
#ifndef MAXSIMD_KERNELS_MAXSIM_CPU_H_
#define MAXSIMD_KERNELS_MAXSIM_CPU_H_

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/thread_pool.h"

namespace maxsimd {

struct CpuBackendOptions {
  int num_threads = 0;  // <= 0: one per hardware thread
  BackendLimits limits;
};

class CpuBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(
      const CpuBackendOptions& options);

  std::string name() const override { return "cpu"; }
  const BackendLimits& limits() const override { return options_.limits; }
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Upload(const void* host,
                                                         size_t bytes) override;
  absl::Status Search(const SearchParams& params,
                      absl::Span<std::vector<ScoredDoc>> results,
                      SearchTiming* timing) override;
  bool healthy() const override { return true; }

 private:
  explicit CpuBackend(const CpuBackendOptions& options);

  absl::Status Scan(const SearchParams& params,
                    absl::Span<std::vector<ScoredDoc>> results);
  absl::Status Gather(const SearchParams& params,
                      absl::Span<std::vector<ScoredDoc>> results);

  CpuBackendOptions options_;
  ThreadPool pool_;
};

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_MAXSIM_CPU_H_
