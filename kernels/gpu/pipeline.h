// The device side of one GPU search, the way faiss's IVF scans are built:
// a driver per path that takes a plan and a worker and issues one call per
// kernel launch and select pass, over a SearchRun that holds what both
// paths share.
//
//   SearchRun::EncodeMaps(), Upload()
//                        tensor maps into the blob, one H2D copy, and the
//                        PlaidMma query-centroid table
//   RunScan()            scan_pipeline.cu: per segment, per chunk: scores,
//                        top-k merged into the running result, D2H
//   RunGather()          gather_pipeline.cu: every (query, candidate)
//                        record, rounds of host-placed rows, one top-k
//   SearchRun::Finish()  wait, host merge of the segments' results, timing
//
// Internal to kernels/gpu: this header names CUDA types.
// Thread-safety: a SearchRun belongs to one search on one worker;
// ScanOrder is shared by the backend's searches.
#ifndef MAXSIMD_KERNELS_GPU_PIPELINE_H_
#define MAXSIMD_KERNELS_GPU_PIPELINE_H_

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda_check.cuh"
#include "kernels/gpu/search_plan.h"
#include "kernels/gpu/worker.h"
#include "kernels/maxsim_tma.h"

namespace maxsimd {

// The backend options a pipeline reads (GpuBackendOptions' tuning knobs).
struct PipelineKnobs {
  int32_t sm_count = 1;
  int tma_scan_box_rows = 64;
  int64_t tma_scan_docs_per_unit = 0;
  int tma_scan_tile_group = 0;
};

// Scans in device order (GpuBackendOptions::serialize_scans): a scan holds
// mu while it enqueues its kernels, and its stream first waits for the
// done event of the scan enqueued before it.
struct ScanOrder {
  bool serialize = true;
  absl::Mutex mu;
  cudaEvent_t last_done ABSL_GUARDED_BY(mu) = nullptr;
};

// An NVTX range for profiles, for a scope.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// The wait for a search's work on `stream`, where a fault of its kernels
// (an illegal address, a trap) surfaces. Fault point fault::kGpuKernel
// reports such a fault after the wait, as the runtime does.
cudaError_t WaitForSearch(cudaStream_t stream);

class SearchRun {
 public:
  SearchRun(Worker& w, const SearchParams& p, const SearchPlan& plan,
            StagedInputs staged, const PipelineKnobs& knobs,
            absl::Span<std::vector<ScoredDoc>> results)
      : w_(w),
        p_(p),
        plan_(plan),
        staged_(std::move(staged)),
        knobs_(knobs),
        results_(results) {}
  SearchRun(const SearchRun&) = delete;
  SearchRun& operator=(const SearchRun&) = delete;

  Worker& worker() const { return w_; }
  const SearchParams& params() const { return p_; }
  const SearchPlan& plan() const { return plan_; }
  const StagedInputs& staged() const { return staged_; }
  const PipelineKnobs& knobs() const { return knobs_; }
  cudaStream_t stream() const { return w_.stream; }

  // A region of the device blob (plan().layout offsets).
  template <typename T>
  const T* Device(size_t offset) const {
    return reinterpret_cast<const T*>(w_.dev_in + offset);
  }

  // Encodes the TMA path's tensor maps into the pinned blob.
  absl::Status EncodeMaps();
  // Records the start event, copies the blob to the device, and builds the
  // PlaidMma table.
  absl::Status Upload();

  // The TMA launches of one scoring pass, one per group of query tiles (a
  // block keeps running maxima for at most TmaMaxTiles() tiles); `t` holds
  // the pass's own fields (records and units, or the scan's chunk), and
  // the plan's layout adds its part (maxsim_tma.h's TmaArgs). `rows`: the
  // scanned slot's rows in device memory, for a kernel that reads them
  // directly (PlaidMma scans); null for gathers and streamed slots.
  absl::Status LaunchTma(TmaLaunch t, const void* rows = nullptr);

  // The PlaidMma table's regions in the worker's table buffer: the unit
  // table and its tiles' largest values (null where the plan has none).
  struct PlaidUnits {
    int32_t* units = nullptr;
    float* units_max = nullptr;
  };
  PlaidUnits plaid_units() const;

  // Runs `fn` (which enqueues a top-k pass) between a timing event pair,
  // while pairs last.
  template <typename Fn>
  absl::Status Timed(Fn&& fn);

  // Copies `bytes` at `src` (pinned host memory) into stream buffer b on
  // the copy stream, once the kernels that last read b are done; the
  // compute stream waits for the copy.
  absl::Status StreamIn(int b, const void* src, int64_t bytes);
  // Marks the kernels reading stream buffer b as enqueued.
  absl::Status StreamDone(int b);

  // Copies the running top-k to the host ring; its positions are relative
  // to `base`, or to each query's query_base (per_query_base).
  absl::Status Fetch(int64_t base, bool per_query_base);

  // Waits for the search, merges the fetched results, fills `timing`.
  absl::Status Finish(int64_t host_start, int64_t host_staged,
                      SearchTiming* timing);

 private:
  struct Pending {
    int64_t base = 0;
    int64_t offset = 0;
    bool per_query_base = false;
  };
  void MergePending();

  Worker& w_;
  const SearchParams& p_;
  const SearchPlan& plan_;
  const StagedInputs staged_;
  const PipelineKnobs knobs_;
  absl::Span<std::vector<ScoredDoc>> results_;
  int pairs_used_ = 0;
  bool buffer_used_[kStreamBuffers] = {};
  int64_t stream_copies_ = 0;
  std::vector<Pending> pending_;
  int64_t ring_used_ = 0;
};

// The scan of every segment's documents (p.candidate_offsets null).
absl::Status RunScan(SearchRun& run, ScanOrder& order);
// The rerank of each query's candidates.
absl::Status RunGather(SearchRun& run);

template <typename Fn>
absl::Status SearchRun::Timed(Fn&& fn) {
  const bool t = pairs_used_ < kTimingPairs;
  if (t) MAXSIMD_CUDA_CHECK(cudaEventRecord(w_.pair[pairs_used_][0], stream()));
  MAXSIMD_RETURN_IF_ERROR(fn());
  if (t) {
    MAXSIMD_CUDA_CHECK(cudaEventRecord(w_.pair[pairs_used_][1], stream()));
    ++pairs_used_;
  }
  return absl::OkStatus();
}

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_GPU_PIPELINE_H_
