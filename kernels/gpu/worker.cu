#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/base/fault_injection.h"
#include "kernels/cuda_check.cuh"
#include "kernels/gpu/worker.h"

namespace maxsimd {
namespace {

// Threads per worker packing a rerank's host-placed rows: one thread's
// memcpy moves about 8 GB/s, a few keep up with the bus.
constexpr int kPackThreads = 4;

}  // namespace

cudaError_t DeviceMalloc(void** ptr, size_t bytes) {
  if (MAXSIMD_FAULT_POINT(fault::kGpuMalloc)) return cudaErrorMemoryAllocation;
  return cudaMalloc(ptr, bytes);
}

namespace {

// ScoreCentroids' scratch (Worker::qc_*).
absl::Status InitCentroidScratch(const GpuBackendOptions& options, Worker* w) {
  if (options.centroid_score_entries <= 0) return absl::OkStatus();
  w->qc_entries = options.centroid_score_entries;
  w->qc_token_values =
      std::max<int64_t>(options.centroid_score_entries, options.limits.max_dim);
  MAXSIMD_CUDA_CHECK(
      DeviceMalloc(&w->qc_tokens, w->qc_token_values * sizeof(float)));
  MAXSIMD_CUDA_CHECK(
      DeviceMalloc(&w->qc_scores, w->qc_entries * sizeof(float)));
  for (int b = 0; b < 2; ++b) {
    MAXSIMD_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&w->qc_pinned[b]),
                                     w->qc_entries * sizeof(float),
                                     cudaHostAllocDefault));
    MAXSIMD_CUDA_CHECK(
        cudaEventCreateWithFlags(&w->qc_copied[b], cudaEventDisableTiming));
  }
  w->device_bytes += (w->qc_token_values + w->qc_entries) * sizeof(float);
  return absl::OkStatus();
}

}  // namespace

absl::Status InitWorker(const GpuBackendOptions& options, Worker* w) {
  const BackendLimits& lim = options.limits;
  MAXSIMD_CUDA_CHECK(
      cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&w->start, &w->staged, &w->ready, &w->done}) {
    MAXSIMD_CUDA_CHECK(cudaEventCreate(e));
  }
  for (auto& p : w->pair) {
    MAXSIMD_CUDA_CHECK(cudaEventCreate(&p[0]));
    MAXSIMD_CUDA_CHECK(cudaEventCreate(&p[1]));
  }
  w->in_bytes = InputLayout::Capacity(lim, options.max_query_elements).end;
  MAXSIMD_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&w->pinned_in),
                                   w->in_bytes, cudaHostAllocDefault));
  MAXSIMD_CUDA_CHECK(DeviceMalloc(&w->dev_in, w->in_bytes));
  const int64_t topk_entries =
      static_cast<int64_t>(lim.max_batch_queries) * kMaxTopK;
  w->out_entries = 2 * topk_entries;
  MAXSIMD_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&w->pinned_out),
                                   w->out_entries * sizeof(uint64_t),
                                   cudaHostAllocDefault));
  MAXSIMD_CUDA_CHECK(DeviceMalloc(&w->topk, topk_entries * sizeof(uint64_t)));
  w->score_entries =
      std::max(options.scan_chunk_entries, lim.max_batch_candidates);
  MAXSIMD_CUDA_CHECK(
      DeviceMalloc(&w->scores, w->score_entries * sizeof(float)));
  // The longest top-k row: a scan chunk (<= scan_chunk_entries documents)
  // or one query's candidates.
  w->ws.entries = TopKWorkspaceEntries(w->score_entries);
  for (uint64_t*& p : w->ws.partial) {
    MAXSIMD_CUDA_CHECK(DeviceMalloc(&p, w->ws.entries * sizeof(uint64_t)));
  }
  w->device_bytes = static_cast<int64_t>(
      w->in_bytes + (topk_entries + 2 * w->ws.entries) * sizeof(uint64_t) +
      w->score_entries * sizeof(float));
  if (options.use_tma && options.plaid_int8_mma &&
      options.plaid_table_bytes > 0) {
    MAXSIMD_CUDA_CHECK(DeviceMalloc(
        &w->plaid_table, static_cast<size_t>(options.plaid_table_bytes)));
    w->plaid_table_bytes = options.plaid_table_bytes;
    w->device_bytes += options.plaid_table_bytes;
  }
  if (options.stream_buffer_bytes > 0) {
    MAXSIMD_CUDA_CHECK(
        cudaStreamCreateWithFlags(&w->copy_stream, cudaStreamNonBlocking));
    MAXSIMD_CUDA_CHECK(cudaEventCreate(&w->stream_first));
    MAXSIMD_CUDA_CHECK(cudaEventCreate(&w->stream_last));
    const size_t bytes = static_cast<size_t>(options.stream_buffer_bytes);
    for (int b = 0; b < kStreamBuffers; ++b) {
      MAXSIMD_CUDA_CHECK(
          cudaEventCreateWithFlags(&w->copied[b], cudaEventDisableTiming));
      MAXSIMD_CUDA_CHECK(
          cudaEventCreateWithFlags(&w->consumed[b], cudaEventDisableTiming));
      MAXSIMD_CUDA_CHECK(DeviceMalloc(&w->dev_stream[b], bytes));
      MAXSIMD_CUDA_CHECK(
          cudaHostAlloc(reinterpret_cast<void**>(&w->pinned_stream[b]), bytes,
                        cudaHostAllocDefault));
    }
    w->device_bytes += kStreamBuffers * options.stream_buffer_bytes;
    w->pack_pool = std::make_unique<ThreadPool>(kPackThreads);
  }
  return InitCentroidScratch(options, w);
}

void DestroyWorker(Worker* w) {
  if (w->stream != nullptr)
    MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(w->stream));
  if (w->copy_stream != nullptr)
    MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(w->copy_stream));
  for (cudaEvent_t e :
       {w->start, w->staged, w->ready, w->done, w->stream_first, w->stream_last,
        w->copied[0], w->copied[1], w->consumed[0], w->consumed[1]}) {
    if (e != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
  }
  for (int b = 0; b < 2; ++b) {
    if (w->qc_copied[b] != nullptr)
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaEventDestroy(w->qc_copied[b]));
    if (w->qc_pinned[b] != nullptr)
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaFreeHost(w->qc_pinned[b]));
  }
  for (int b = 0; b < kStreamBuffers; ++b) {
    if (w->dev_stream[b])
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaFree(w->dev_stream[b]));
    if (w->pinned_stream[b])
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaFreeHost(w->pinned_stream[b]));
  }
  if (w->copy_stream != nullptr)
    MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamDestroy(w->copy_stream));
  for (auto& p : w->pair) {
    for (cudaEvent_t e : p) {
      if (e != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
    }
  }
  if (w->pinned_in) MAXSIMD_CUDA_CHECK_NOTHROW(cudaFreeHost(w->pinned_in));
  if (w->pinned_out) MAXSIMD_CUDA_CHECK_NOTHROW(cudaFreeHost(w->pinned_out));
  for (void* p :
       {static_cast<void*>(w->dev_in), static_cast<void*>(w->scores),
        static_cast<void*>(w->topk), static_cast<void*>(w->ws.partial[0]),
        static_cast<void*>(w->ws.partial[1]),
        static_cast<void*>(w->plaid_table), static_cast<void*>(w->qc_tokens),
        static_cast<void*>(w->qc_scores)}) {
    if (p != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaFree(p));
  }
  if (w->stream != nullptr)
    MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamDestroy(w->stream));
  w->pack_pool.reset();
}

}  // namespace maxsimd
