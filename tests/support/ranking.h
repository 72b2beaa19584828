// Helpers shared by the kernel and service tests: random ragged corpora with
// a printed seed, and a ranking comparison that tolerates rounding.
#ifndef MAXSIMD_TESTS_SUPPORT_RANKING_H_
#define MAXSIMD_TESTS_SUPPORT_RANKING_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/types.h"

namespace maxsimd::testing {

// A host-resident ragged corpus segment with its storage.
struct HostSegment {
  std::vector<uint16_t> tokens16;  // fp16/bf16 storage
  std::vector<float> tokens32;     // fp32 storage (dtype == kFloat32)
  std::vector<int8_t> tokens8;     // int8 codes (dtype == kInt8)
  std::vector<float> scales;       // int8: one per token row
  std::vector<int64_t> cu_seqlens;
  std::vector<uint32_t> tombstones;  // empty: none
  int32_t dim = 0;
  DType dtype = DType::kFloat16;
  int64_t base_index = 0;

  int64_t num_docs() const {
    return static_cast<int64_t>(cu_seqlens.size()) - 1;
  }
  // A host view of this segment (valid while the segment lives unchanged).
  SegmentView View() const;
  void Delete(int64_t doc);
};

// Random segment: document lengths uniform in [min_len, max_len] (0 allowed),
// values N(0, 1) rounded to `dtype` (for kInt8: each row quantised by
// kernels/quantize.h).
HostSegment RandomSegment(std::mt19937_64& rng, int64_t num_docs,
                          int32_t min_len, int32_t max_len, int32_t dim,
                          DType dtype, int64_t base_index);

// The same with the given document lengths.
HostSegment SegmentWithLengths(std::mt19937_64& rng,
                               const std::vector<int32_t>& lengths, int32_t dim,
                               DType dtype, int64_t base_index);

// Random fp32 query tokens [lq, dim].
std::vector<float> RandomQuery(std::mt19937_64& rng, int64_t lq, int32_t dim);

// The tests build batches with the backend's own owning helper.
using Batch = ::maxsimd::SearchBatch;

// A seed from the MAXSIMD_TEST_SEED environment variable, else from the
// clock; printed so a failure can be replayed.
uint64_t TestSeed();

// Compares a ranking against the oracle's. Scores must agree rank by rank
// within rel_tol (relative to max(1, |expected|)); where scores agree within
// the tolerance, the documents may come in either order, so the comparison
// is on the sets of indexes within each run of near-equal scores. A
// document may appear twice only with `repeats` (a rerank whose candidate
// list repeats it: its copies score alike, so they fall in one run). Returns
// an empty string on a match, else a description of the first difference.
std::string CompareRanking(const std::vector<ScoredDoc>& actual,
                           const std::vector<ScoredDoc>& expected,
                           double rel_tol, bool repeats = false);

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_RANKING_H_
