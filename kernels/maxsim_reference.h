// The scalar oracle: MaxSim in fp64 over fp32-decoded elements, with a full
// sort for top-k. It is deliberately simple and slow; every backend's tests
// compare against it.
//
// Thread-safety: pure functions over host memory.
#ifndef MAXSIMD_KERNELS_MAXSIM_REFERENCE_H_
#define MAXSIMD_KERNELS_MAXSIM_REFERENCE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/backend.h"
#include "kernels/types.h"

namespace maxsimd {

// MaxSim of one query ([lq, seg.dim] fp32, host) against document `doc` of a
// host segment view. A document with no tokens scores -inf (0 when lq == 0).
// NaN products are ignored by the max, as fmax does. An int8 view is scored
// by backend.h's int8 formulas (queries rounded to fp16, or quantised when
// `quantize_queries`), the dot products and their scaling in fp64; a PLAID
// view by decoding its rows in fp32 (kernels/plaid_bits.h) and scaling the
// fp64 dot products by the rows' scales.
double ReferenceScore(const float* query, int64_t lq, const SegmentView& seg,
                      int64_t doc, bool quantize_queries = false);

// Full oracle for one batch: every query's exact top-k, reading only the
// `host` views of params.segments (and params.quantize_queries).
std::vector<std::vector<ScoredDoc>> ReferenceSearch(const SearchParams& params);

// The same documents, deletions and ranking with another score: `score`
// (query index, segment host view, document) for each document a query
// scores, in place of ReferenceScore. For oracles of a kernel's own
// rounding.
using ReferenceScorer =
    std::function<double(int32_t query, const SegmentView& seg, int64_t doc)>;
std::vector<std::vector<ScoredDoc>> ReferenceSearchWith(
    const SearchParams& params, const ReferenceScorer& score);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_MAXSIM_REFERENCE_H_
