// The GPU Backend: worker slots (stream + workspace + pinned staging, all
// allocated in Create), request planning, and the scan / gather pipelines:
//
//   stage queries (fp32 -> corpus dtype, pinned) -> one H2D
//   scan:   per segment, per chunk of documents: zero scores, MaxSim scan
//           kernel, top-k select merged into the running result; D2H of
//           each segment's top k; the host merges segments
//   gather: zero scores, one MaxSim gather launch over every (query,
//           candidate) record, top-k select, D2H
//
// Host-placed segments (SegmentRef::streamed) keep their tokens in pinned
// host memory. A scan copies them on the worker's copy stream, in chunks of
// whole documents, into two device buffers in turn, so chunk i + 1's copy
// overlaps chunk i's kernels; the kernels read a buffer at row_base. A
// rerank packs its host-placed candidates' rows into pinned buffers in
// rounds (several threads), copies each round, and scores its work units.
//
// Two kernel families score: the Hopper TMA + wgmma kernel (maxsim_tma.h)
// wherever it applies, with queries staged in its swizzled tile layout and a
// tensor map per segment; the mma.sync kernels (maxsim_scan.h,
// maxsim_gather.h) for every other width.
//
// AssignNearestCentroids() runs the k-means assignment of PLAID codec
// training (kmeans.h) on its own two streams, with scratch allocated for
// the call.
//
// Nothing here allocates on the request path; Upload() is the write path.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/base/fault_injection.h"
#include "kernels/base/status_macros.h"
#include "kernels/base/thread_pool.h"
#include "kernels/cuda_check.cuh"
#include "kernels/element.h"
#include "kernels/gpu_backend.h"
#include "kernels/kmeans.h"
#include "kernels/maxsim_gather.h"
#include "kernels/maxsim_scan.h"
#include "kernels/maxsim_tma.h"
#include "kernels/plaid_bits.h"
#include "kernels/quantize.h"
#include "kernels/topk.h"

namespace maxsimd {
namespace {

// The widest embedding the pass tile of the MaxSim kernels holds in shared
// memory (32 rows x 2048 x 2 bytes).
constexpr int32_t kGpuMaxDim = 2048;
constexpr size_t kAlign = 256;
// Event pairs per worker for splitting kernel time into scoring and top-k.
constexpr int kTimingPairs = 32;
// Segments one search may touch on the TMA path (a tensor map each).
constexpr int64_t kMaxTmaSegments = 1024;
// Buffers per worker for streaming host-placed tokens (double buffering).
constexpr int kStreamBuffers = 2;
// Threads per worker packing a rerank's host-placed rows: one thread's
// memcpy moves about 8 GB/s, a few keep up with the bus.
constexpr int kPackThreads = 4;
// AssignNearestCentroids copies tokens to the device in chunks of about
// this many fp32 values (64 MB), two buffers in turn, so that the copy of
// chunk i + 1 overlaps the kernel on chunk i.
constexpr int64_t kAssignChunkValues = int64_t{1} << 24;

size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Every cudaMalloc of the backend. Fault point fault::kGpuMalloc fails it
// as a device without room does.
cudaError_t DeviceMalloc(void** ptr, size_t bytes) {
  if (MAXSIMD_FAULT_POINT(fault::kGpuMalloc)) return cudaErrorMemoryAllocation;
  return cudaMalloc(ptr, bytes);
}
template <typename T>
cudaError_t DeviceMalloc(T** ptr, size_t bytes) {
  return DeviceMalloc(reinterpret_cast<void**>(ptr), bytes);
}

// The wait for a search's work on `stream`, where a fault of its kernels
// (an illegal address, a trap) surfaces. Fault point fault::kGpuKernel
// reports such a fault after the wait, as the runtime does.
cudaError_t WaitForSearch(cudaStream_t stream) {
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess && MAXSIMD_FAULT_POINT(fault::kGpuKernel)) {
    return cudaErrorLaunchFailure;
  }
  return err;
}

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// Restores the calling thread's current device on scope exit, so that a
// backend on device N leaves its callers' CUDA state as it found it.
class DeviceGuard {
 public:
  // Always sets the device, even when it is already the current one: on a
  // thread that has made no runtime call yet, cudaSetDevice is what makes
  // the primary context current, which driver calls (tensor map encoding)
  // need.
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    MAXSIMD_CUDA_CHECK_NOTHROW(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess &&
        now != previous_) {
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// One Upload()'s device memory. `held` counts the bytes of every live
// buffer of its backend (shared, so a buffer may outlive the backend).
class DeviceBuffer final : public ResidentBuffer {
 public:
  DeviceBuffer(int device, void* ptr, size_t bytes,
               std::shared_ptr<std::atomic<int64_t>> held)
      : device_(device), ptr_(ptr), bytes_(bytes), held_(std::move(held)) {
    held_->fetch_add(static_cast<int64_t>(bytes_));
  }
  ~DeviceBuffer() override {
    held_->fetch_sub(static_cast<int64_t>(bytes_));
    if (ptr_ == nullptr) return;
    DeviceGuard guard(device_);
    MAXSIMD_CUDA_CHECK_NOTHROW(cudaFree(ptr_));
  }
  const void* data() const override { return ptr_; }
  size_t bytes() const override { return bytes_; }

 private:
  int device_;
  void* ptr_;
  size_t bytes_;
  std::shared_ptr<std::atomic<int64_t>> held_;
};

// One Pin()'s page lock on host memory the caller owns. `held` counts the
// bytes of every live pinned buffer of its backend.
class PinnedBuffer final : public ResidentBuffer {
 public:
  PinnedBuffer(const void* ptr, size_t bytes, bool registered,
               std::shared_ptr<std::atomic<int64_t>> held)
      : ptr_(ptr),
        bytes_(bytes),
        registered_(registered),
        held_(std::move(held)) {
    held_->fetch_add(static_cast<int64_t>(bytes_));
  }
  ~PinnedBuffer() override {
    held_->fetch_sub(static_cast<int64_t>(bytes_));
    if (registered_) {
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaHostUnregister(const_cast<void*>(ptr_)));
    }
  }
  const void* data() const override { return ptr_; }
  size_t bytes() const override { return bytes_; }

 private:
  const void* ptr_;
  size_t bytes_;
  bool registered_;
  std::shared_ptr<std::atomic<int64_t>> held_;
};

// Offsets of one request's inputs inside the staging blob; the pinned and
// device blobs share the layout, so one H2D copy moves them all.
struct InputLayout {
  size_t query = 0, row_query = 0, query_offsets = 0, top_k = 0;
  size_t query_blocks = 0, query_tiles = 0, maps = 0, slot_scales = 0;
  size_t slot_codes = 0;
  size_t q_scales = 0;
  size_t rec_offsets = 0, records = 0, tiles = 0, end = 0;

  static InputLayout Make(int64_t query_bytes, int64_t rows, int32_t nq,
                          int64_t slots, int64_t q_scale_rows, int64_t records,
                          int64_t tiles) {
    InputLayout l;
    size_t at = 0;
    auto take = [&at](size_t bytes) {
      const size_t here = at;
      at = AlignUp(at + bytes);
      return here;
    };
    l.query = take(query_bytes);
    l.row_query = take(rows * sizeof(int32_t));
    l.query_offsets = take((nq + 1) * sizeof(int64_t));
    l.top_k = take(nq * sizeof(int32_t));
    l.query_blocks = take((nq + 1) * sizeof(int32_t));
    l.query_tiles = take((nq + 1) * sizeof(int32_t));
    l.maps = take(slots * kTmaMapsPerSlot * sizeof(TensorMapBytes));
    l.slot_scales = take(slots * sizeof(const float*));
    l.slot_codes = take(slots * sizeof(const int32_t*));
    l.q_scales = take(q_scale_rows * sizeof(float));
    l.rec_offsets = take((nq + 1) * sizeof(int64_t));
    l.records = take(records * sizeof(GatherRecord));
    l.tiles = take(tiles * sizeof(GatherTile));
    l.end = at;
    return l;
  }
};

// The TMA path's host plan of one request.
struct TmaPlan {
  bool on = false;
  int32_t warpgroups = 1;
  int32_t tile_rows = 32;
  int32_t dpad = 0;
  std::vector<int64_t> place;  // [nq + 1]: staged row of each query's row 0
  int64_t tiles = 0;           // staged tiles
};

int64_t MaxTiles(const BackendLimits& limits) {
  return limits.max_batch_candidates / kGatherRecordsPerTile +
         limits.max_batch_queries;
}

// A rerank candidate of a host-placed segment: gather record `record`,
// whose `len` rows at `src` (pinned host memory) take rows [row, row + len)
// of the packed order of all such candidates' rows.
struct StreamedRecord {
  int64_t record = 0;
  const char* src = nullptr;
  int64_t len = 0;
  int64_t row = 0;
};

// Work units [unit_begin, unit_end) of a rerank whose host-placed rows,
// streamed_recs [rec_begin, rec_end) = packed rows [row_begin, row_begin +
// rows), fit one stream buffer.
struct StreamRound {
  int64_t unit_begin = 0, unit_end = 0;
  size_t rec_begin = 0, rec_end = 0;
  int64_t row_begin = 0, rows = 0;
};

// Splits the work units (each a contiguous run of records, in record
// order) into rounds of about `target_rows` host-placed rows, never more
// than `buffer_rows` (a unit past the target goes alone).
absl::Status PlanStreamedRounds(const GatherTile* units, int64_t num_units,
                                int64_t buffer_rows, int64_t target_rows,
                                const std::vector<StreamedRecord>& recs,
                                std::vector<StreamRound>* rounds) {
  StreamRound cur;
  size_t k = 0;
  for (int64_t u = 0; u < num_units; ++u) {
    size_t end = k;
    int64_t rows = 0;
    while (end < recs.size() && recs[end].record < units[u].rec_end) {
      rows += recs[end++].len;
    }
    if (rows > buffer_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GpuBackend::Search: one work unit's host-placed candidates hold ",
          rows, " token rows, a stream buffer ", buffer_rows,
          " (stream_buffer_bytes / (2 x dim))"));
    }
    if (cur.rows > 0 && cur.rows + rows > target_rows) {
      cur.unit_end = u;
      cur.rec_end = k;
      rounds->push_back(cur);
      cur = StreamRound();
      cur.unit_begin = u;
      cur.rec_begin = k;
      cur.row_begin = recs[k].row;
    }
    cur.rows += rows;
    k = end;
  }
  cur.unit_end = num_units;
  cur.rec_end = k;
  rounds->push_back(cur);
  return absl::OkStatus();
}

// One worker slot. Owned by the backend; used by one Search() at a time.
struct Worker {
  cudaStream_t stream = nullptr;
  // staged: the query inputs are on the device; ready: the search may
  // start its kernels (a scan waits for the scans before it first).
  cudaEvent_t start = nullptr, staged = nullptr, ready = nullptr,
              done = nullptr;
  cudaEvent_t pair[kTimingPairs][2] = {};
  char* pinned_in = nullptr;  // InputLayout at capacity
  char* dev_in = nullptr;
  size_t in_bytes = 0;
  uint64_t* pinned_out = nullptr;  // ring of per-segment results
  int64_t out_entries = 0;
  float* scores = nullptr;  // scan chunk or gather records
  int64_t score_entries = 0;
  uint64_t* topk = nullptr;  // [max_batch_queries, kMaxTopK]
  TopKWorkspace ws;
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
  // The PlaidMma query-centroid table (GpuBackendOptions::plaid_int8_mma),
  // allocated on first use and grown as needed.
  uint32_t* plaid_table = nullptr;
  int64_t plaid_table_bytes = 0;
};

// How a PLAID batch runs on the int8 MMA (TmaPlaidUsesMma), if it does.
struct PlaidMmaPlan {
  bool on = false;
  int64_t rows_offset = 0;   // the float16 rows, after the int8 codes
  int64_t staged_bytes = 0;  // both, in the query region
  float step = 1.f;          // PlaidMmaLevels
  float offset = 0.f;
  int8_t levels[16] = {};
  // A scan at 2 or 4 bits on the warp kernel (plaid_warp_scan): the table
  // in row-factor units follows the float16 one, at this offset.
  bool units = false;
  int64_t units_offset = 0;
};

// The worker's table in row-factor units when `plan` has one, else null.
int32_t* PlaidUnits(const Worker& w, const PlaidMmaPlan& plan) {
  if (!plan.on || !plan.units) return nullptr;
  return reinterpret_cast<int32_t*>(reinterpret_cast<char*>(w.plaid_table) +
                                    plan.units_offset);
}

// The tiles' largest |value| of an int16 table in row-factor units
// (PlaidUnitsInt16), after the tables (PlaidUnitsTableBytes), else null.
float* PlaidUnitsMax(const Worker& w, const PlaidMmaPlan& plan, int64_t tiles,
                     int64_t num_centroids, int nbits) {
  int32_t* units = PlaidUnits(w, plan);
  if (units == nullptr || !PlaidUnitsInt16(nbits)) return nullptr;
  return reinterpret_cast<float*>(reinterpret_cast<char*>(units) +
                                  tiles * num_centroids * 128);
}

class GpuBackendImpl final : public Backend {
 public:
  explicit GpuBackendImpl(const GpuBackendOptions& options)
      : options_(options) {
    options_.limits.max_dim = std::min(options_.limits.max_dim, kGpuMaxDim);
  }
  ~GpuBackendImpl() override;

  absl::Status Init();

  std::string name() const override {
    return absl::StrCat("gpu:", options_.device);
  }
  const BackendLimits& limits() const override { return options_.limits; }
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Upload(const void* host,
                                                         size_t bytes) override;
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Pin(const void* host,
                                                      size_t bytes) override;
  absl::Status Search(const SearchParams& params,
                      absl::Span<std::vector<ScoredDoc>> results,
                      SearchTiming* timing) override;
  std::string description() const override { return description_; }
  bool healthy() const override { return healthy_.load(); }
  // Int8 and PLAID corpora take the TMA kernel only, at the widths it
  // widens (decodes) whole.
  bool SupportsDType(DType dtype, int32_t dim) const override {
    if (dtype == DType::kInt8) {
      return options_.use_tma && TmaSupportsInt8Dim(dim);
    }
    if (PlaidNbits(dtype) > 0) {
      return options_.use_tma && TmaSupportsPlaidDim(dim, PlaidNbits(dtype));
    }
    return dtype == DType::kFloat16 || dtype == DType::kBFloat16;
  }
  // The stream buffers carry token rows only, no scales or centroid ids.
  bool StreamsDType(DType dtype) const override {
    return dtype != DType::kInt8 && PlaidNbits(dtype) == 0;
  }
  std::vector<DeviceMemory> Memory() const override;
  absl::Status AssignNearestCentroids(absl::Span<const float> tokens,
                                      absl::Span<const float> centroids,
                                      int32_t dim,
                                      absl::Span<int64_t> codes) override;
  bool AssignsNearestCentroids() const override { return true; }

 private:
  struct Plan;  // one request's host-side plan

  // `bytes` of device memory counted with the corpus arrays (against
  // corpus_budget_bytes) while the buffer lives. `what` names the caller
  // in errors. REQUIRES: bytes > 0.
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> AllocateCounted(
      size_t bytes, const char* what);
  absl::Status RunAssign(absl::Span<const float> tokens,
                         absl::Span<const float> centroids, int32_t dim,
                         absl::Span<int64_t> codes);

  absl::Status InitWorker(Worker* w);
  int AcquireWorker();
  void ReleaseWorker(int index);
  // Marks the backend unhealthy when `st` is a device failure.
  absl::Status Sticky(absl::Status st);
  // Decides whether the TMA kernel scores this request, and where each
  // query's rows go in its staged tiles.
  TmaPlan PlanTma(const SearchParams& p, bool gather) const;
  // Makes w's PlaidMma table hold at least `bytes`; false (the batch then
  // takes the float16 decode) when the device has no room.
  bool ReservePlaidTable(Worker& w, int64_t bytes);
  absl::Status RunSearch(Worker& w, const SearchParams& p, DType dtype,
                         absl::Span<std::vector<ScoredDoc>> results,
                         SearchTiming* timing);

  GpuBackendOptions options_;
  int sm_count_ = 1;
  std::atomic<bool> healthy_{true};
  std::string description_;  // set by Init()
  std::shared_ptr<std::atomic<int64_t>> corpus_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> pinned_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
  int64_t workspace_bytes_ = 0;  // device bytes of the workers, set by Init
  cudaStream_t upload_stream_ = nullptr;
  absl::Mutex upload_mu_;  // serialises Upload()'s budget check and malloc
  std::vector<Worker> workers_;
  absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
  // Scans in device order (options_.serialize_scans): held while a scan
  // enqueues its kernels; each one's stream first waits for the done event
  // of the scan enqueued before it.
  absl::Mutex scan_order_mu_;
  cudaEvent_t last_scan_done_ ABSL_GUARDED_BY(scan_order_mu_) = nullptr;
};

GpuBackendImpl::~GpuBackendImpl() {
  DeviceGuard guard(options_.device);
  for (Worker& w : workers_) {
    if (w.stream != nullptr)
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(w.stream));
    if (w.copy_stream != nullptr)
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(w.copy_stream));
    for (cudaEvent_t e :
         {w.start, w.staged, w.ready, w.done, w.stream_first, w.stream_last,
          w.copied[0], w.copied[1], w.consumed[0], w.consumed[1]}) {
      if (e != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
    }
    if (w.plaid_table != nullptr)
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaFree(w.plaid_table));
    for (int b = 0; b < kStreamBuffers; ++b) {
      if (w.dev_stream[b])
        MAXSIMD_CUDA_CHECK_NOTHROW(cudaFree(w.dev_stream[b]));
      if (w.pinned_stream[b])
        MAXSIMD_CUDA_CHECK_NOTHROW(cudaFreeHost(w.pinned_stream[b]));
    }
    if (w.copy_stream != nullptr)
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamDestroy(w.copy_stream));
    for (auto& p : w.pair) {
      for (cudaEvent_t e : p) {
        if (e != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
      }
    }
    if (w.pinned_in) MAXSIMD_CUDA_CHECK_NOTHROW(cudaFreeHost(w.pinned_in));
    if (w.pinned_out) MAXSIMD_CUDA_CHECK_NOTHROW(cudaFreeHost(w.pinned_out));
    for (void* p :
         {static_cast<void*>(w.dev_in), static_cast<void*>(w.scores),
          static_cast<void*>(w.topk), static_cast<void*>(w.ws.partial[0]),
          static_cast<void*>(w.ws.partial[1])}) {
      if (p != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaFree(p));
    }
    if (w.stream != nullptr)
      MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamDestroy(w.stream));
  }
  if (upload_stream_ != nullptr) {
    MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamDestroy(upload_stream_));
  }
}

absl::Status GpuBackendImpl::Init() {
  MAXSIMD_CUDA_CHECK(cudaSetDevice(options_.device));
  MAXSIMD_CUDA_CHECK(cudaDeviceGetAttribute(
      &sm_count_, cudaDevAttrMultiProcessorCount, options_.device));
  cudaDeviceProp prop;
  MAXSIMD_CUDA_CHECK(cudaGetDeviceProperties(&prop, options_.device));
  MAXSIMD_CUDA_CHECK(
      cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking));
  // The TMA kernels run where the driver loaded sm_90a code for them: on
  // Hopper, from a build that carries it. Everywhere else the mma.sync
  // kernels serve the dense layouts, and int8 and PLAID are refused.
  MAXSIMD_ASSIGN_OR_RETURN(const bool tma_loaded,
                           TmaKernelsLoaded(upload_stream_));
  if (!tma_loaded) options_.use_tma = false;
  description_ = absl::StrCat(
      name(), " (", prop.name, ", compute capability ", prop.major, ".",
      prop.minor,
      tma_loaded ? ")"
                 : ", without the Hopper kernels: sm_90 and a build with "
                   "sm_90a code)");
  workers_.resize(options_.num_workers);
  for (int i = 0; i < options_.num_workers; ++i) {
    MAXSIMD_RETURN_IF_ERROR(InitWorker(&workers_[i]));
    absl::MutexLock lock(&mu_);
    free_.push_back(i);
  }
  return absl::OkStatus();
}

absl::Status GpuBackendImpl::InitWorker(Worker* w) {
  const BackendLimits& lim = options_.limits;
  MAXSIMD_CUDA_CHECK(
      cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&w->start, &w->staged, &w->ready, &w->done}) {
    MAXSIMD_CUDA_CHECK(cudaEventCreate(e));
  }
  for (auto& p : w->pair) {
    MAXSIMD_CUDA_CHECK(cudaEventCreate(&p[0]));
    MAXSIMD_CUDA_CHECK(cudaEventCreate(&p[1]));
  }
  const InputLayout cap = InputLayout::Make(
      options_.max_query_elements * 2, lim.max_batch_query_tokens,
      lim.max_batch_queries, kMaxTmaSegments + kStreamBuffers,
      // Staged rows: at least 64 elements each.
      options_.max_query_elements / 64, lim.max_batch_candidates,
      MaxTiles(lim));
  w->in_bytes = cap.end;
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
      std::max(options_.scan_chunk_entries, lim.max_batch_candidates);
  MAXSIMD_CUDA_CHECK(
      DeviceMalloc(&w->scores, w->score_entries * sizeof(float)));
  // The longest top-k row: a scan chunk (<= scan_chunk_entries documents)
  // or one query's candidates.
  w->ws.entries = TopKWorkspaceEntries(w->score_entries);
  for (uint64_t*& p : w->ws.partial) {
    MAXSIMD_CUDA_CHECK(DeviceMalloc(&p, w->ws.entries * sizeof(uint64_t)));
  }
  workspace_bytes_ += static_cast<int64_t>(
      w->in_bytes + (topk_entries + 2 * w->ws.entries) * sizeof(uint64_t) +
      w->score_entries * sizeof(float));
  if (options_.stream_buffer_bytes > 0) {
    MAXSIMD_CUDA_CHECK(
        cudaStreamCreateWithFlags(&w->copy_stream, cudaStreamNonBlocking));
    MAXSIMD_CUDA_CHECK(cudaEventCreate(&w->stream_first));
    MAXSIMD_CUDA_CHECK(cudaEventCreate(&w->stream_last));
    const size_t bytes = static_cast<size_t>(options_.stream_buffer_bytes);
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
    workspace_bytes_ += kStreamBuffers * options_.stream_buffer_bytes;
    w->pack_pool = std::make_unique<ThreadPool>(kPackThreads);
  }
  return absl::OkStatus();
}

std::vector<DeviceMemory> GpuBackendImpl::Memory() const {
  DeviceMemory m;
  m.device = options_.device;
  m.corpus_bytes = corpus_bytes_->load();
  m.pinned_bytes = pinned_bytes_->load();
  m.workspace_bytes = workspace_bytes_;
  DeviceGuard guard(options_.device);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    m.free_bytes = static_cast<int64_t>(free_bytes);
    m.total_bytes = static_cast<int64_t>(total_bytes);
  } else {
    (void)cudaGetLastError();
  }
  return {m};
}

int GpuBackendImpl::AcquireWorker() {
  auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !free_.empty();
  };
  absl::MutexLock lock(&mu_, absl::Condition(&available));
  const int index = free_.back();
  free_.pop_back();
  return index;
}

void GpuBackendImpl::ReleaseWorker(int index) {
  absl::MutexLock lock(&mu_);
  free_.push_back(index);
}

absl::Status GpuBackendImpl::Sticky(absl::Status st) {
  if (!st.ok() && (st.code() == absl::StatusCode::kUnavailable ||
                   st.code() == absl::StatusCode::kInternal)) {
    healthy_.store(false);
  }
  return st;
}

absl::StatusOr<std::unique_ptr<ResidentBuffer>> GpuBackendImpl::Upload(
    const void* host, size_t bytes) {
  if (!healthy_.load()) {
    return absl::UnavailableError("GpuBackend::Upload: the device has failed");
  }
  NvtxRange range("maxsimd.upload");
  DeviceGuard guard(options_.device);
  if (bytes == 0) {
    absl::MutexLock upload_lock(&upload_mu_);
    MAXSIMD_RETURN_IF_ERROR(CheckCorpusBudget(name(), corpus_bytes_->load(), 0,
                                              options_.corpus_budget_bytes));
    return std::unique_ptr<ResidentBuffer>(
        new DeviceBuffer(options_.device, nullptr, 0, corpus_bytes_));
  }
  MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<ResidentBuffer> buffer,
                           AllocateCounted(bytes, "Upload"));
  void* ptr = const_cast<void*>(buffer->data());
  absl::Status st = [&]() -> absl::Status {
    MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(ptr, host, bytes, cudaMemcpyHostToDevice,
                                       upload_stream_));
    MAXSIMD_CUDA_CHECK(cudaStreamSynchronize(upload_stream_));
    return absl::OkStatus();
  }();
  if (!st.ok()) return Sticky(st);
  return buffer;
}

absl::StatusOr<std::unique_ptr<ResidentBuffer>> GpuBackendImpl::AllocateCounted(
    size_t bytes, const char* what) {
  // Check and allocation together, so concurrent calls cannot both pass.
  absl::MutexLock upload_lock(&upload_mu_);
  MAXSIMD_RETURN_IF_ERROR(
      CheckBudget(what, "--corpus_budget_bytes", name(), corpus_bytes_->load(),
                  static_cast<int64_t>(bytes), options_.corpus_budget_bytes));
  void* ptr = nullptr;
  const cudaError_t err = DeviceMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        "GpuBackend::", what, ": ", bytes, " bytes do not fit on ", name(),
        " (", free_bytes, " of ", total_bytes, " bytes free)"));
  }
  if (err != cudaSuccess) {
    return Sticky(CudaErrorToStatus(err, "cudaMalloc", __FILE__, __LINE__));
  }
  return std::unique_ptr<ResidentBuffer>(
      new DeviceBuffer(options_.device, ptr, bytes, corpus_bytes_));
}

absl::StatusOr<std::unique_ptr<ResidentBuffer>> GpuBackendImpl::Pin(
    const void* host, size_t bytes) {
  if (!healthy_.load()) {
    return absl::UnavailableError("GpuBackend::Pin: the device has failed");
  }
  if (options_.stream_buffer_bytes <= 0) {
    return absl::FailedPreconditionError(
        "GpuBackend::Pin: stream_buffer_bytes is 0, so host-placed tokens "
        "have no buffers to stream through (--stream_buffer_bytes)");
  }
  NvtxRange range("maxsimd.pin");
  DeviceGuard guard(options_.device);
  absl::MutexLock upload_lock(&upload_mu_);
  MAXSIMD_RETURN_IF_ERROR(
      CheckBudget("Pin", "--pinned_budget_bytes", name(), pinned_bytes_->load(),
                  static_cast<int64_t>(bytes), options_.pinned_budget_bytes));
  if (bytes == 0) {
    return std::unique_ptr<ResidentBuffer>(
        new PinnedBuffer(host, 0, false, pinned_bytes_));
  }
  // Portable: every device's streams may copy from it (a sharded backend
  // streams a segment through the GPU of its shard).
  const cudaError_t err = cudaHostRegister(const_cast<void*>(host), bytes,
                                           cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: nothing on the device changed
    return absl::ResourceExhaustedError(
        absl::StrCat("GpuBackend::Pin: cannot page-lock ", bytes,
                     " bytes of host memory: ", cudaGetErrorString(err)));
  }
  return std::unique_ptr<ResidentBuffer>(
      new PinnedBuffer(host, bytes, true, pinned_bytes_));
}

// The streams and events of one AssignNearestCentroids call. The
// destructor waits for both streams before it destroys anything, so a
// buffer declared before it outlives the work that uses it, on every path.
struct AssignStreams {
  cudaStream_t compute = nullptr, copy = nullptr;
  // copied[b]: token buffer b filled; consumed[b]: its kernel done.
  cudaEvent_t copied[2] = {}, consumed[2] = {};

  absl::Status Init() {
    MAXSIMD_CUDA_CHECK(
        cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    MAXSIMD_CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    for (int b = 0; b < 2; ++b) {
      MAXSIMD_CUDA_CHECK(
          cudaEventCreateWithFlags(&copied[b], cudaEventDisableTiming));
      MAXSIMD_CUDA_CHECK(
          cudaEventCreateWithFlags(&consumed[b], cudaEventDisableTiming));
    }
    return absl::OkStatus();
  }
  ~AssignStreams() {
    for (cudaStream_t s : {compute, copy}) {
      if (s != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(s));
    }
    for (cudaEvent_t e : {copied[0], copied[1], consumed[0], consumed[1]}) {
      if (e != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
    }
    for (cudaStream_t s : {compute, copy}) {
      if (s != nullptr) MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamDestroy(s));
    }
  }
};

absl::Status GpuBackendImpl::AssignNearestCentroids(
    absl::Span<const float> tokens, absl::Span<const float> centroids,
    int32_t dim, absl::Span<int64_t> codes) {
  MAXSIMD_RETURN_IF_ERROR(
      ValidateAssignNearestCentroids(tokens, centroids, dim, codes));
  if (!healthy_.load()) {
    return absl::UnavailableError(
        "GpuBackend::AssignNearestCentroids: the device has failed");
  }
  NvtxRange range("maxsimd.kmeans_assign");
  DeviceGuard guard(options_.device);
  const absl::Status st = RunAssign(tokens, centroids, dim, codes);
  if (!st.ok()) (void)cudaGetLastError();
  return Sticky(st);
}

// Scratch: the centroids, two token buffers of `chunk` rows, the chunk's
// codes and the kernel's workspace, in one allocation held for the call.
absl::Status GpuBackendImpl::RunAssign(absl::Span<const float> tokens,
                                       absl::Span<const float> centroids,
                                       int32_t dim, absl::Span<int64_t> codes) {
  const int64_t m = static_cast<int64_t>(tokens.size()) / dim;
  const int64_t k = static_cast<int64_t>(centroids.size()) / dim;
  const int64_t chunk =
      std::min<int64_t>(m, std::max<int64_t>(kAssignChunkValues / dim, 128));
  const int64_t chunks = (m + chunk - 1) / chunk;
  const int64_t last = m - (chunks - 1) * chunk;
  const size_t ws_bytes =
      std::max(AssignNearestWorkspaceBytes(chunk, k, sm_count_),
               AssignNearestWorkspaceBytes(last, k, sm_count_));
  const size_t token_bytes = static_cast<size_t>(chunk) * dim * sizeof(float);
  const size_t at_tokens = AlignUp(centroids.size() * sizeof(float));
  const size_t at_codes = at_tokens + 2 * AlignUp(token_bytes);
  const size_t at_ws = at_codes + AlignUp(chunk * sizeof(int64_t));
  const size_t bytes = at_ws + ws_bytes;
  MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<ResidentBuffer> scratch,
                           AllocateCounted(bytes, "AssignNearestCentroids"));
  char* base = static_cast<char*>(const_cast<void*>(scratch->data()));
  float* const dev_centroids = reinterpret_cast<float*>(base);
  float* const dev_tokens[2] = {
      reinterpret_cast<float*>(base + at_tokens),
      reinterpret_cast<float*>(base + at_tokens + AlignUp(token_bytes))};
  int64_t* const dev_codes = reinterpret_cast<int64_t*>(base + at_codes);
  void* const dev_ws = ws_bytes > 0 ? base + at_ws : nullptr;

  AssignStreams s;  // after `scratch`: destroyed (and synchronised) first
  MAXSIMD_RETURN_IF_ERROR(s.Init());
  MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(dev_centroids, centroids.data(),
                                     centroids.size() * sizeof(float),
                                     cudaMemcpyHostToDevice, s.compute));
  // The host arrays are pageable: a copy in returns once the driver has
  // staged it, a copy out once it is done. So the host stages chunk c + 1
  // while the kernel runs on chunk c, then waits for chunk c's codes.
  auto copy_in = [&](int64_t c) -> absl::Status {
    const int b = static_cast<int>(c % 2);
    const int64_t rows = std::min(chunk, m - c * chunk);
    MAXSIMD_CUDA_CHECK(cudaStreamWaitEvent(s.copy, s.consumed[b], 0));
    MAXSIMD_CUDA_CHECK(
        cudaMemcpyAsync(dev_tokens[b], tokens.data() + c * chunk * dim,
                        static_cast<size_t>(rows) * dim * sizeof(float),
                        cudaMemcpyHostToDevice, s.copy));
    MAXSIMD_CUDA_CHECK(cudaEventRecord(s.copied[b], s.copy));
    return absl::OkStatus();
  };
  MAXSIMD_RETURN_IF_ERROR(copy_in(0));
  for (int64_t c = 0; c < chunks; ++c) {
    const int b = static_cast<int>(c % 2);
    const int64_t rows = std::min(chunk, m - c * chunk);
    MAXSIMD_CUDA_CHECK(cudaStreamWaitEvent(s.compute, s.copied[b], 0));
    AssignNearestParams p;
    p.tokens = dev_tokens[b];
    p.num_tokens = rows;
    p.centroids = dev_centroids;
    p.num_centroids = k;
    p.dim = dim;
    p.codes = dev_codes;
    MAXSIMD_RETURN_IF_ERROR(
        LaunchAssignNearest(p, dev_ws, ws_bytes, sm_count_, s.compute));
    MAXSIMD_CUDA_CHECK(cudaEventRecord(s.consumed[b], s.compute));
    if (c + 1 < chunks) MAXSIMD_RETURN_IF_ERROR(copy_in(c + 1));
    MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(codes.data() + c * chunk, dev_codes,
                                       rows * sizeof(int64_t),
                                       cudaMemcpyDeviceToHost, s.compute));
  }
  MAXSIMD_CUDA_CHECK(cudaStreamSynchronize(s.compute));
  return absl::OkStatus();
}

absl::Status GpuBackendImpl::Search(const SearchParams& params,
                                    absl::Span<std::vector<ScoredDoc>> results,
                                    SearchTiming* timing) {
  if (!healthy_.load()) {
    return absl::UnavailableError("GpuBackend::Search: the device has failed");
  }
  MAXSIMD_RETURN_IF_ERROR(
      ValidateSearchParams(params, options_.limits, results.size()));
  for (auto& r : results) r.clear();
  if (params.num_queries == 0 || params.segments.empty()) {
    return absl::OkStatus();
  }
  const DType dtype = params.segments[0].resident.dtype;
  for (size_t s = 0; s < params.segments.size(); ++s) {
    const SegmentView& v = params.segments[s].resident;
    if (v.dtype == DType::kInt8) {
      if (!SupportsDType(DType::kInt8, params.dim)) {
        return absl::UnimplementedError(absl::StrCat(
            "GpuBackend::Search: segments[", s, "] is layout int8 of dim ",
            params.dim,
            "; the GPU kernel for int8 corpora takes dim 64, 128 or 256 and "
            "needs the TMA kernels (sm_90); serve the corpus with the CPU "
            "backend (--cpu)"));
      }
      if (params.segments[s].streamed) {
        return absl::UnimplementedError(absl::StrCat(
            "GpuBackend::Search: segments[", s,
            "] is layout int8 and host-placed; the GPU backend streams only "
            "dense corpora from host memory (use placement gpu)"));
      }
      if (v.scales == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "GpuBackend::Search: segments[", s, "] is int8 and has no scales"));
      }
    } else if (PlaidNbits(v.dtype) > 0) {
      if (!SupportsDType(v.dtype, params.dim)) {
        return absl::UnimplementedError(absl::StrCat(
            "GpuBackend::Search: segments[", s, "] is layout plaid (",
            DTypeName(v.dtype), ") of dim ", params.dim,
            "; the GPU kernel for PLAID corpora takes nbits 1, 2 or 4 at dim "
            "64, 128 or 256 with dim * nbits a multiple of 128 and needs the "
            "TMA kernels (sm_90); serve the corpus with the CPU backend "
            "(--cpu)"));
      }
      if (params.segments[s].streamed) {
        return absl::UnimplementedError(absl::StrCat(
            "GpuBackend::Search: segments[", s,
            "] is layout plaid and host-placed; the GPU backend streams only "
            "dense corpora from host memory (use placement gpu)"));
      }
      if (v.scales == nullptr || v.codes == nullptr ||
          v.plaid.centroids_f16 == nullptr ||
          v.plaid.bucket_weights == nullptr || v.plaid.num_centroids <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "GpuBackend::Search: segments[", s,
            "] is PLAID and lacks scales, codes or its codec tables"));
      }
      const PlaidTablesView& c0 = params.segments[0].resident.plaid;
      if (v.plaid.centroids_f16 != c0.centroids_f16 ||
          v.plaid.bucket_weights != c0.bucket_weights ||
          v.plaid.num_centroids != c0.num_centroids) {
        return absl::UnimplementedError(absl::StrCat(
            "GpuBackend::Search: segments[", s,
            "] has another PLAID codec than segments[0]; the GPU kernel "
            "decodes one codec per batch"));
      }
    } else if (v.dtype != DType::kFloat16 && v.dtype != DType::kBFloat16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GpuBackend::Search: segments[", s, "].dtype is ", DTypeName(v.dtype),
          "; the GPU backend reads float16, bfloat16, int8 or PLAID"));
    }
    if (v.dtype != dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GpuBackend::Search: segments[", s, "].dtype is ", DTypeName(v.dtype),
          " but segments[0] is ", DTypeName(dtype), "; one batch, one dtype"));
    }
    if (params.segments[s].streamed && options_.stream_buffer_bytes <= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("GpuBackend::Search: segments[", s,
                       "] is host-placed and stream_buffer_bytes is 0"));
    }
    if (reinterpret_cast<uintptr_t>(v.tokens) % 16 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GpuBackend::Search: segments[", s,
                       "].tokens is not 16-byte aligned"));
    }
    if (v.num_docs >= int64_t{0xffffffff}) {
      return absl::InvalidArgumentError(
          absl::StrCat("GpuBackend::Search: segments[", s, "] has ", v.num_docs,
                       " documents, the limit is 2^32 - 2"));
    }
  }
  const int64_t rows = params.query_offsets[params.num_queries];
  const int64_t elems = rows * PaddedDim(params.dim);
  if (elems > options_.max_query_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GpuBackend::Search: the batch stages ", elems,
        " query elements (tokens x dim rounded up to 32), the limit "
        "(max_query_elements) is ",
        options_.max_query_elements));
  }

  NvtxRange range("maxsimd.search");
  DeviceGuard guard(options_.device);
  const int index = AcquireWorker();
  absl::Status st = RunSearch(workers_[index], params, dtype, results, timing);
  if (!st.ok()) {
    // Leave the slot's streams idle for the next user.
    (void)cudaStreamSynchronize(workers_[index].stream);
    if (workers_[index].copy_stream != nullptr) {
      (void)cudaStreamSynchronize(workers_[index].copy_stream);
    }
  }
  ReleaseWorker(index);
  return Sticky(st);
}

bool GpuBackendImpl::ReservePlaidTable(Worker& w, int64_t bytes) {
  if (w.plaid_table_bytes >= bytes) return true;
  // The worker's stream may still read the old table.
  if (w.plaid_table != nullptr) {
    if (cudaStreamSynchronize(w.stream) != cudaSuccess ||
        cudaFree(w.plaid_table) != cudaSuccess) {
      (void)cudaGetLastError();
    }
    w.plaid_table = nullptr;
    w.plaid_table_bytes = 0;
  }
  void* p = nullptr;
  if (cudaMalloc(&p, static_cast<size_t>(bytes)) != cudaSuccess) {
    (void)cudaGetLastError();  // out of memory is not sticky
    return false;
  }
  w.plaid_table = static_cast<uint32_t*>(p);
  w.plaid_table_bytes = bytes;
  return true;
}

TmaPlan GpuBackendImpl::PlanTma(const SearchParams& p, bool gather) const {
  TmaPlan plan;
  if (!options_.use_tma || !TmaSupportsDim(p.dim) ||
      static_cast<int64_t>(p.segments.size()) > kMaxTmaSegments) {
    return plan;
  }
  for (const SegmentRef& seg : p.segments) {
    if (!seg.streamed && seg.resident.num_tokens >= (int64_t{1} << 31)) {
      return plan;
    }
  }
  const int32_t nq = p.num_queries;
  auto rows_of = [&p](int32_t q) {
    return p.query_offsets[q + 1] - p.query_offsets[q];
  };
  // A scan packs the queries at 16-row boundaries (a warp's 16 rows are one
  // query's); a gather starts each query on a tile, since a block scores one
  // query's candidates against that query's tiles only.
  int64_t widest = 0, packed = 0;
  for (int32_t q = 0; q < nq; ++q) {
    const int64_t r16 = (rows_of(q) + 15) / 16 * 16;
    widest = std::max(widest, r16);
    packed += r16;
  }
  plan.warpgroups = (gather ? widest : packed) <= 32 ? 1 : 2;
  plan.tile_rows = TmaTileRows(plan.warpgroups);
  plan.dpad = TmaPaddedDim(p.dim);
  const int64_t align = gather ? plan.tile_rows : 16;
  plan.place.assign(nq + 1, 0);
  for (int32_t q = 0; q < nq; ++q) {
    plan.place[q + 1] =
        plan.place[q] + (rows_of(q) + align - 1) / align * align;
  }
  plan.tiles = (plan.place[nq] + plan.tile_rows - 1) / plan.tile_rows;
  const int64_t bytes = plan.tiles * TmaTileBytes(plan.warpgroups, plan.dpad);
  plan.on = bytes <= options_.max_query_elements * 2;
  return plan;
}

absl::Status GpuBackendImpl::RunSearch(
    Worker& w, const SearchParams& p, DType dtype,
    absl::Span<std::vector<ScoredDoc>> results, SearchTiming* timing) {
  const int64_t host_start = NowNs();
  const int32_t nq = p.num_queries;
  const int32_t dim = p.dim;
  const int32_t dpad = PaddedDim(dim);
  const int64_t rows = p.query_offsets[nq];
  const bool gather = p.candidate_offsets != nullptr;
  const int64_t nseg = static_cast<int64_t>(p.segments.size());
  // Host-placed segments stream through the worker's buffers, whose tensor
  // maps take the slots after the segments' (nseg + b).
  const bool any_streamed =
      std::any_of(p.segments.begin(), p.segments.end(),
                  [](const SegmentRef& ref) { return ref.streamed; });
  const int64_t row_bytes = int64_t{dim} * 2;
  const int64_t stream_rows =
      any_streamed ? options_.stream_buffer_bytes / row_bytes : 0;
  int32_t kmax = 1;
  bool empty_query = false;  // its scores are 0, which the kernels never write
  for (int32_t q = 0; q < nq; ++q) {
    kmax = std::max(kmax, p.top_k[q]);
    empty_query |= p.query_offsets[q + 1] == p.query_offsets[q];
  }

  // ---- Plan the gather records (host): live candidates only, each query's
  // records contiguous; position = index - the query's lowest index.
  int64_t num_records = 0, num_tiles = 0;
  std::vector<int64_t> query_base(nq, 0);
  if (gather) {
    NvtxRange r("maxsimd.plan_gather");
    // Records and tiles are written straight into the pinned blob below; a
    // first pass finds the per-query minimum index.
    for (int32_t q = 0; q < nq; ++q) {
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
      for (int64_t c = p.candidate_offsets[q]; c < p.candidate_offsets[q + 1];
           ++c) {
        const SegmentView& v = p.segments[p.candidates[c].segment].host;
        const int64_t idx = v.base_index + p.candidates[c].doc;
        lo = std::min(lo, idx);
        hi = std::max(hi, idx);
      }
      if (lo <= hi && hi - lo >= int64_t{0xffffffff}) {
        return absl::InvalidArgumentError(
            absl::StrCat("GpuBackend::Search: the candidates of query ", q,
                         " span internal indexes ", lo, "..", hi,
                         "; one query's candidates must lie within 2^32 - 1"));
      }
      query_base[q] = lo <= hi ? lo : 0;
    }
  }
  // This request's layout: no larger than the capacity layout in every
  // region, and compact, so the one H2D copy moves little beyond the data.
  const TmaPlan tma = PlanTma(p, gather);
  const bool int8 = dtype == DType::kInt8;
  const bool plaid = PlaidNbits(dtype) > 0;
  if ((int8 || plaid) && !tma.on) {
    return absl::UnimplementedError(
        absl::StrCat("GpuBackend::Search: an ", LayoutOfDType(dtype),
                     " batch needs the TMA kernel, which this "
                     "batch exceeds (at most ",
                     kMaxTmaSegments, " segments, 2^31 tokens per segment, ",
                     options_.max_query_elements, " staged query elements)"));
  }
  // Int8: queries go to the MMAs as float16, rounded (quantize_queries
  // false) or holding their int8 codes exactly (true), whose row scales
  // the kernel applies.
  // PLAID: queries go as float16, as for float16 corpora.
  const DType query_dtype = int8 || plaid ? DType::kFloat16 : dtype;
  // Int8 with quantised queries at 128 or 256: the int8 MMA, which reads
  // both operands' codes as float16 rows of half the width (maxsim_tma.h).
  const bool int8_mma = int8 && TmaInt8UsesMma(dim, p.quantize_queries);
  // PLAID at d = 128 with one query tile per block: the int8 MMA as well
  // (TmaPlaidUsesMma), when its query-centroid table fits the worker's
  // (its size is per tile and centroid) and the staged rows fit the query
  // buffer: the int8 codes as for int8_mma, then the rows in float16,
  // row-major, for the table.
  PlaidMmaPlan plaid_mma;
  if (plaid && tma.on && options_.plaid_int8_mma &&
      TmaPlaidUsesMma(dim, PlaidNbits(dtype), tma.warpgroups)) {
    const int64_t centroids = p.segments[0].resident.plaid.num_centroids;
    const int nbits = PlaidNbits(dtype);
    const bool units =
        !gather && options_.plaid_warp_scan && (nbits == 2 || nbits == 4);
    const int64_t qc_bytes = PlaidQcTableBytes(tma.tiles, centroids);
    const int64_t table =
        qc_bytes + (units ? PlaidUnitsTableBytes(tma.tiles, centroids) : 0);
    const int64_t codes = tma.tiles * TmaTileBytes(1, tma.dpad) / 2;
    const int64_t staged = codes + tma.tiles * tma.tile_rows * dim * 2;
    if (table <= options_.plaid_table_bytes &&
        staged <= options_.max_query_elements * 2 &&
        ReservePlaidTable(w, table)) {
      plaid_mma.on = true;
      plaid_mma.units = units;
      plaid_mma.units_offset = qc_bytes;
      plaid_mma.rows_offset = codes;
      plaid_mma.staged_bytes = staged;
      plaid_mma.step = PlaidMmaLevels(p.segments[0].host.plaid.bucket_weights,
                                      PlaidNbits(dtype), plaid_mma.levels,
                                      &plaid_mma.offset);
    }
  }
  const bool q_scaled = (int8 && p.quantize_queries) || plaid_mma.on;
  const int64_t q_scale_rows = q_scaled ? tma.tiles * tma.tile_rows : 0;
  const int64_t total_candidates = gather ? p.candidate_offsets[nq] : 0;
  // Records per gather block: the TMA kernel spreads a small rerank over
  // every block slot of the device (one wave), a large one in blocks of up
  // to 64 records; the mma.sync kernel takes one record per warp.
  int64_t per_unit = kGatherRecordsPerTile;
  if (tma.on) {
    const int64_t slots =
        int64_t{sm_count_} * TmaBlocksPerSm(tma.warpgroups, int8_mma ? dim : 0);
    per_unit =
        std::clamp<int64_t>((total_candidates + slots - 1) / slots, 1, 64);
    const int64_t cap_tiles = MaxTiles(options_.limits) - nq;
    per_unit = std::max(per_unit, (total_candidates + cap_tiles - 1) /
                                      std::max<int64_t>(cap_tiles, 1));
  }
  const int64_t query_bytes =
      plaid_mma.on ? plaid_mma.staged_bytes
      : tma.on     ? tma.tiles * TmaTileBytes(tma.warpgroups, tma.dpad)
                   : rows * dpad * 2;
  const int64_t map_slots = nseg + (any_streamed ? kStreamBuffers : 0);
  const InputLayout cap = InputLayout::Make(
      query_bytes, rows, nq, tma.on ? map_slots : 0, q_scale_rows,
      total_candidates, gather ? total_candidates / per_unit + nq : 0);
  char* in = w.pinned_in;
  // A rerank's host-placed candidates, gathered into the stream buffers in
  // rounds (alternating buffers).
  std::vector<StreamedRecord> streamed_recs;
  std::vector<StreamRound> rounds;

  // ---- Stage queries: fp32 -> dtype; row-major rows padded to dpad with
  // zeros for the mma.sync kernels, swizzled tiles for the TMA kernel.
  {
    NvtxRange r("maxsimd.stage");
    if (tma.on) {
      std::memset(in + cap.query, 0, query_bytes);
      std::vector<uint16_t> row_buf(dim);
      std::vector<float> code_row(q_scaled ? dim : 0);
      std::vector<int8_t> codes(q_scaled ? dim : 0);
      float* q_scales = reinterpret_cast<float*>(in + cap.q_scales);
      // Padding rows hold zeros; a multiplier of 1 keeps an empty
      // document's -inf maxima from turning into NaN there.
      std::fill(q_scales, q_scales + q_scale_rows, 1.f);
      int32_t* blocks = reinterpret_cast<int32_t*>(in + cap.query_blocks);
      int32_t* qtiles = reinterpret_cast<int32_t*>(in + cap.query_tiles);
      for (int32_t q = 0; q <= nq; ++q) {
        blocks[q] = static_cast<int32_t>(tma.place[q] / 16);
        qtiles[q] = static_cast<int32_t>(tma.place[q] / tma.tile_rows);
        if (q == nq) break;
        for (int64_t i = 0; i < p.query_offsets[q + 1] - p.query_offsets[q];
             ++i) {
          const float* src = p.query_tokens + (p.query_offsets[q] + i) * dim;
          if (q_scaled) {
            const float scale = QuantizeInt8Row(src, dim, codes.data());
            // A zero row's codes are zeros: any multiplier gives 0.
            q_scales[tma.place[q] + i] = scale > 0.f ? scale : 1.f;
            if (plaid_mma.on) {
              // The row's factor, and its float16 values for the table.
              q_scales[tma.place[q] + i] *= plaid_mma.step;
              ConvertFromFloat(src, dim, DType::kFloat16,
                               reinterpret_cast<uint16_t*>(
                                   in + cap.query + plaid_mma.rows_offset) +
                                   (tma.place[q] + i) * dim);
            }
            if (int8_mma || plaid_mma.on) {
              StageTmaQueryRow(reinterpret_cast<const uint16_t*>(codes.data()),
                               dim / 2, tma.dpad / 2, tma.place[q] + i,
                               tma.tile_rows,
                               reinterpret_cast<uint8_t*>(in + cap.query));
              continue;
            }
            std::copy(codes.begin(), codes.end(), code_row.begin());
            src = code_row.data();
          }
          ConvertFromFloat(src, dim, query_dtype, row_buf.data());
          StageTmaQueryRow(row_buf.data(), dim, tma.dpad, tma.place[q] + i,
                           tma.tile_rows,
                           reinterpret_cast<uint8_t*>(in + cap.query));
        }
      }
      TensorMapBytes* maps = reinterpret_cast<TensorMapBytes*>(in + cap.maps);
      for (int64_t s = 0; s < map_slots; ++s) {
        const bool buffer = s >= nseg;
        TensorMapBytes* slot = maps + kTmaMapsPerSlot * s;
        std::memset(slot, 0, kTmaMapsPerSlot * sizeof(TensorMapBytes));
        // Int8 segments are never streamed: a buffer's slot has none.
        reinterpret_cast<const float**>(in + cap.slot_scales)[s] =
            buffer ? nullptr : p.segments[s].resident.scales;
        reinterpret_cast<const int32_t**>(in + cap.slot_codes)[s] =
            buffer ? nullptr : p.segments[s].resident.codes;
        if (!buffer && p.segments[s].streamed) continue;  // unused
        const void* tokens =
            buffer ? w.dev_stream[s - nseg] : p.segments[s].resident.tokens;
        const int64_t num_tokens =
            buffer ? stream_rows : p.segments[s].resident.num_tokens;
        for (int b = 0; b < 2; ++b) {
          MAXSIMD_RETURN_IF_ERROR(
              int8_mma ? EncodeTokenMap(DType::kFloat16, tokens, num_tokens,
                                        dim / 2, kTmaBoxRows[b], &slot[b])
                       : EncodeTokenMap(dtype, tokens, num_tokens, dim,
                                        kTmaBoxRows[b], &slot[b]));
        }
      }
    } else {
      uint16_t* qdst = reinterpret_cast<uint16_t*>(in + cap.query);
      for (int64_t row = 0; row < rows; ++row) {
        ConvertFromFloat(p.query_tokens + row * dim, dim, dtype,
                         qdst + row * dpad);
        std::memset(qdst + row * dpad + dim, 0, (dpad - dim) * 2);
      }
      int32_t* row_query = reinterpret_cast<int32_t*>(in + cap.row_query);
      for (int32_t q = 0; q < nq; ++q) {
        for (int64_t row = p.query_offsets[q]; row < p.query_offsets[q + 1];
             ++row) {
          row_query[row] = q;
        }
      }
    }
    std::memcpy(in + cap.query_offsets, p.query_offsets,
                (nq + 1) * sizeof(int64_t));
    std::memcpy(in + cap.top_k, p.top_k, nq * sizeof(int32_t));
    if (gather) {
      int64_t* rec_offsets = reinterpret_cast<int64_t*>(in + cap.rec_offsets);
      GatherRecord* recs = reinterpret_cast<GatherRecord*>(in + cap.records);
      TmaRecord* tma_recs = reinterpret_cast<TmaRecord*>(in + cap.records);
      GatherTile* tiles = reinterpret_cast<GatherTile*>(in + cap.tiles);
      rec_offsets[0] = 0;
      size_t next_streamed = 0;  // streamed_recs entry of the next unit record
      for (int32_t q = 0; q < nq; ++q) {
        const int64_t first = num_records;
        for (int64_t c = p.candidate_offsets[q]; c < p.candidate_offsets[q + 1];
             ++c) {
          const SegmentRef& seg = p.segments[p.candidates[c].segment];
          const int64_t doc = p.candidates[c].doc;
          if (IsTombstoned(seg.host.tombstones, doc)) continue;
          const int64_t t0 = seg.host.cu_seqlens[doc];
          const int32_t len =
              static_cast<int32_t>(seg.host.cu_seqlens[doc + 1] - t0);
          const uint32_t position =
              static_cast<uint32_t>(seg.host.base_index + doc - query_base[q]);
          if (seg.streamed) {
            // Placed in a stream buffer once the rounds are known.
            const int64_t row =
                streamed_recs.empty()
                    ? 0
                    : streamed_recs.back().row + streamed_recs.back().len;
            streamed_recs.push_back(
                {num_records,
                 static_cast<const char*>(seg.resident.tokens) + t0 * row_bytes,
                 len, row});
          }
          if (tma.on) {
            TmaRecord& rec = tma_recs[num_records++];
            rec.row = static_cast<int32_t>(t0);
            rec.len = len;
            rec.slot = static_cast<int32_t>(p.candidates[c].segment);
            rec.position = position;
          } else {
            GatherRecord& rec = recs[num_records++];
            rec.tokens = static_cast<const char*>(seg.resident.tokens) +
                         t0 * dim * int64_t{2};
            rec.len = len;
            rec.position = position;
          }
        }
        rec_offsets[q + 1] = num_records;
        // Units of up to per_unit records; with host-placed candidates also
        // of at most one stream buffer of their rows (a longer record goes
        // alone, and PlanStreamedRounds refuses it).
        for (int64_t b = first; b < num_records;) {
          int64_t e = b, unit_rows = 0;
          while (e < num_records && e - b < per_unit) {
            const bool on_host = next_streamed < streamed_recs.size() &&
                                 streamed_recs[next_streamed].record == e;
            const int64_t len = on_host ? streamed_recs[next_streamed].len : 0;
            if (e > b && unit_rows + len > stream_rows && on_host) break;
            unit_rows += len;
            next_streamed += on_host ? 1 : 0;
            ++e;
          }
          GatherTile& t = tiles[num_tiles++];
          t.query = q;
          t.rec_begin = b;
          t.rec_end = e;
          b = e;
        }
      }
      if (!streamed_recs.empty()) {
        // Rounds of about 16 MiB: the first copy starts early, and packing
        // the next round overlaps it.
        const int64_t target_rows =
            std::min(stream_rows, std::max<int64_t>(1, (16 << 20) / row_bytes));
        MAXSIMD_RETURN_IF_ERROR(PlanStreamedRounds(tiles, num_tiles,
                                                   stream_rows, target_rows,
                                                   streamed_recs, &rounds));
        for (size_t r = 0; r < rounds.size(); ++r) {
          const int b = static_cast<int>(r % kStreamBuffers);
          for (size_t k = rounds[r].rec_begin; k < rounds[r].rec_end; ++k) {
            const StreamedRecord& sr = streamed_recs[k];
            const int64_t row = sr.row - rounds[r].row_begin;
            if (tma.on) {
              tma_recs[sr.record].row = static_cast<int32_t>(row);
              tma_recs[sr.record].slot = static_cast<int32_t>(nseg + b);
            } else {
              recs[sr.record].tokens = w.dev_stream[b] + row * row_bytes;
            }
          }
        }
      }
    }
  }
  // One copy up to the last used byte; the only gaps are alignment and the
  // records of deleted candidates.
  size_t used = tma.on ? cap.q_scales + q_scale_rows * sizeof(float)
                       : cap.top_k + nq * sizeof(int32_t);
  if (gather) {
    used = num_tiles > 0 ? cap.tiles + num_tiles * sizeof(GatherTile)
                         : cap.rec_offsets + (nq + 1) * sizeof(int64_t);
  }
  const int64_t host_staged = NowNs();

  cudaStream_t stream = w.stream;
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w.start, stream));
  MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(w.dev_in, w.pinned_in, used,
                                     cudaMemcpyHostToDevice, stream));
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w.staged, stream));
  float* const units_max =
      plaid_mma.on ? PlaidUnitsMax(w, plaid_mma, tma.tiles,
                                   p.segments[0].resident.plaid.num_centroids,
                                   PlaidNbits(dtype))
                   : nullptr;
  if (plaid_mma.on) {
    const PlaidTablesView& codec = p.segments[0].resident.plaid;
    MAXSIMD_RETURN_IF_ERROR(LaunchPlaidQueryCentroids(
        reinterpret_cast<const uint16_t*>(w.dev_in + cap.query +
                                          plaid_mma.rows_offset),
        tma.tiles, dim, codec.centroids, codec.num_centroids, plaid_mma.offset,
        w.plaid_table, stream,
        reinterpret_cast<const float*>(w.dev_in + cap.q_scales),
        PlaidUnits(w, plaid_mma), units_max != nullptr, units_max));
  }
  const void* dev_query = w.dev_in + cap.query;
  const int32_t* dev_row_query =
      reinterpret_cast<const int32_t*>(w.dev_in + cap.row_query);
  const int64_t* dev_qoff =
      reinterpret_cast<const int64_t*>(w.dev_in + cap.query_offsets);
  const int32_t* dev_topk =
      reinterpret_cast<const int32_t*>(w.dev_in + cap.top_k);
  // The TMA launches of one scoring pass, one per group of query tiles
  // (a block keeps running maxima for at most TmaMaxTiles() tiles).
  auto launch_tma = [&](TmaLaunchParams t) -> absl::Status {
    t.dtype = dtype;
    t.dim = dim;
    t.dpad = tma.dpad;
    t.warpgroups = tma.warpgroups;
    t.q_tiles = dev_query;
    t.query_blocks =
        reinterpret_cast<const int32_t*>(w.dev_in + cap.query_blocks);
    t.query_tiles =
        reinterpret_cast<const int32_t*>(w.dev_in + cap.query_tiles);
    t.maps = reinterpret_cast<const TensorMapBytes*>(w.dev_in + cap.maps);
    t.scales =
        int8 || plaid
            ? reinterpret_cast<const float* const*>(w.dev_in + cap.slot_scales)
            : nullptr;
    if (plaid) {
      const PlaidTablesView& codec = p.segments[0].resident.plaid;
      t.codes =
          reinterpret_cast<const int32_t* const*>(w.dev_in + cap.slot_codes);
      t.centroids_f16 = codec.centroids_f16;
      t.bucket_weights = codec.bucket_weights;
      t.num_centroids = codec.num_centroids;
      if (plaid_mma.on) {
        t.plaid_qc = w.plaid_table;
        t.plaid_units = PlaidUnits(w, plaid_mma);
        t.plaid_units_max = units_max;
        std::copy(std::begin(plaid_mma.levels), std::end(plaid_mma.levels),
                  std::begin(t.plaid_levels));
      }
    }
    t.q_scales = q_scaled
                     ? reinterpret_cast<const float*>(w.dev_in + cap.q_scales)
                     : nullptr;
    int64_t group = TmaMaxTiles(tma.warpgroups);
    if (t.records == nullptr && options_.tma_scan_tile_group > 0) {
      group = std::min<int64_t>(group, options_.tma_scan_tile_group);
    }
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
  };

  int pairs_used = 0;
  auto timed = [&](auto&& fn) -> absl::Status {
    const bool t = pairs_used < kTimingPairs;
    if (t) MAXSIMD_CUDA_CHECK(cudaEventRecord(w.pair[pairs_used][0], stream));
    MAXSIMD_RETURN_IF_ERROR(fn());
    if (t) {
      MAXSIMD_CUDA_CHECK(cudaEventRecord(w.pair[pairs_used][1], stream));
      ++pairs_used;
    }
    return absl::OkStatus();
  };

  // Streaming of host-placed tokens into the worker's buffers: the copy into
  // buffer b waits for the kernels that last read b (stream_done), and the
  // compute stream waits for the copy.
  bool buffer_used[kStreamBuffers] = {};
  int64_t stream_copies = 0;
  auto stream_in = [&](int b, const void* src, int64_t bytes) -> absl::Status {
    if (stream_copies++ == 0) {
      MAXSIMD_CUDA_CHECK(cudaEventRecord(w.stream_first, w.copy_stream));
    }
    if (buffer_used[b]) {
      MAXSIMD_CUDA_CHECK(cudaStreamWaitEvent(w.copy_stream, w.consumed[b], 0));
    }
    MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(w.dev_stream[b], src,
                                       static_cast<size_t>(bytes),
                                       cudaMemcpyHostToDevice, w.copy_stream));
    MAXSIMD_CUDA_CHECK(cudaEventRecord(w.copied[b], w.copy_stream));
    MAXSIMD_CUDA_CHECK(cudaEventRecord(w.stream_last, w.copy_stream));
    MAXSIMD_CUDA_CHECK(cudaStreamWaitEvent(stream, w.copied[b], 0));
    buffer_used[b] = true;
    return absl::OkStatus();
  };
  auto stream_done = [&](int b) -> absl::Status {
    MAXSIMD_CUDA_CHECK(cudaEventRecord(w.consumed[b], stream));
    return absl::OkStatus();
  };

  // Per-segment results waiting in the pinned ring: (segment, ring offset).
  struct Pending {
    int64_t base = 0;
    int64_t offset = 0;
    bool per_query_base = false;
  };
  std::vector<Pending> pending;
  int64_t ring_used = 0;
  const int64_t result_entries = static_cast<int64_t>(nq) * kmax;
  auto merge_pending = [&]() {
    NvtxRange r("maxsimd.merge");
    for (const Pending& pd : pending) {
      for (int32_t q = 0; q < nq; ++q) {
        const uint64_t* keys = w.pinned_out + pd.offset + int64_t{q} * kmax;
        const int64_t base = pd.per_query_base ? query_base[q] : pd.base;
        std::vector<ScoredDoc> seg;
        for (int32_t i = 0; i < p.top_k[q] && keys[i] != 0; ++i) {
          seg.push_back(DecodeTopKKey(keys[i], base));
        }
        if (results[q].empty()) {
          results[q] = std::move(seg);
        } else {
          std::vector<ScoredDoc> merged;
          merged.reserve(results[q].size() + seg.size());
          std::merge(results[q].begin(), results[q].end(), seg.begin(),
                     seg.end(), std::back_inserter(merged), RanksBefore);
          if (static_cast<int64_t>(merged.size()) > p.top_k[q]) {
            merged.resize(p.top_k[q]);
          }
          results[q] = std::move(merged);
        }
      }
    }
    pending.clear();
    ring_used = 0;
  };
  auto fetch = [&](int64_t base, bool per_query_base) -> absl::Status {
    if (ring_used + result_entries > w.out_entries) {
      MAXSIMD_CUDA_CHECK(cudaStreamSynchronize(stream));
      merge_pending();
    }
    MAXSIMD_CUDA_CHECK(cudaMemcpyAsync(w.pinned_out + ring_used, w.topk,
                                       result_entries * sizeof(uint64_t),
                                       cudaMemcpyDeviceToHost, stream));
    pending.push_back({base, ring_used, per_query_base});
    ring_used += result_entries;
    return absl::OkStatus();
  };

  if (gather) {
    NvtxRange r("maxsimd.gather");
    MAXSIMD_CUDA_CHECK(cudaEventRecord(w.ready, stream));
    if (num_records > 0) {
      if (empty_query) {
        MAXSIMD_CUDA_CHECK(
            cudaMemsetAsync(w.scores, 0, num_records * sizeof(float), stream));
      }
      const GatherTile* dev_units =
          reinterpret_cast<const GatherTile*>(w.dev_in + cap.tiles);
      // Scores work units [u0, u1).
      auto launch_units = [&](int64_t u0, int64_t u1) -> absl::Status {
        if (tma.on) {
          TmaLaunchParams t;
          t.records =
              reinterpret_cast<const TmaRecord*>(w.dev_in + cap.records);
          t.units = dev_units + u0;
          t.num_units = u1 - u0;
          t.scores = w.scores;
          return launch_tma(t);
        }
        GatherLaunchParams g;
        g.dtype = dtype;
        g.dim = dim;
        g.dpad = dpad;
        g.query = dev_query;
        g.query_offsets = dev_qoff;
        g.records =
            reinterpret_cast<const GatherRecord*>(w.dev_in + cap.records);
        g.tiles = dev_units + u0;
        g.num_tiles = u1 - u0;
        g.scores = w.scores;
        g.row_tiles = ChooseRowTiles(rows, dpad);
        return LaunchMaxSimGather(g, stream);
      };
      if (rounds.empty()) {
        MAXSIMD_RETURN_IF_ERROR(launch_units(0, num_tiles));
      }
      // Host-placed candidates: round r's rows are packed into pinned buffer
      // r % 2 (once the copy of round r - 2 out of it is done), copied, and
      // scored; packing round r + 1 overlaps the GPU's work on round r.
      for (size_t r = 0; r < rounds.size(); ++r) {
        const StreamRound& round = rounds[r];
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
                  const StreamedRecord& sr = streamed_recs[round.rec_begin + k];
                  std::memcpy(w.pinned_stream[b] +
                                  (sr.row - round.row_begin) * row_bytes,
                              sr.src, sr.len * row_bytes);
                }
              });
        }
        MAXSIMD_RETURN_IF_ERROR(
            stream_in(b, w.pinned_stream[b], round.rows * row_bytes));
        MAXSIMD_RETURN_IF_ERROR(launch_units(round.unit_begin, round.unit_end));
        MAXSIMD_RETURN_IF_ERROR(stream_done(b));
      }
      const int64_t* rec_offsets = reinterpret_cast<const int64_t*>(
          in + cap.rec_offsets);  // host copy, for the longest row
      int64_t max_row = 0;
      for (int32_t q = 0; q < nq; ++q) {
        max_row = std::max(max_row, rec_offsets[q + 1] - rec_offsets[q]);
      }
      TopKSource src;
      src.scores = w.scores;
      src.positions =
          reinterpret_cast<const uint32_t*>(w.dev_in + cap.records) +
          offsetof(GatherRecord, position) / sizeof(uint32_t);
      src.position_stride = sizeof(GatherRecord) / sizeof(uint32_t);
      src.row_offsets =
          reinterpret_cast<const int64_t*>(w.dev_in + cap.rec_offsets);
      MAXSIMD_RETURN_IF_ERROR(timed([&] {
        return SelectTopK(src, nq, max_row, dev_topk, kmax, false, w.topk, w.ws,
                          stream);
      }));
      MAXSIMD_RETURN_IF_ERROR(fetch(0, true));
    }
  } else {
    NvtxRange r("maxsimd.scan");
    // In device order with the other scans (serialize_scans): the lock is
    // held until this scan's done event is recorded.
    std::optional<absl::MutexLock> in_order;
    if (options_.serialize_scans) {
      in_order.emplace(&scan_order_mu_);
      if (last_scan_done_ != nullptr) {
        MAXSIMD_CUDA_CHECK(cudaStreamWaitEvent(stream, last_scan_done_, 0));
      }
    }
    MAXSIMD_CUDA_CHECK(cudaEventRecord(w.ready, stream));
    const int64_t chunk = std::max<int64_t>(
        1, std::min<int64_t>(w.score_entries / nq, int64_t{0xfffffffe}));
    // Scores documents [c0, c0 + clen) of segment s, whose tokens are read
    // from `tokens` (map slot `slot` on the TMA path) starting at segment
    // row `row_base`, and merges them into the running top-k.
    auto score_chunk = [&](size_t s, int64_t c0, int64_t clen,
                           const void* tokens, int64_t slot,
                           int64_t row_base) -> absl::Status {
      const SegmentView& v = p.segments[s].resident;
      if (empty_query) {
        MAXSIMD_CUDA_CHECK(cudaMemsetAsync(
            w.scores, 0, static_cast<size_t>(nq) * clen * sizeof(float),
            stream));
      }
      if (tma.on) {
        TmaLaunchParams t;
        t.map_slot = static_cast<int32_t>(slot);
        // The warp kernel reads the rows directly (resident segments).
        if (!p.segments[s].streamed) t.plaid_rows = tokens;
        t.scan_box_rows = options_.tma_scan_box_rows == 16 ? 16 : 64;
        t.cu_seqlens = v.cu_seqlens;
        t.row_base = row_base;
        t.tombstones = v.tombstones;
        t.doc_begin = c0;
        t.num_docs = clen;
        // About eight waves of blocks: even finishing times on ragged
        // documents, and few enough blocks that each one's pipeline fill
        // is amortised. (Batched scans measured the same with one to four
        // waves, 5% slower with sixteen: bench/NOTES.md s4.)
        const int64_t slots =
            int64_t{sm_count_} *
            TmaBlocksPerSm(tma.warpgroups, int8_mma ? dim : 0) * 8;
        t.docs_per_unit =
            options_.tma_scan_docs_per_unit > 0
                ? options_.tma_scan_docs_per_unit
                : std::max<int64_t>(1, (clen + slots - 1) / slots);
        t.scores = w.scores;
        t.score_stride = clen;
        MAXSIMD_RETURN_IF_ERROR(launch_tma(t));
      } else {
        ScanLaunchParams sp;
        sp.dtype = dtype;
        sp.dim = dim;
        sp.dpad = dpad;
        sp.query = dev_query;
        sp.row_query = dev_row_query;
        sp.query_offsets = dev_qoff;
        sp.rows_total = rows;
        sp.tokens = tokens;
        sp.row_base = row_base;
        sp.cu_seqlens = v.cu_seqlens;
        sp.tombstones = v.tombstones;
        sp.doc_begin = c0;
        sp.num_docs = clen;
        sp.scores = w.scores;
        sp.score_stride = clen;
        sp.row_tiles = ChooseRowTiles(rows, dpad);
        MAXSIMD_RETURN_IF_ERROR(LaunchMaxSimScan(sp, stream));
      }
      TopKSource src;
      src.scores = w.scores;
      src.position_base = static_cast<uint32_t>(c0);
      src.tombstones = v.tombstones;
      src.row_stride = clen;
      src.row_len = clen;
      return timed([&] {
        return SelectTopK(src, nq, clen, dev_topk, kmax, c0 > 0, w.topk, w.ws,
                          stream);
      });
    };
    int64_t streamed_chunks = 0;
    for (size_t s = 0; s < p.segments.size(); ++s) {
      const SegmentView& v = p.segments[s].resident;
      if (v.num_docs == 0) continue;
      if (!p.segments[s].streamed) {
        // Chunks of one size: no short last launch, which would cost
        // nearly a full one's fixed time for few documents.
        const int64_t parts = (v.num_docs + chunk - 1) / chunk;
        const int64_t even = (v.num_docs + parts - 1) / parts;
        for (int64_t c0 = 0; c0 < v.num_docs; c0 += even) {
          MAXSIMD_RETURN_IF_ERROR(score_chunk(
              s, c0, std::min(even, v.num_docs - c0), v.tokens, s, 0));
        }
      } else {
        // Host-placed: chunks of whole documents that fit a stream buffer,
        // alternating buffers, so chunk i + 1's copy overlaps chunk i's
        // kernels.
        const int64_t* cu = p.segments[s].host.cu_seqlens;
        const char* host_tokens = static_cast<const char*>(v.tokens);
        for (int64_t c0 = 0; c0 < v.num_docs;) {
          const int64_t t0 = cu[c0];
          const int64_t limit = std::min(v.num_docs, c0 + chunk);
          const int64_t c1 =
              std::upper_bound(cu + c0 + 1, cu + limit + 1, t0 + stream_rows) -
              cu - 1;
          if (c1 == c0) {
            return absl::InvalidArgumentError(absl::StrCat(
                "GpuBackend::Search: document ", c0, " of segments[", s,
                "] has ", cu[c0 + 1] - t0,
                " token rows, more than a stream "
                "buffer holds (",
                stream_rows, "; stream_buffer_bytes / (2 x dim))"));
          }
          const int b = static_cast<int>(streamed_chunks++ % kStreamBuffers);
          MAXSIMD_RETURN_IF_ERROR(stream_in(b, host_tokens + t0 * row_bytes,
                                            (cu[c1] - t0) * row_bytes));
          MAXSIMD_RETURN_IF_ERROR(
              score_chunk(s, c0, c1 - c0, w.dev_stream[b], nseg + b, t0));
          MAXSIMD_RETURN_IF_ERROR(stream_done(b));
          c0 = c1;
        }
      }
      MAXSIMD_RETURN_IF_ERROR(fetch(v.base_index, false));
    }
    MAXSIMD_CUDA_CHECK(cudaEventRecord(w.done, stream));
    if (in_order.has_value()) last_scan_done_ = w.done;
  }
  if (gather) MAXSIMD_CUDA_CHECK(cudaEventRecord(w.done, stream));
  MAXSIMD_CUDA_CHECK(WaitForSearch(stream));
  merge_pending();

  if (timing != nullptr) {
    float ms_h2d = 0, ms_wait = 0, ms_total = 0, ms_topk = 0;
    MAXSIMD_CUDA_CHECK(cudaEventElapsedTime(&ms_h2d, w.start, w.staged));
    MAXSIMD_CUDA_CHECK(cudaEventElapsedTime(&ms_wait, w.staged, w.ready));
    MAXSIMD_CUDA_CHECK(cudaEventElapsedTime(&ms_total, w.ready, w.done));
    for (int i = 0; i < pairs_used; ++i) {
      float ms = 0;
      MAXSIMD_CUDA_CHECK(cudaEventElapsedTime(&ms, w.pair[i][0], w.pair[i][1]));
      ms_topk += ms;
    }
    // Streamed host-placed tokens: the span of their copies, which
    // overlaps the kernels (so kernel_ns includes any wait for them).
    if (stream_copies > 0) {
      float ms_stream = 0;
      MAXSIMD_CUDA_CHECK(cudaEventSynchronize(w.stream_last));
      MAXSIMD_CUDA_CHECK(
          cudaEventElapsedTime(&ms_stream, w.stream_first, w.stream_last));
      ms_h2d += ms_stream;
    }
    timing->h2d_ns =
        (host_staged - host_start) + static_cast<int64_t>(ms_h2d * 1e6);
    timing->topk_ns = static_cast<int64_t>(ms_topk * 1e6);
    timing->device_wait_ns = static_cast<int64_t>(ms_wait * 1e6);
    // The D2H copies of the results are small and overlap the next
    // segment's work; what remains after the last kernel is host merging.
    timing->d2h_ns = 0;
    timing->kernel_ns =
        std::max<int64_t>(0, static_cast<int64_t>((ms_total - ms_topk) * 1e6));
  }
  return absl::OkStatus();
}

}  // namespace

int GpuBackend::DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

bool GpuBackend::TmaKernelsAvailable(int device) {
  if (device < 0 || device >= DeviceCount()) return false;
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const absl::StatusOr<bool> loaded = TmaKernelsLoaded(stream);
  MAXSIMD_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
  return loaded.ok() && *loaded;
}

absl::StatusOr<std::unique_ptr<Backend>> GpuBackend::Create(
    const GpuBackendOptions& options) {
  const int count = DeviceCount();
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("GpuBackend::Create: device is ", options.device,
                     ", this machine has ", count, " CUDA devices"));
  }
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GpuBackend::Create: num_workers is ", options.num_workers,
                     ", must be at least 1"));
  }
  const BackendLimits& lim = options.limits;
  if (lim.max_batch_queries < 1 || lim.max_batch_query_tokens < 1 ||
      lim.max_batch_candidates < 0 || lim.max_dim < 1 ||
      options.max_query_elements < 32 || options.scan_chunk_entries < 1) {
    return absl::InvalidArgumentError(
        "GpuBackend::Create: limits must be positive");
  }
  DeviceGuard guard(options.device);
  auto backend = std::make_unique<GpuBackendImpl>(options);
  absl::Status st = backend->Init();
  if (!st.ok()) {
    (void)cudaGetLastError();
    return st;
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace maxsimd
