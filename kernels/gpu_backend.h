// The GPU backend: fused CUDA MaxSim + top-k over device-resident segments.
//
// This header carries no CUDA types, so server/ can include it. When the
// project is built without CUDA, gpu_backend_none.cc provides the same API:
// DeviceCount() is 0 and Create() answers UNIMPLEMENTED.
//
// Ownership: the backend owns, per worker slot, two CUDA streams (compute
// and host-to-device streaming), a device workspace and pinned staging
// buffers, all allocated in Create() and sized by `limits`; Search()
// allocates nothing. Buffers returned by Upload() own device memory, those
// returned by Pin() own the page lock of the caller's host memory; neither
// may outlive a backend call in flight that reads it.
// AssignNearestCentroids() (k-means for PLAID codec training, not a
// request path) allocates its scratch for the call: the centroids, two
// 64 MB token buffers that it fills in turn, and the codes; the scratch
// counts with the corpus arrays against corpus_budget_bytes while it
// lives, and is freed before the call returns. It runs on two streams of
// its own, so searches keep their worker slots meanwhile. ScoreCentroids()
// (PLAID candidate generation's centroid product, a request path) takes a
// worker slot like a search and allocates nothing: it runs in chunks
// through the slot's scratch (centroid_score_entries).
//
// Thread-safety: as Backend. Each Search() holds one worker slot for its
// duration; with all slots busy a caller waits for one. A CUDA error that
// leaves the context unusable is sticky: healthy() turns false and every
// later call answers UNAVAILABLE. Tests provoke a failed cudaMalloc and a
// kernel fault through the fault points gpu.malloc and gpu.kernel
// (fault_injection.h).
#ifndef MAXSIMD_KERNELS_GPU_BACKEND_H_
#define MAXSIMD_KERNELS_GPU_BACKEND_H_

#include <memory>

#include "kernels/backend.h"

namespace maxsimd {

struct GpuBackendOptions {
  int device = 0;        // CUDA device ordinal
  int num_workers = 2;   // worker slots, each with its own stream + workspace
  BackendLimits limits;  // limits.max_dim is capped at 2048 on the GPU
  // Staged query elements per batch (total query tokens x dim rounded up to
  // a multiple of 32); a larger batch is refused with INVALID_ARGUMENT. Sizes
  // the pinned and device query buffers (2 bytes per element each).
  int64_t max_query_elements = int64_t{1} << 23;
  // (queries x documents) scores a scan holds at once: the scan walks each
  // segment in equal chunks of at most scan_chunk_entries / num_queries
  // documents (one launch and one top-k each), so its workspace stays
  // bounded whatever the corpus size (4 bytes per entry).
  int64_t scan_chunk_entries = int64_t{1} << 22;
  // Score with the Hopper TMA + wgmma kernels where they apply (widths 64 to
  // 256 that are multiples of 8, at most 1024 segments per search, batches
  // whose staged tiles fit the query buffer); false forces the mma.sync
  // kernels everywhere (tests compare the two). Create() turns it off where
  // the TMA kernels do not run (TmaKernelsAvailable).
  bool use_tma = true;
  // Rows per copy of a TMA scan (16 or 64): a tuning knob, measured by
  // bench/maxsim_bench --tma-box.
  int tma_scan_box_rows = 64;
  // Documents per work unit of a TMA scan (0: enough units for about eight
  // waves of blocks). A unit's documents share chunks, so a small corpus
  // with units of one document never has two in a chunk: the tests set it
  // to reach the kernel's multi-document chunks on a small corpus.
  int64_t tma_scan_docs_per_unit = 0;
  // Query tiles one TMA scan launch covers (0: the kernel's limit, 32 tiles
  // of 64 rows). Fewer tiles per launch keep them resident in shared memory
  // (up to 4) instead of streamed from L2 per chunk, but read the corpus
  // once per launch: a tuning knob, measured by maxsim_bench
  // --tma-scan-group.
  int tma_scan_tile_group = 0;
  // Run the kernels of concurrent scans one search after another, each
  // with its top-k, instead of letting the device interleave them. A scan
  // kernel fills every SM for its whole run, so interleaved, one batch's
  // short top-k waits behind another batch's whole kernel and both finish
  // late; in order, each batch finishes one kernel sooner and the device
  // does the same work. Staging and copies still overlap other searches.
  // Reranks (gathers) always run concurrently.
  bool serialize_scans = true;
  // Most bytes of corpus arrays this backend keeps on its device (0: as
  // much as fits); an upload past it is RESOURCE_EXHAUSTED.
  int64_t corpus_budget_bytes = 0;
  // Host-placed tokens (Pin): each worker has two device buffers of this
  // size through which a scan streams them, the copy of chunk i + 1
  // overlapping the kernel on chunk i, and two pinned host buffers of the
  // same size into which a rerank gathers its host-placed candidates' rows
  // before their copy. One document's rows must fit one buffer. 0: no
  // buffers, and Pin() is refused.
  int64_t stream_buffer_bytes = int64_t{64} << 20;
  // Most bytes of host memory Pin() page-locks (0: no limit).
  int64_t pinned_budget_bytes = 0;
  // PLAID corpora at d = 128 with one query tile per block (reranks of
  // queries of at most 32 rows, scans of at most 32 staged rows) are scored
  // on the int8 MMA (maxsim_tma.h, TmaPlaidUsesMma): residuals as int8
  // levels against quantised query rows, plus a float16 table of each
  // query row against each centroid. Each worker allocates that table at
  // creation, plaid_table_bytes of device memory (where the TMA kernels
  // run); a batch whose table is larger (4 bytes per centroid per 2 query
  // rows, for every tile) takes the float16 decode. False: always the
  // float16 decode, and no table.
  bool plaid_int8_mma = true;
  int64_t plaid_table_bytes = int64_t{64} << 20;
  // Scans of those corpora at 2 and 4 bits take the warp kernel of
  // kernels/plaid_scan.cu (residuals decoded in registers, the centroid
  // term as the MMA's initial accumulator; its table, twice the float16
  // one's bytes, shares the limit above). False: the TMA kernel's.
  bool plaid_warp_scan = true;
  // ScoreCentroids (PLAID candidate generation's Q C^T, kernels/
  // plaid_centroids.h): fp32 scores per chunk. Each worker holds a device
  // buffer of this many scores, two pinned host buffers of as many through
  // which the chunks come back (the copy of one overlapping the host's
  // read of the other), and a device buffer of as many query values (at
  // least one row of limits.max_dim): at the default, 16 MiB of device
  // memory and 16 MiB of pinned host memory per worker. A product larger
  // than a chunk runs in several (rows, then columns). 0: no buffers, and
  // ScoreCentroids answers UNIMPLEMENTED (the caller computes on the
  // host).
  int64_t centroid_score_entries = int64_t{1} << 21;
};

class GpuBackend {
 public:
  // Number of usable CUDA devices; 0 without a GPU, a driver, or CUDA
  // support in this build. Never fails.
  static int DeviceCount();

  // Whether the Hopper TMA kernels run on `device`: a Hopper GPU (sm_90)
  // and a build that carries sm_90a code for it (cmake/MaxsimdCudaArchs.cmake).
  // Where they do not, Create() turns GpuBackendOptions::use_tma off and
  // the backend refuses int8 and PLAID corpora. False without a GPU.
  static bool TmaKernelsAvailable(int device);

  // Creates a backend on options.device. Errors: UNIMPLEMENTED without CUDA
  // support, INVALID_ARGUMENT for a bad ordinal, RESOURCE_EXHAUSTED when the
  // workspace does not fit, UNAVAILABLE for other CUDA failures.
  static absl::StatusOr<std::unique_ptr<Backend>> Create(
      const GpuBackendOptions& options);
};

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_GPU_BACKEND_H_
