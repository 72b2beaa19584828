// Launcher of the gather (rerank) kernel: per-query candidate lists scored
// against the resident segments, reading only the candidates' tokens. A
// whole batch of requests goes in one launch.
//
// The host plans the launch: one GatherRecord per live (query, candidate)
// pair, grouped by query, and GatherTiles that cut each query's records into
// blocks of work; both are staged in pinned memory and copied to the device
// together with the queries.
//
// Internal to kernels/: this header names cudaStream_t.
// Thread-safety: stateless.
#ifndef MAXSIMD_KERNELS_MAXSIM_GATHER_H_
#define MAXSIMD_KERNELS_MAXSIM_GATHER_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/launch_shapes.h"
#include "kernels/types.h"

namespace maxsimd {

struct GatherLaunchParams {
  // The corpus's dtype: float16, bfloat16, or int8 (queries staged as
  // float16, each record with its rows' scales).
  DType dtype = DType::kFloat16;
  int32_t dim = 0;
  int32_t dpad = 0;
  // [rows, dpad]: as ScanLaunchParams::query.
  const void* query = nullptr;
  const int64_t* query_offsets = nullptr;  // [num_queries + 1]
  // Int8 with quantised queries: each staged row's scale (null: none).
  const float* q_scales = nullptr;
  const GatherRecord* records = nullptr;
  const GatherTile* tiles = nullptr;
  int64_t num_tiles = 0;
  // Output: scores[r] = MaxSim of record r. Records of an empty query are
  // not written: the caller zeroes them (empty queries score 0).
  float* scores = nullptr;
  int row_tiles = 2;  // 2 or 8
};

absl::Status LaunchMaxSimGather(const GatherLaunchParams& params,
                                cudaStream_t stream);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_MAXSIM_GATHER_H_
