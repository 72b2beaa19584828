// A GPU backend's worker slot: the streams, events and every buffer one
// search in flight uses, all allocated by InitWorker() when the backend is
// created and sized from its limits, so that Search() allocates nothing:
//
//   pinned_in / dev_in   the staging blob (InputLayout::Capacity)
//   pinned_out           a ring of per-segment top-k results (D2H)
//   scores, topk, ws     the scores of a scan chunk or of a rerank's
//                        records, the running top-k, its workspace
//   plaid_table          the PlaidMma query-centroid table (plaid_table_bytes)
//   dev_stream, pinned_stream, copy_stream
//                        streaming of host-placed tokens (stream_buffer_bytes)
//   qc_*                 ScoreCentroids' query rows, a chunk of their scores
//                        and its two pinned return buffers
//                        (centroid_score_entries)
//
// Internal to kernels/gpu: this header names CUDA types.
// Thread-safety: a worker is used by one search at a time (the backend
// hands slots out); DeviceMalloc is thread-safe.
#ifndef MAXSIMD_KERNELS_GPU_WORKER_H_
#define MAXSIMD_KERNELS_GPU_WORKER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "kernels/base/thread_pool.h"
#include "kernels/gpu/search_plan.h"
#include "kernels/gpu_backend.h"
#include "kernels/topk.h"

namespace maxsimd {

// Event pairs per worker for splitting kernel time into scoring and top-k.
inline constexpr int kTimingPairs = 32;

// Every cudaMalloc of the GPU backend goes through here. Fault point
// fault::kGpuMalloc fails it as a device without room does, and counts it
// (tests arm the point across searches to show they allocate nothing).
cudaError_t DeviceMalloc(void** ptr, size_t bytes);
template <typename T>
cudaError_t DeviceMalloc(T** ptr, size_t bytes) {
  return DeviceMalloc(reinterpret_cast<void**>(ptr), bytes);
}

struct Worker {
  cudaStream_t stream = nullptr;
  // staged: the query inputs are on the device; ready: the search may
  // start its kernels (a scan waits for the scans before it first).
  cudaEvent_t start = nullptr, staged = nullptr, ready = nullptr,
              done = nullptr;
  cudaEvent_t pair[kTimingPairs][2] = {};
  char* pinned_in = nullptr;  // InputLayout::Capacity
  char* dev_in = nullptr;
  size_t in_bytes = 0;
  uint64_t* pinned_out = nullptr;  // ring of per-segment results
  int64_t out_entries = 0;
  float* scores = nullptr;  // scan chunk or gather records
  int64_t score_entries = 0;
  uint64_t* topk = nullptr;  // [max_batch_queries, kMaxTopK]
  TopKWorkspace ws;
  // The PlaidMma query-centroid table (GpuBackendOptions::plaid_int8_mma
  // and plaid_table_bytes; null when off or without the TMA kernels).
  uint32_t* plaid_table = nullptr;
  int64_t plaid_table_bytes = 0;
  // Streaming of host-placed tokens (GpuBackendOptions::stream_buffer_bytes;
  // all null when it is 0): copies run on copy_stream into dev_stream[b]
  // (from pinned_stream[b] for a rerank's gathered rows); copied[b] marks a
  // copy done, consumed[b] the kernels reading dev_stream[b] done.
  cudaStream_t copy_stream = nullptr;
  char* dev_stream[kStreamBuffers] = {};
  char* pinned_stream[kStreamBuffers] = {};
  cudaEvent_t copied[kStreamBuffers] = {}, consumed[kStreamBuffers] = {};
  cudaEvent_t stream_first = nullptr, stream_last = nullptr;  // timing
  // Threads that gather a rerank's host-placed rows into pinned_stream.
  std::unique_ptr<ThreadPool> pack_pool;
  // ScoreCentroids (GpuBackendOptions::centroid_score_entries; all null
  // when it is 0): a block of query rows (qc_token_values fp32 values, at
  // least one row of limits.max_dim), one chunk of their scores
  // (qc_entries), and two pinned buffers of qc_entries through which the
  // chunks come back in turn; qc_copied[b] marks buffer b's copy done.
  float* qc_tokens = nullptr;
  int64_t qc_token_values = 0;
  float* qc_scores = nullptr;
  float* qc_pinned[2] = {};
  cudaEvent_t qc_copied[2] = {};
  int64_t qc_entries = 0;
  // Device bytes of all the above.
  int64_t device_bytes = 0;
};

// Allocates every resource of `w` on the current device for `options`
// (options.use_tma: whether the TMA kernels run, which the PlaidMma table
// needs). On error the resources allocated so far stay for DestroyWorker.
absl::Status InitWorker(const GpuBackendOptions& options, Worker* w);

// Waits for w's streams and frees everything InitWorker allocated; safe on
// a worker whose InitWorker failed part way.
void DestroyWorker(Worker* w);

// The device addresses of w's stream buffers (null without them).
inline void StreamBufferAddresses(const Worker& w,
                                  const char* out[kStreamBuffers]) {
  for (int b = 0; b < kStreamBuffers; ++b) out[b] = w.dev_stream[b];
}

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_GPU_WORKER_H_
