// The scan pipeline: per segment, per chunk of documents, zero the scores
// (when a query is empty), one MaxSim scan launch, one top-k select merged
// into the running result; then the segment's top k to the host. A
// host-placed segment streams its chunks of whole documents through the
// worker's two buffers in turn, so chunk i + 1's copy overlaps chunk i's
// kernels.
#include <cuda_runtime.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/pipeline.h"
#include "kernels/maxsim_scan.h"

namespace maxsimd {
namespace {

// Scores documents [c0, c0 + clen) of segment s, whose tokens are read from
// `tokens` (map slot `slot` on the TMA path) starting at segment row
// `row_base`, and merges them into the running top-k.
absl::Status ScoreChunk(SearchRun& run, size_t s, int64_t c0, int64_t clen,
                        const void* tokens, int64_t slot, int64_t row_base) {
  const SearchParams& p = run.params();
  const SearchPlan& plan = run.plan();
  const PipelineKnobs& knobs = run.knobs();
  Worker& w = run.worker();
  const SegmentView& v = p.segments[s].resident;
  if (plan.empty_query) {
    MAXSIMD_CUDA_CHECK(cudaMemsetAsync(
        w.scores, 0, static_cast<size_t>(plan.nq) * clen * sizeof(float),
        run.stream()));
  }
  if (plan.tma.on) {
    TmaLaunch t;
    t.map_slot = static_cast<int32_t>(slot);
    t.scan_box_rows = knobs.tma_scan_box_rows == 16 ? 16 : 64;
    t.cu_seqlens = v.cu_seqlens;
    t.row_base = row_base;
    t.tombstones = v.tombstones;
    t.doc_begin = c0;
    t.num_docs = clen;
    // About eight waves of blocks: even finishing times on ragged
    // documents, and few enough blocks that each one's pipeline fill is
    // amortised. (Batched scans measured the same with one to four waves,
    // 5% slower with sixteen: bench/NOTES.md s4.)
    const int64_t slots =
        int64_t{knobs.sm_count} *
        TmaBlocksPerSm(plan.tma.warpgroups, plan.int8_mma ? plan.dim : 0) * 8;
    t.docs_per_unit = knobs.tma_scan_docs_per_unit > 0
                          ? knobs.tma_scan_docs_per_unit
                          : std::max<int64_t>(1, (clen + slots - 1) / slots);
    t.scores = w.scores;
    t.score_stride = clen;
    // The PLAID scan kernel reads resident rows directly.
    MAXSIMD_RETURN_IF_ERROR(
        run.LaunchTma(t, p.segments[s].streamed ? nullptr : tokens));
  } else {
    ScanLaunchParams sp;
    sp.dtype = plan.dtype;
    sp.dim = plan.dim;
    sp.dpad = plan.dpad;
    sp.query = run.Device<void>(plan.layout.query);
    sp.q_scales =
        plan.q_scaled ? run.Device<float>(plan.layout.q_scales) : nullptr;
    sp.row_query = run.Device<int32_t>(plan.layout.row_query);
    sp.query_offsets = run.Device<int64_t>(plan.layout.query_offsets);
    sp.rows_total = plan.rows;
    sp.tokens = tokens;
    sp.scales = v.scales;  // int8 (never streamed): rows from row_base 0
    sp.row_base = row_base;
    sp.cu_seqlens = v.cu_seqlens;
    sp.tombstones = v.tombstones;
    sp.doc_begin = c0;
    sp.num_docs = clen;
    sp.scores = w.scores;
    sp.score_stride = clen;
    sp.row_tiles = ChooseRowTiles(plan.rows, plan.dpad);
    MAXSIMD_RETURN_IF_ERROR(LaunchMaxSimScan(sp, run.stream()));
  }
  TopKSource src;
  src.scores = w.scores;
  src.position_base = static_cast<uint32_t>(c0);
  src.tombstones = v.tombstones;
  src.row_stride = clen;
  src.row_len = clen;
  return run.Timed([&] {
    return SelectTopK(src, plan.nq, clen,
                      run.Device<int32_t>(plan.layout.top_k), plan.kmax, c0 > 0,
                      w.topk, w.ws, run.stream());
  });
}

// A device-resident segment in chunks of one size: no short last launch,
// which would cost nearly a full one's fixed time for few documents.
absl::Status ScanResident(SearchRun& run, size_t s, int64_t chunk) {
  const SegmentView& v = run.params().segments[s].resident;
  const int64_t parts = (v.num_docs + chunk - 1) / chunk;
  const int64_t even = (v.num_docs + parts - 1) / parts;
  for (int64_t c0 = 0; c0 < v.num_docs; c0 += even) {
    MAXSIMD_RETURN_IF_ERROR(ScoreChunk(
        run, s, c0, std::min(even, v.num_docs - c0), v.tokens, s, 0));
  }
  return absl::OkStatus();
}

// A host-placed segment: chunks of whole documents that fit a stream
// buffer, alternating buffers. `streamed_chunks` counts the search's
// streamed chunks so far (it picks the buffer).
absl::Status ScanStreamed(SearchRun& run, size_t s, int64_t chunk,
                          int64_t* streamed_chunks) {
  const SearchParams& p = run.params();
  const SearchPlan& plan = run.plan();
  const SegmentView& v = p.segments[s].resident;
  const int64_t* cu = p.segments[s].host.cu_seqlens;
  const char* host_tokens = static_cast<const char*>(v.tokens);
  for (int64_t c0 = 0; c0 < v.num_docs;) {
    const int64_t t0 = cu[c0];
    const int64_t limit = std::min(v.num_docs, c0 + chunk);
    const int64_t c1 =
        std::upper_bound(cu + c0 + 1, cu + limit + 1, t0 + plan.stream_rows) -
        cu - 1;
    if (c1 == c0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GpuBackend::Search: document ", c0, " of segments[", s, "] has ",
          cu[c0 + 1] - t0, " token rows, more than a stream buffer holds (",
          plan.stream_rows, "; stream_buffer_bytes / (2 x dim))"));
    }
    const int b = static_cast<int>((*streamed_chunks)++ % kStreamBuffers);
    MAXSIMD_RETURN_IF_ERROR(run.StreamIn(b, host_tokens + t0 * plan.row_bytes,
                                         (cu[c1] - t0) * plan.row_bytes));
    MAXSIMD_RETURN_IF_ERROR(ScoreChunk(
        run, s, c0, c1 - c0, run.worker().dev_stream[b], plan.nseg + b, t0));
    MAXSIMD_RETURN_IF_ERROR(run.StreamDone(b));
    c0 = c1;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunScan(SearchRun& run, ScanOrder& order) {
  NvtxRange range("maxsimd.scan");
  const SearchParams& p = run.params();
  Worker& w = run.worker();
  // In device order with the other scans (serialize_scans): the lock is
  // held until this scan's done event is recorded.
  std::optional<absl::MutexLock> in_order;
  if (order.serialize) {
    in_order.emplace(&order.mu);
    order.mu.AssertHeld();
    if (order.last_done != nullptr) {
      MAXSIMD_CUDA_CHECK(cudaStreamWaitEvent(run.stream(), order.last_done, 0));
    }
  }
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w.ready, run.stream()));
  const int64_t chunk = std::max<int64_t>(
      1,
      std::min<int64_t>(w.score_entries / run.plan().nq, int64_t{0xfffffffe}));
  int64_t streamed_chunks = 0;
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const SegmentView& v = p.segments[s].resident;
    if (v.num_docs == 0) continue;
    MAXSIMD_RETURN_IF_ERROR(p.segments[s].streamed
                                ? ScanStreamed(run, s, chunk, &streamed_chunks)
                                : ScanResident(run, s, chunk));
    MAXSIMD_RETURN_IF_ERROR(run.Fetch(v.base_index, false));
  }
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w.done, run.stream()));
  if (in_order.has_value()) {
    order.mu.AssertHeld();
    order.last_done = w.done;
  }
  return absl::OkStatus();
}

}  // namespace maxsimd
