// SearchRun: what the scan and gather pipelines share (pipeline.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>

#include "kernels/base/fault_injection.h"
#include "kernels/gpu/pipeline.h"
#include "kernels/plaid_qc.h"
#include "kernels/topk_cpu.h"

namespace maxsimd {

cudaError_t WaitForSearch(cudaStream_t stream) {
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess && MAXSIMD_FAULT_POINT(fault::kGpuKernel)) {
    return cudaErrorLaunchFailure;
  }
  return err;
}

absl::Status SearchRun::EncodeMaps() {
  TensorMapBytes* maps =
      reinterpret_cast<TensorMapBytes*>(w_.pinned_in + plan_.layout.maps);
  for (int64_t s = 0; s < plan_.map_slots; ++s) {
    const bool buffer = s >= plan_.nseg;
    if (!buffer && p_.segments[s].streamed) continue;  // unused
    const void* tokens =
        buffer ? w_.dev_stream[s - plan_.nseg] : p_.segments[s].resident.tokens;
    const int64_t num_tokens =
        buffer ? plan_.stream_rows : p_.segments[s].resident.num_tokens;
    TensorMapBytes* slot = maps + kTmaMapsPerSlot * s;
    for (int b = 0; b < kTmaMapsPerSlot; ++b) {
      MAXSIMD_RETURN_IF_ERROR(
          plan_.int8_mma
              ? EncodeTokenMap(DType::kFloat16, tokens, num_tokens,
                               plan_.dim / 2, kTmaBoxRows[b], &slot[b])
              : EncodeTokenMap(plan_.dtype, tokens, num_tokens, plan_.dim,
                               kTmaBoxRows[b], &slot[b]));
    }
  }
  return absl::OkStatus();
}

SearchRun::PlaidUnits SearchRun::plaid_units() const {
  const PlaidMmaPlan& mma = plan_.plaid_mma;
  char* table = reinterpret_cast<char*>(w_.plaid_table);
  PlaidUnits u;
  if (mma.units) u.units = reinterpret_cast<int32_t*>(table + mma.units_offset);
  if (mma.units_max_offset >= 0) {
    u.units_max = reinterpret_cast<float*>(table + mma.units_max_offset);
  }
  return u;
}

absl::Status SearchRun::Upload() {
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w_.start, stream()));
  MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(w_.dev_in, w_.pinned_in, staged_.used,
                                     cudaMemcpyHostToDevice, stream()));
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w_.staged, stream()));
  const PlaidMmaPlan& mma = plan_.plaid_mma;
  if (!mma.on) return absl::OkStatus();
  const PlaidTablesView& codec = p_.segments[0].resident.plaid;
  const PlaidUnits u = plaid_units();
  return LaunchPlaidQueryCentroids(
      Device<uint16_t>(plan_.layout.query + mma.rows_offset), plan_.tma.tiles,
      plan_.dim, codec.centroids, codec.num_centroids, mma.offset,
      w_.plaid_table, stream(), Device<float>(plan_.layout.q_scales), u.units,
      u.units_max != nullptr, u.units_max);
}

namespace {

// The launches of one scoring pass (SearchRun::LaunchTma), one per group
// of `group` query tiles, each over the queries with rows in its tiles.
template <typename Args>
absl::Status LaunchTileGroups(const TmaPlan& tma, int32_t nq, int64_t group,
                              Args t, cudaStream_t stream) {
  const int64_t blocks_per_tile = tma.tile_rows / 16;
  for (int64_t g0 = 0; g0 < tma.tiles; g0 += group) {
    t.tile_begin = static_cast<int32_t>(g0);
    t.num_tiles = static_cast<int32_t>(std::min(group, tma.tiles - g0));
    // Scan: the queries with rows in these tiles.
    const int64_t row0 = g0 * tma.tile_rows;
    const int64_t row1 = row0 + t.num_tiles * blocks_per_tile * 16;
    t.q_begin = nq;
    t.q_end = 0;
    for (int32_t q = 0; q < nq; ++q) {
      if (tma.place[q] < row1 && tma.place[q + 1] > row0) {
        t.q_begin = std::min(t.q_begin, q);
        t.q_end = q + 1;
      }
    }
    if (t.q_end <= t.q_begin) continue;
    MAXSIMD_RETURN_IF_ERROR(LaunchMaxSimTma(t, stream));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SearchRun::LaunchTma(TmaLaunch t, const void* rows) {
  const SearchPlan& plan = plan_;
  const TmaPlan& tma = plan.tma;
  const InputLayout& cap = plan.layout;
  t.dtype = plan.dtype;
  t.dim = plan.dim;
  t.dpad = tma.dpad;
  t.warpgroups = tma.warpgroups;
  t.q_tiles = Device<void>(cap.query);
  t.query_blocks = Device<int32_t>(cap.query_blocks);
  t.query_tiles = Device<int32_t>(cap.query_tiles);
  t.maps = Device<TensorMapBytes>(cap.maps);
  int64_t group = TmaMaxTiles(tma.warpgroups);
  if (t.records == nullptr && knobs_.tma_scan_tile_group > 0) {
    group = std::min<int64_t>(group, knobs_.tma_scan_tile_group);
  }
  const int32_t nq = plan.nq;
  // A gather block scores one query's tiles only: when no query has more
  // tiles than a block holds, one launch covers every query of the batch.
  if (t.records != nullptr) {
    int64_t most = 0;
    for (int32_t q = 0; q < nq; ++q) {
      most = std::max<int64_t>(
          most, (tma.place[q + 1] - tma.place[q] + tma.tile_rows - 1) /
                    tma.tile_rows);
    }
    if (most <= group) group = std::max<int64_t>(tma.tiles, 1);
  }
  const float* q_scales = plan.q_scaled ? Device<float>(cap.q_scales) : nullptr;
  const float* const* scales = Device<const float*>(cap.slot_scales);
  if (plan.plaid) {
    const PlaidTablesView& codec = p_.segments[0].resident.plaid;
    const int32_t* const* codes = Device<const int32_t*>(cap.slot_codes);
    const PlaidMmaPlan& mma = plan.plaid_mma;
    if (mma.on) {
      TmaPlaidMmaArgs a(t);
      a.scales = scales;
      a.codes = codes;
      a.num_centroids = codec.num_centroids;
      a.plaid_qc = w_.plaid_table;
      std::copy(std::begin(mma.levels), std::end(mma.levels),
                std::begin(a.plaid_levels));
      a.q_scales = q_scales;
      const PlaidUnits u = plaid_units();
      a.plaid_units = u.units;
      a.plaid_units_max = u.units_max;
      a.plaid_rows = rows;
      return LaunchTileGroups(tma, nq, group, a, stream());
    }
    TmaPlaidArgs a(t);
    a.scales = scales;
    a.codes = codes;
    a.centroids_f16 = codec.centroids_f16;
    a.bucket_weights = codec.bucket_weights;
    a.num_centroids = codec.num_centroids;
    return LaunchTileGroups(tma, nq, group, a, stream());
  }
  if (plan.int8) {
    TmaInt8Args a(t);
    a.scales = scales;
    a.q_scales = q_scales;
    return LaunchTileGroups(tma, nq, group, a, stream());
  }
  return LaunchTileGroups(tma, nq, group, TmaDenseArgs(t), stream());
}

absl::Status SearchRun::StreamIn(int b, const void* src, int64_t bytes) {
  if (stream_copies_++ == 0) {
    MAXSIMD_CUDA_CHECK(cudaEventRecord(w_.stream_first, w_.copy_stream));
  }
  if (buffer_used_[b]) {
    MAXSIMD_CUDA_CHECK(cudaStreamWaitEvent(w_.copy_stream, w_.consumed[b], 0));
  }
  MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(w_.dev_stream[b], src,
                                     static_cast<size_t>(bytes),
                                     cudaMemcpyHostToDevice, w_.copy_stream));
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w_.copied[b], w_.copy_stream));
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w_.stream_last, w_.copy_stream));
  MAXSIMD_CUDA_CHECK(cudaStreamWaitEvent(stream(), w_.copied[b], 0));
  buffer_used_[b] = true;
  return absl::OkStatus();
}

absl::Status SearchRun::StreamDone(int b) {
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w_.consumed[b], stream()));
  return absl::OkStatus();
}

void SearchRun::MergePending() {
  NvtxRange range("maxsimd.merge");
  const int32_t kmax = plan_.kmax;
  for (const Pending& pd : pending_) {
    for (int32_t q = 0; q < plan_.nq; ++q) {
      const uint64_t* keys = w_.pinned_out + pd.offset + int64_t{q} * kmax;
      const int64_t base = pd.per_query_base ? plan_.query_base[q] : pd.base;
      std::vector<ScoredDoc> seg;
      for (int32_t i = 0; i < p_.top_k[q] && keys[i] != 0; ++i) {
        seg.push_back(DecodeTopKKey(keys[i], base));
      }
      MergeRanked(&results_[q], std::move(seg), p_.top_k[q]);
    }
  }
  pending_.clear();
  ring_used_ = 0;
}

absl::Status SearchRun::Fetch(int64_t base, bool per_query_base) {
  const int64_t result_entries = static_cast<int64_t>(plan_.nq) * plan_.kmax;
  if (ring_used_ + result_entries > w_.out_entries) {
    MAXSIMD_CUDA_CHECK(cudaStreamSynchronize(stream()));
    MergePending();
  }
  MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(w_.pinned_out + ring_used_, w_.topk,
                                     result_entries * sizeof(uint64_t),
                                     cudaMemcpyDeviceToHost, stream()));
  pending_.push_back({base, ring_used_, per_query_base});
  ring_used_ += result_entries;
  return absl::OkStatus();
}

absl::Status SearchRun::Finish(int64_t host_start, int64_t host_staged,
                               SearchTiming* timing) {
  MAXSIMD_CUDA_CHECK(WaitForSearch(stream()));
  MergePending();
  if (timing == nullptr) return absl::OkStatus();
  float ms_h2d = 0, ms_wait = 0, ms_total = 0, ms_topk = 0;
  MAXSIMD_CUDA_CHECK(cudaEventElapsedTime(&ms_h2d, w_.start, w_.staged));
  MAXSIMD_CUDA_CHECK(cudaEventElapsedTime(&ms_wait, w_.staged, w_.ready));
  MAXSIMD_CUDA_CHECK(cudaEventElapsedTime(&ms_total, w_.ready, w_.done));
  for (int i = 0; i < pairs_used_; ++i) {
    float ms = 0;
    MAXSIMD_CUDA_CHECK(cudaEventElapsedTime(&ms, w_.pair[i][0], w_.pair[i][1]));
    ms_topk += ms;
  }
  // Streamed host-placed tokens: the span of their copies, which overlaps
  // the kernels (so kernel_ns includes any wait for them).
  if (stream_copies_ > 0) {
    float ms_stream = 0;
    MAXSIMD_CUDA_CHECK(cudaEventSynchronize(w_.stream_last));
    MAXSIMD_CUDA_CHECK(
        cudaEventElapsedTime(&ms_stream, w_.stream_first, w_.stream_last));
    ms_h2d += ms_stream;
  }
  timing->h2d_ns =
      (host_staged - host_start) + static_cast<int64_t>(ms_h2d * 1e6);
  timing->topk_ns = static_cast<int64_t>(ms_topk * 1e6);
  timing->device_wait_ns = static_cast<int64_t>(ms_wait * 1e6);
  // The D2H copies of the results are small and overlap the next segment's
  // work; what remains after the last kernel is host merging.
  timing->d2h_ns = 0;
  timing->kernel_ns =
      std::max<int64_t>(0, static_cast<int64_t>((ms_total - ms_topk) * 1e6));
  return absl::OkStatus();
}

}  // namespace maxsimd
