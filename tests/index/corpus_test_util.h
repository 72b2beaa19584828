// Helpers of the corpus tests that run on the CPU backend and, as their GPU
// twins, on GPU 0: a backend of either kind with optional budgets, and
// synthetic documents as segment data.
#ifndef MAXSIMD_TESTS_INDEX_CORPUS_TEST_UTIL_H_
#define MAXSIMD_TESTS_INDEX_CORPUS_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "index/corpus.h"
#include "index/synthetic.h"
#include "kernels/gpu_backend.h"
#include "kernels/maxsim_cpu.h"
#include "tests/support/forwarding_backend.h"
#include "tests/support/status_matchers.h"

namespace maxsimd::testing {

// A GPU backend on device 0 (`gpu`) or a two-thread CPU backend, with the
// given corpus and pinned budgets (0: none). The GPU backend's stream
// buffers are small (256 KiB), so host-placed scans run in many chunks.
inline std::unique_ptr<Backend> TestBackend(bool gpu, int64_t corpus_budget = 0,
                                            int64_t pinned_budget = 0) {
  if (gpu) {
    GpuBackendOptions o;
    o.limits.max_batch_candidates = 1 << 16;
    o.corpus_budget_bytes = corpus_budget;
    o.pinned_budget_bytes = pinned_budget;
    o.stream_buffer_bytes = 256 << 10;
    return GpuBackend::Create(o).value();
  }
  CpuBackendOptions o;
  o.num_threads = 2;
  o.corpus_budget_bytes = corpus_budget;
  o.pinned_budget_bytes = pinned_budget;
  return CpuBackend::Create(o).value();
}

// A CPU backend limited as a GPU backend can be. Without int8 it scores
// only what every backend scores (the dense dtypes: Backend::SupportsDType's
// default), as a backend without the int8 kernel does; with int8 it scores
// int8 but streams only dense corpora from host memory, as the GPU backend
// does. Its Search() is the CPU backend's; callers that ask first never
// send it what it refuses.
class LimitedBackend final : public ForwardingBackend {
 public:
  explicit LimitedBackend(bool int8, int64_t corpus_budget = 0)
      : ForwardingBackend(TestBackend(false, corpus_budget)), int8_(int8) {}
  std::string name() const override {
    return int8_ ? "int8-resident-only" : "dense-only";
  }
  // As the GPU backend's: the name and the hardware that lacks the kernel.
  std::string description() const override {
    return name() + " (Test GPU, compute capability 8.6)";
  }
  bool SupportsDType(DType dtype, int32_t dim) const override {
    return int8_ || Backend::SupportsDType(dtype, dim);
  }
  bool StreamsDType(DType dtype) const override {
    return dtype != DType::kInt8;
  }

 private:
  bool int8_;
};

// `n` synthetic documents of 1..max_tokens rows of config.dim as segment
// data, ids "<prefix><first + i>".
inline SegmentData SyntheticDocs(const CorpusConfig& config, int64_t n,
                                 int32_t max_tokens, uint64_t seed,
                                 const std::string& prefix, int64_t first) {
  SyntheticCorpusOptions so;
  so.num_docs = n;
  so.dim = config.dim;
  so.min_tokens = 1;
  so.max_tokens = max_tokens;
  so.seed = seed;
  SyntheticCorpus s = GenerateSyntheticCorpus(so);
  std::vector<int32_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    s.ids[i] = prefix + std::to_string(first + i);
    counts.push_back(
        static_cast<int32_t>(s.cu_seqlens[i + 1] - s.cu_seqlens[i]));
  }
  DocumentBuilder b(config, CorpusLimits{});
  EXPECT_THAT(b.Add(s.ids, counts, s.tokens.data(), s.cu_seqlens.back(),
                    DType::kFloat32, "docs"),
              IsOk());
  return b.Take();
}

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_INDEX_CORPUS_TEST_UTIL_H_
