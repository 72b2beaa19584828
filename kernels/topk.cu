// Host side of the GPU top-k: plans the select rounds and launches them.
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/select_topk.cuh"
#include "kernels/topk.h"

namespace maxsimd {
namespace {

using detail::SelectArgs;
using detail::SelectMode;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <SelectMode kMode>
absl::Status Launch(const SelectArgs& args, int64_t slices, int32_t queries,
                    cudaStream_t stream) {
  constexpr auto kernel = detail::SelectTopKKernel<kMode>;
  MAXSIMD_RETURN_IF_ERROR(SetSmemLimitOnce<kernel>(detail::SelectSmemBytes()));
  const dim3 grid(static_cast<unsigned>(slices),
                  static_cast<unsigned>(queries));
  kernel<<<grid, detail::kSelectThreads, detail::SelectSmemBytes(), stream>>>(
      args);
  MAXSIMD_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status LaunchFinal(const SelectArgs& args, int32_t queries,
                         int32_t k_stride, cudaStream_t stream) {
  if (k_stride <= detail::kRankSortMaxK) {
    return Launch<SelectMode::kRankSort>(args, 1, queries, stream);
  }
  return Launch<SelectMode::kCubSort>(args, 1, queries, stream);
}

}  // namespace

int64_t TopKWorkspaceEntries(int64_t max_row_len) {
  return (CeilDiv(std::max<int64_t>(max_row_len, 1), kTopKSlice) + 1) *
         kMaxTopK;
}

absl::Status SelectTopK(const TopKSource& source, int32_t num_queries,
                        int64_t max_row_len, const int32_t* top_k,
                        int32_t k_stride, bool merge_with_out, uint64_t* out,
                        const TopKWorkspace& ws, cudaStream_t stream) {
  if (num_queries == 0) return absl::OkStatus();
  if (k_stride < 1 || k_stride > kMaxTopK) {
    return absl::InternalError(
        absl::StrCat("SelectTopK: k_stride is ", k_stride));
  }
  SelectArgs final_args;
  final_args.top_k = top_k;
  final_args.prior = merge_with_out ? out : nullptr;
  final_args.prior_stride = k_stride;
  final_args.out = out;
  final_args.out_row_stride = k_stride;
  final_args.out_slot = k_stride;

  const int64_t slices = CeilDiv(std::max<int64_t>(max_row_len, 1), kTopKSlice);
  if (slices == 1) {
    final_args.src = source;
    return LaunchFinal(final_args, num_queries, k_stride, stream);
  }
  // Queries per group so that one round's output fits a workspace buffer.
  const int64_t first_out = slices * k_stride;
  if (first_out > ws.entries) {
    return absl::InternalError(
        absl::StrCat("SelectTopK: workspace of ", ws.entries,
                     " keys is below one query's ", first_out));
  }
  const int32_t group = static_cast<int32_t>(
      std::min<int64_t>(num_queries, ws.entries / first_out));
  for (int32_t q0 = 0; q0 < num_queries; q0 += group) {
    const int32_t g = std::min(group, num_queries - q0);
    SelectArgs part;
    part.src = source;
    part.q0 = q0;
    part.top_k = top_k;
    part.out = ws.partial[0];
    part.out_rows_relative = true;
    part.out_row_stride = first_out;
    part.out_slot = k_stride;
    MAXSIMD_RETURN_IF_ERROR(
        Launch<SelectMode::kPartial>(part, slices, g, stream));
    int cur = 0;
    int64_t len = first_out;
    while (len > kTopKSlice) {
      const int64_t s2 = CeilDiv(len, kTopKSlice);
      SelectArgs round;
      round.src.keys = ws.partial[cur];
      round.src.row_stride = len;
      round.src.row_len = len;
      round.src_rows_relative = true;
      round.q0 = q0;
      round.top_k = top_k;
      round.out = ws.partial[1 - cur];
      round.out_rows_relative = true;
      round.out_row_stride = s2 * k_stride;
      round.out_slot = k_stride;
      MAXSIMD_RETURN_IF_ERROR(
          Launch<SelectMode::kPartial>(round, s2, g, stream));
      cur = 1 - cur;
      len = s2 * k_stride;
    }
    SelectArgs fin = final_args;
    fin.src = TopKSource();
    fin.src.keys = ws.partial[cur];
    fin.src.row_stride = len;
    fin.src.row_len = len;
    fin.src_rows_relative = true;
    fin.q0 = q0;
    MAXSIMD_RETURN_IF_ERROR(LaunchFinal(fin, g, k_stride, stream));
  }
  return absl::OkStatus();
}

ScoredDoc DecodeTopKKey(uint64_t key, int64_t base) {
  const uint32_t hi = static_cast<uint32_t>(key >> 32);
  const uint32_t pos = ~static_cast<uint32_t>(key);
  float score;
  if (hi == 1u) {
    score = std::numeric_limits<float>::quiet_NaN();
  } else {
    const uint32_t u = (hi & 0x80000000u) ? (hi & 0x7fffffffu) : ~hi;
    std::memcpy(&score, &u, sizeof(score));
  }
  return ScoredDoc{score, base + static_cast<int64_t>(pos)};
}

}  // namespace maxsimd
