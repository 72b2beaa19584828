// The GPU Backend's overrides: creation (worker slots, worker.h), request
// validation, Upload() and Pin() with their budgets, and the k-means
// assignment of PLAID codec training. A search takes a worker slot, plans
// on the host (search_plan.h), and runs the scan or gather pipeline
// (pipeline.h):
//
//   PlanSearch -> StageRequest (pinned blob) -> SearchRun::Upload (one H2D)
//   -> RunScan / RunGather -> SearchRun::Finish (wait, merge, timing)
//
// Two kernel families score: the Hopper TMA + wgmma kernel (maxsim_tma.h)
// wherever it applies, with queries staged in its swizzled tile layout and a
// tensor map per segment; the mma.sync kernels (maxsim_scan.h,
// maxsim_gather.h) for every other width.
//
// AssignNearestCentroids() runs the k-means assignment of PLAID codec
// training (kmeans.h) on its own two streams, with scratch allocated for
// the call. ScoreCentroids() runs PLAID candidate generation's centroid
// product (plaid_centroids.h) on a worker slot, in chunks through the
// slot's scratch.
//
// Nothing here allocates on the request path; Upload() is the write path.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda_check.cuh"
#include "kernels/gpu/pipeline.h"
#include "kernels/gpu/search_plan.h"
#include "kernels/gpu/worker.h"
#include "kernels/gpu_backend.h"
#include "kernels/kmeans.h"
#include "kernels/maxsim_tma.h"
#include "kernels/plaid_bits.h"
#include "kernels/plaid_centroids.h"

namespace maxsimd {
namespace {

// The widest embedding the pass tile of the MaxSim kernels holds in shared
// memory (32 rows x 2048 x 2 bytes).
constexpr int32_t kGpuMaxDim = 2048;
constexpr size_t kAlign = 256;
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
  // Int8 corpora at every width: the TMA kernel at the widths it widens
  // whole, the mma.sync kernels elsewhere and on every GPU. PLAID corpora
  // take the TMA kernel only, at the widths it decodes whole.
  bool SupportsDType(DType dtype, int32_t dim) const override {
    if (dtype == DType::kInt8) return dim > 0;
    if (PlaidNbits(dtype) > 0) {
      return options_.use_tma && TmaSupportsPlaidDim(dim, PlaidNbits(dtype));
    }
    return dtype == DType::kFloat16 || dtype == DType::kBFloat16;
  }
  // Quantised queries at the widths where they go to the int8 tensor cores
  // (1.6x the float16 queries' scan on an H200); elsewhere both query modes
  // take the same float16 MMA over widened codes.
  bool PrefersQuantizedQueries(int32_t dim) const override {
    return options_.use_tma && TmaInt8UsesMma(dim, true);
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
  absl::Status ScoreCentroids(int shard, const PlaidTablesView& tables,
                              int32_t dim, absl::Span<const float> tokens,
                              absl::Span<float> scores) override;
  bool ScoresCentroids() const override {
    return options_.centroid_score_entries > 0;
  }

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

  int AcquireWorker();
  void ReleaseWorker(int index);
  // Marks the backend unhealthy when `st` is a device failure.
  absl::Status Sticky(absl::Status st);
  // Checks what the GPU backend adds to ValidateSearchParams.
  absl::Status ValidateSegments(const SearchParams& params) const;
  absl::Status RunCentroidScores(Worker& w, const PlaidTablesView& tables,
                                 int32_t dim, absl::Span<const float> tokens,
                                 absl::Span<float> scores);
  absl::Status RunSearch(Worker& w, const SearchParams& p,
                         absl::Span<std::vector<ScoredDoc>> results,
                         SearchTiming* timing);

  GpuBackendOptions options_;
  int sm_count_ = 1;
  PlanConfig plan_config_;  // set by Init()
  PipelineKnobs knobs_;     // set by Init()
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
  ScanOrder scan_order_;
};

GpuBackendImpl::~GpuBackendImpl() {
  DeviceGuard guard(options_.device);
  for (Worker& w : workers_) DestroyWorker(&w);
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
  plan_config_.limits = options_.limits;
  plan_config_.sm_count = sm_count_;
  plan_config_.use_tma = options_.use_tma;
  plan_config_.max_query_elements = options_.max_query_elements;
  plan_config_.plaid_table_bytes = options_.use_tma && options_.plaid_int8_mma
                                       ? options_.plaid_table_bytes
                                       : 0;
  plan_config_.plaid_warp_scan = options_.plaid_warp_scan;
  plan_config_.stream_buffer_bytes = options_.stream_buffer_bytes;
  knobs_.sm_count = sm_count_;
  knobs_.tma_scan_box_rows = options_.tma_scan_box_rows;
  knobs_.tma_scan_docs_per_unit = options_.tma_scan_docs_per_unit;
  knobs_.tma_scan_tile_group = options_.tma_scan_tile_group;
  scan_order_.serialize = options_.serialize_scans;
  workers_.resize(options_.num_workers);
  for (int i = 0; i < options_.num_workers; ++i) {
    MAXSIMD_RETURN_IF_ERROR(InitWorker(options_, &workers_[i]));
    workspace_bytes_ += workers_[i].device_bytes;
    absl::MutexLock lock(&mu_);
    free_.push_back(i);
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

// One chunk of a ScoreCentroids call: the scores of rows [row0, row0 +
// rows) against centroids [col0, col0 + cols), with the rows read from the
// worker's token block, which holds the call's rows from `block0` on.
struct CentroidChunk {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0, block0 = 0;
};

// Enqueues chunk `c` on w.stream: the kernel into w.qc_scores, then its
// copy into pinned buffer `buf`, whose event marks it done.
absl::Status EnqueueCentroidChunk(Worker& w, const PlaidTablesView& tables,
                                  int32_t dim, const CentroidChunk& c,
                                  int buf) {
  CentroidScoresParams p;
  p.tokens = w.qc_tokens + (c.row0 - c.block0) * dim;
  p.num_tokens = c.rows;
  p.centroids = tables.centroids + c.col0 * dim;
  p.num_centroids = c.cols;
  p.dim = dim;
  p.scores = w.qc_scores;
  p.ld_scores = c.cols;
  MAXSIMD_RETURN_IF_ERROR(LaunchCentroidScores(p, w.stream));
  MAXSIMD_CUDA_CHECK(
      cudaMemcpyAsync(w.qc_pinned[buf], w.qc_scores,
                      static_cast<size_t>(c.rows * c.cols) * sizeof(float),
                      cudaMemcpyDeviceToHost, w.stream));
  MAXSIMD_CUDA_CHECK(cudaEventRecord(w.qc_copied[buf], w.stream));
  return absl::OkStatus();
}

// Waits for chunk `c`'s copy into pinned buffer `buf` and moves it into
// `scores` ([rows, k]), on w.pack_pool's threads where the worker has them
// (one thread's memcpy moves about 8 GB/s, slower than the copy from the
// device): pieces of about kDrainPiece values, whole rows of the chunk.
absl::Status DrainCentroidChunk(Worker& w, const CentroidChunk& c, int buf,
                                int64_t k, absl::Span<float> scores) {
  constexpr int64_t kDrainPiece = int64_t{1} << 18;  // 1 MiB
  MAXSIMD_CUDA_CHECK(cudaEventSynchronize(w.qc_copied[buf]));
  const float* src = w.qc_pinned[buf];
  float* dst = scores.data() + c.row0 * k + c.col0;
  // A chunk of whole rows is one run of values: cut it anywhere.
  const bool whole = c.cols == k;
  const int64_t runs = whole ? 1 : c.rows;
  const int64_t run = whole ? c.rows * k : c.cols;
  const int64_t per_run = (run + kDrainPiece - 1) / kDrainPiece;
  auto copy = [&](int, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r = p / per_run;
      const int64_t at = (p % per_run) * kDrainPiece;
      std::memcpy(
          dst + r * k + at, src + r * run + at,
          static_cast<size_t>(std::min(kDrainPiece, run - at)) * sizeof(float));
    }
  };
  const int64_t pieces = runs * per_run;
  const int64_t grain = std::max<int64_t>(1, kDrainPiece / run);
  if (w.pack_pool != nullptr && pieces > grain) {
    w.pack_pool->ParallelFor(pieces, grain, copy);
  } else {
    copy(0, 0, pieces);
  }
  return absl::OkStatus();
}

absl::Status GpuBackendImpl::ScoreCentroids(int shard,
                                            const PlaidTablesView& tables,
                                            int32_t dim,
                                            absl::Span<const float> tokens,
                                            absl::Span<float> scores) {
  if (!ScoresCentroids()) {
    return absl::UnimplementedError(
        "GpuBackend::ScoreCentroids: centroid_score_entries is 0, so the "
        "workers have no scratch for it; compute it on the host");
  }
  MAXSIMD_RETURN_IF_ERROR(ValidateScoreCentroids(shard, 1, tables, dim, tokens,
                                                 scores, options_.limits));
  if (!healthy_.load()) {
    return absl::UnavailableError(
        "GpuBackend::ScoreCentroids: the device has failed");
  }
  if (tokens.empty()) return absl::OkStatus();
  NvtxRange range("maxsimd.plaid_centroids");
  DeviceGuard guard(options_.device);
  const int index = AcquireWorker();
  absl::Status st =
      RunCentroidScores(workers_[index], tables, dim, tokens, scores);
  if (!st.ok()) {
    // Leave the slot's stream idle (and its pinned buffers unwritten).
    (void)cudaStreamSynchronize(workers_[index].stream);
  }
  ReleaseWorker(index);
  return Sticky(st);
}

// Rows go to the device a block at a time (as many as w.qc_tokens holds);
// each block's scores come back in chunks of w.qc_entries: whole rows
// where a row fits, else one row in pieces of columns. Chunk n computes
// and copies into pinned buffer n % 2 while the host moves chunk n - 1
// out of the other.
absl::Status GpuBackendImpl::RunCentroidScores(Worker& w,
                                               const PlaidTablesView& tables,
                                               int32_t dim,
                                               absl::Span<const float> tokens,
                                               absl::Span<float> scores) {
  const int64_t m = static_cast<int64_t>(tokens.size()) / dim;
  const int64_t k = tables.num_centroids;
  const int64_t block_rows = std::min(m, w.qc_token_values / dim);
  const int64_t chunk_rows = std::clamp<int64_t>(
      w.qc_entries / k, 1, std::min(block_rows, kMaxCentroidScoreTokens));
  const int64_t chunk_cols = std::min(k, w.qc_entries / chunk_rows);
  CentroidChunk pending;
  int64_t n = 0;
  for (int64_t b0 = 0; b0 < m; b0 += block_rows) {
    const int64_t b_rows = std::min(block_rows, m - b0);
    MAXSIMD_CUDA_CHECK(
        cudaMemcpyAsync(w.qc_tokens, tokens.data() + b0 * dim,
                        static_cast<size_t>(b_rows * dim) * sizeof(float),
                        cudaMemcpyHostToDevice, w.stream));
    for (int64_t r0 = b0; r0 < b0 + b_rows; r0 += chunk_rows) {
      for (int64_t c0 = 0; c0 < k; c0 += chunk_cols) {
        const CentroidChunk c{r0, std::min(chunk_rows, b0 + b_rows - r0), c0,
                              std::min(chunk_cols, k - c0), b0};
        MAXSIMD_RETURN_IF_ERROR(
            EnqueueCentroidChunk(w, tables, dim, c, static_cast<int>(n % 2)));
        if (n > 0) {
          MAXSIMD_RETURN_IF_ERROR(DrainCentroidChunk(
              w, pending, static_cast<int>((n - 1) % 2), k, scores));
        }
        pending = c;
        ++n;
      }
    }
  }
  MAXSIMD_CUDA_CHECK(WaitForSearch(w.stream));
  return DrainCentroidChunk(w, pending, static_cast<int>((n - 1) % 2), k,
                            scores);
}

absl::Status GpuBackendImpl::ValidateSegments(
    const SearchParams& params) const {
  const DType dtype = params.segments[0].resident.dtype;
  for (size_t s = 0; s < params.segments.size(); ++s) {
    const SegmentView& v = params.segments[s].resident;
    if (v.dtype == DType::kInt8) {
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
  MAXSIMD_RETURN_IF_ERROR(ValidateSegments(params));
  NvtxRange range("maxsimd.search");
  DeviceGuard guard(options_.device);
  const int index = AcquireWorker();
  absl::Status st = RunSearch(workers_[index], params, results, timing);
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

absl::Status GpuBackendImpl::RunSearch(
    Worker& w, const SearchParams& p,
    absl::Span<std::vector<ScoredDoc>> results, SearchTiming* timing) {
  const int64_t host_start = NowNs();
  MAXSIMD_ASSIGN_OR_RETURN(const SearchPlan plan, PlanSearch(p, plan_config_));
  StagedInputs staged;
  {
    NvtxRange r("maxsimd.stage");
    const char* buffers[kStreamBuffers];
    StreamBufferAddresses(w, buffers);
    MAXSIMD_ASSIGN_OR_RETURN(staged,
                             StageRequest(p, plan, w.pinned_in, buffers));
  }
  SearchRun run(w, p, plan, std::move(staged), knobs_, results);
  if (plan.tma.on) MAXSIMD_RETURN_IF_ERROR(run.EncodeMaps());
  const int64_t host_staged = NowNs();
  MAXSIMD_RETURN_IF_ERROR(run.Upload());
  MAXSIMD_RETURN_IF_ERROR(plan.gather ? RunGather(run)
                                      : RunScan(run, scan_order_));
  return run.Finish(host_start, host_staged, timing);
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
  if (options.centroid_score_entries < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GpuBackend::Create: centroid_score_entries is ",
        options.centroid_score_entries, ", must be 0 (off) or more"));
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
