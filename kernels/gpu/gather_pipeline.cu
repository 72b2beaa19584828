// The gather (rerank) pipeline: zero the scores (when a query is empty),
// score every (query, candidate) record's work units in one launch, or in
// rounds whose host-placed rows are packed into pinned buffers and copied
// first, then one top-k select over each query's records and its D2H.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>

#include "kernels/gpu/pipeline.h"
#include "kernels/maxsim_gather.h"
#include "kernels/maxsim_scan.h"

namespace maxsimd {
namespace {

// Scores work units [u0, u1).
absl::Status ScoreUnits(SearchRun& run, int64_t u0, int64_t u1) {
  const SearchPlan& plan = run.plan();
  const InputLayout& cap = plan.layout;
  const GatherTile* units = run.Device<GatherTile>(cap.tiles);
  if (plan.tma.on) {
    TmaLaunch t;
    t.records = run.Device<TmaRecord>(cap.records);
    t.units = units + u0;
    t.num_units = u1 - u0;
    t.scores = run.worker().scores;
    return run.LaunchTma(t);
  }
  GatherLaunchParams g;
  g.dtype = plan.dtype;
  g.dim = plan.dim;
  g.dpad = plan.dpad;
  g.query = run.Device<void>(cap.query);
  g.query_offsets = run.Device<int64_t>(cap.query_offsets);
  g.q_scales = plan.q_scaled ? run.Device<float>(cap.q_scales) : nullptr;
  g.records = run.Device<GatherRecord>(cap.records);
  g.tiles = units + u0;
  g.num_tiles = u1 - u0;
  g.scores = run.worker().scores;
  g.row_tiles = ChooseRowTiles(plan.rows, plan.dpad);
  return LaunchMaxSimGather(g, run.stream());
}

// Host-placed candidates: round r's rows are packed into pinned buffer
// r % 2 (once the copy of round r - 2 out of it is done), copied, and
// scored; packing round r + 1 overlaps the GPU's work on round r.
absl::Status ScoreRounds(SearchRun& run) {
  Worker& w = run.worker();
  const StagedInputs& staged = run.staged();
  const int64_t row_bytes = run.plan().row_bytes;
  for (size_t r = 0; r < staged.rounds.size(); ++r) {
    const StreamRound& round = staged.rounds[r];
    const int b = static_cast<int>(r % kStreamBuffers);
    if (r >= kStreamBuffers) {
      MAXSIMD_CUDA_CHECK(cudaEventSynchronize(w.copied[b]));
    }
    {
      NvtxRange pack("maxsimd.pack_streamed");
      w.pack_pool->ParallelFor(
          static_cast<int64_t>(round.rec_end - round.rec_begin), 16,
          [&](int, int64_t k0, int64_t k1) {
            for (int64_t k = k0; k < k1; ++k) {
              const StreamedRecord& sr =
                  staged.streamed_recs[round.rec_begin + k];
              std::memcpy(
                  w.pinned_stream[b] + (sr.row - round.row_begin) * row_bytes,
                  sr.src, sr.len * row_bytes);
            }
          });
    }
    MAXSIMD_RETURN_IF_ERROR(
        run.StreamIn(b, w.pinned_stream[b], round.rows * row_bytes));
    MAXSIMD_RETURN_IF_ERROR(ScoreUnits(run, round.unit_begin, round.unit_end));
    MAXSIMD_RETURN_IF_ERROR(run.StreamDone(b));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunGather(SearchRun& run) {
  NvtxRange range("maxsimd.gather");
  Worker& w = run.worker();
  const SearchPlan& plan = run.plan();
  const StagedInputs& staged = run.staged();
  const InputLayout& cap = plan.layout;
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w.ready, run.stream()));
  if (staged.num_records > 0) {
    if (plan.empty_query) {
      MAXSIMD_CUDA_CHECK(cudaMemsetAsync(
          w.scores, 0, staged.num_records * sizeof(float), run.stream()));
    }
    if (staged.rounds.empty()) {
      MAXSIMD_RETURN_IF_ERROR(ScoreUnits(run, 0, staged.num_units));
    }
    MAXSIMD_RETURN_IF_ERROR(ScoreRounds(run));
    TopKSource src;
    src.scores = w.scores;
    src.positions = run.Device<uint32_t>(cap.records) +
                    offsetof(GatherRecord, position) / sizeof(uint32_t);
    // The TMA path's records are TmaRecords (16 bytes), the mma.sync
    // path's GatherRecords (24: int8 rows' scales); `position` is at the
    // same offset in both (launch_shapes.h).
    src.position_stride =
        (plan.tma.on ? sizeof(TmaRecord) : sizeof(GatherRecord)) /
        sizeof(uint32_t);
    src.row_offsets = run.Device<int64_t>(cap.rec_offsets);
    MAXSIMD_RETURN_IF_ERROR(run.Timed([&] {
      return SelectTopK(src, plan.nq, staged.max_row,
                        run.Device<int32_t>(cap.top_k), plan.kmax, false,
                        w.topk, w.ws, run.stream());
    }));
    MAXSIMD_RETURN_IF_ERROR(run.Fetch(0, true));
  }
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w.done, run.stream()));
  return absl::OkStatus();
}

}  // namespace maxsimd
