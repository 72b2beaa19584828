// Kernel benchmark: measures the device's ceilings (HBM read bandwidth
// with a streaming-read kernel; dense bf16 GEMM rate through cuBLAS, loaded
// at run time; pinned host-to-device copy rate) and then every standard
// shape of BENCHMARKS.md through the GpuBackend API, in one run, and prints
// per shape the time, the floor (max(bytes / hbm_read, flops / gemm_rate)),
// % of floor and the target. The `_host` shapes keep the colbert corpus in
// pinned host memory, streamed per search; their floor is the tokens'
// bytes at the pinned copy rate, and their time the wall time. The `_int8`
// shapes are their fp16 twins (the name without `_int8`) over an int8
// corpus of the same document lengths (codes plus one fp32 scale per row,
// queries in the fp16 mode); their bytes are the codes and the scales,
// their floor as for any resident shape, and their target a speedup over
// the twin measured in the same run (null when the twin did not run).
// The `_int8q` shapes are the same int8 corpora with quantised queries,
// which take the int8 MMA (no widening) at d = 128; their twins are the
// fp16 shapes too.
// The `_plaid2` / `_plaid4` scans are the colbert scan's twins over a PLAID
// corpus (d = 128, 2- or 4-bit residuals, 16384 centroids, random codes and
// residuals): their bytes are the compressed ones (residual row, 4-byte
// centroid id and 4-byte scale per token, offsets), reported as % of the
// HBM read ceiling, with the speedup over the fp16 twin. plaid_rerank_25k
// reranks 4096 random distinct candidates of 25k documents of 300 tokens
// (nbits 2) for one query per search, and `_batch16` for 16 queries per
// search: ms per query against 9.25 ms, the published PLAID rerank time of
// the late-interaction-kernels project (target: >= 10x).
//
// Usage: maxsim_bench [--json PATH] [--runs N] [--only NAME[,NAME...]]
//                     [--kernels tma|mma] [--tma-box 16|64]
//                     [--tma-scan-group TILES] [--scan-chunk-entries N]
//                     [--scan-docs-per-unit N] [--plaid-int8-mma 0|1]
//                     [--plaid-warp-scan 0|1]
//
// --plaid-int8-mma 0 scores the PLAID shapes with the float16 decode
// instead of the int8 MMA (GpuBackendOptions::plaid_int8_mma);
// --plaid-warp-scan 0 scans them with the TMA kernel instead of the warp
// kernel (GpuBackendOptions::plaid_warp_scan).
//
// e.g. --only colbert_scan_100k,colbert_scan_100k_int8 measures one int8
// shape with its twin.
//
// Corpora are filled on the device with hashed random values (never zero)
// and handed to the backend as views of device memory, so the 25 GB of
// corpora cost no host generation or PCIe time (an int8 corpus's scales are
// copied back once, for the host view). Times are medians of >= 20 timed
// runs after warm-up; rerank shapes rotate among candidate sets so that
// repeated runs do not read a warm L2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/gpu_backend.h"
#include "kernels/types.h"

namespace {

#define BENCH_CHECK(call)                                               \
  do {                                                                  \
    const cudaError_t e_ = (call);                                      \
    if (e_ != cudaSuccess) {                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(e_));                             \
      std::exit(2);                                                     \
    }                                                                   \
  } while (0)

// ---------------------------------------------------------------- fill --

__device__ __forceinline__ uint32_t Hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Uniform in [-1, 1) scaled by `scale`, never exactly zero.
__device__ __forceinline__ float HashValue(uint64_t i, uint64_t seed,
                                           float scale) {
  const uint32_t h = Hash(i * 0x9e3779b97f4a7c15ull + seed);
  float v = (static_cast<float>(h >> 8) + 0.5f) * (2.0f / 16777216.0f) - 1.0f;
  return v * scale;
}

__global__ void FillHalf(__half* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = __float2half(HashValue(i, seed, scale));
  }
}

__global__ void FillBf16(__nv_bfloat16* p, int64_t n, uint64_t seed,
                         float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = __float2bfloat16(HashValue(i, seed, scale));
  }
}

// Int8 codes: HashValue rounded over [-127, 127], never zero (1 instead).
__global__ void FillInt8(int8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int v = __float2int_rn(HashValue(i, seed, 127.f));
    p[i] = static_cast<int8_t>(v == 0 ? 1 : v);
  }
}

// Random bytes (PLAID residual rows).
__global__ void FillBytes(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = static_cast<uint8_t>(Hash(i * 0x9e3779b97f4a7c15ull + seed));
  }
}

// out[i] = float(in[i]) (PLAID: the fp32 centroids of the float16 ones).
__global__ void WidenHalf(const __half* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __half2float(in[i]);
  }
}

// PLAID centroid ids uniform in [0, k).
__global__ void FillCodes(int32_t* p, int64_t n, uint64_t seed, int32_t k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = static_cast<int32_t>(Hash(i * 0x9e3779b97f4a7c15ull + seed) % k);
  }
}

// Per-row scales in [0.5, 1] * `max_scale`: positive, as
// kernels/quantize.h makes them for rows that are not all zero.
__global__ void FillScales(float* p, int64_t n, uint64_t seed,
                           float max_scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = (0.75f + HashValue(i, seed, 0.25f)) * max_scale;
  }
}

// ------------------------------------------------------- HBM read probe --

// Streams `n16` 16-byte words through 16-byte loads, 4 in flight per
// thread, and folds them with a max so the loads cannot be elided.
__global__ void __launch_bounds__(512)
    ReadMax(const uint4* p, int64_t n16, uint32_t* out) {
  uint32_t m = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(p + i + u * stride));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      m = max(m, max(max(v[u].x, v[u].y), max(v[u].z, v[u].w)));
    }
  }
  for (; i < n16; i += stride) {
    const uint4 v = p[i];
    m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
  }
  for (int off = 16; off > 0; off >>= 1) {
    m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  }
  if ((threadIdx.x & 31) == 0) atomicMax(out, m);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double TimeEventsMs(cudaStream_t s, int warmup, int runs, Fn fn) {
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    BENCH_CHECK(cudaEventRecord(a, s));
    fn(i);
    BENCH_CHECK(cudaEventRecord(b, s));
    BENCH_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  return Median(t);
}

double MeasureHbmReadTBps(cudaStream_t s, int runs) {
  const int64_t bytes = int64_t{6} << 30;
  void* buf = nullptr;
  BENCH_CHECK(cudaMalloc(&buf, bytes));
  FillHalf<<<4096, 256, 0, s>>>(static_cast<__half*>(buf), bytes / 2, 7, 1.f);
  BENCH_CHECK(cudaGetLastError());
  uint32_t* out = nullptr;
  BENCH_CHECK(cudaMalloc(&out, sizeof(uint32_t)));
  int sms = 0;
  BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double ms = TimeEventsMs(s, 3, runs, [&](int) {
    ReadMax<<<sms * 4, 512, 0, s>>>(static_cast<const uint4*>(buf), bytes / 16,
                                    out);
  });
  BENCH_CHECK(cudaGetLastError());
  BENCH_CHECK(cudaFree(out));
  BENCH_CHECK(cudaFree(buf));
  return bytes / (ms * 1e-3) / 1e12;
}

// Pinned host -> device copy rate in GB/s: 1 GiB copies, median of `runs`.
double MeasurePinnedH2DGBps(cudaStream_t s, int runs) {
  const size_t bytes = size_t{1} << 30;
  void* host = nullptr;
  void* dev = nullptr;
  BENCH_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  BENCH_CHECK(cudaMalloc(&dev, bytes));
  std::memset(host, 1, bytes);
  const double ms = TimeEventsMs(s, 2, runs, [&](int) {
    BENCH_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
  });
  BENCH_CHECK(cudaFree(dev));
  BENCH_CHECK(cudaFreeHost(host));
  return bytes / (ms * 1e-3) / 1e9;
}

// ------------------------------------------------- cuBLAS, loaded late --

// cuBLAS is opened at run time, so the benchmark builds and runs (without
// the GEMM ceiling) where libcublas is missing, and the bundle need not
// carry its 600 MB.
double MeasureBf16GemmTflops(cudaStream_t s, int runs) {
  void* lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "cuBLAS not found (%s): no GEMM ceiling\n", dlerror());
    return 0;
  }
  using CreateFn = int (*)(void**);
  using SetStreamFn = int (*)(void*, cudaStream_t);
  // cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B,
  // Btype, ldb, beta, C, Ctype, ldc, computeType, algo)
  using GemmExFn = int (*)(void*, int, int, int, int, int, const void*,
                           const void*, int, int, const void*, int, int,
                           const void*, void*, int, int, int, int);
  auto create = reinterpret_cast<CreateFn>(dlsym(lib, "cublasCreate_v2"));
  auto set_stream =
      reinterpret_cast<SetStreamFn>(dlsym(lib, "cublasSetStream_v2"));
  auto gemm = reinterpret_cast<GemmExFn>(dlsym(lib, "cublasGemmEx"));
  if (!create || !set_stream || !gemm) return 0;
  void* handle = nullptr;
  if (create(&handle) != 0) return 0;
  set_stream(handle, s);
  constexpr int n = 8192;
  constexpr int kCudaR16BF = 14;   // cudaDataType CUDA_R_16BF
  constexpr int kComputeF32 = 68;  // CUBLAS_COMPUTE_32F
  constexpr int kOpN = 0, kAlgoDefault = -1;
  __nv_bfloat16 *a, *b, *c;
  BENCH_CHECK(cudaMalloc(&a, sizeof(__nv_bfloat16) * n * n));
  BENCH_CHECK(cudaMalloc(&b, sizeof(__nv_bfloat16) * n * n));
  BENCH_CHECK(cudaMalloc(&c, sizeof(__nv_bfloat16) * n * n));
  FillBf16<<<4096, 256, 0, s>>>(a, int64_t{n} * n, 1, 1.f);
  FillBf16<<<4096, 256, 0, s>>>(b, int64_t{n} * n, 2, 1.f);
  BENCH_CHECK(cudaGetLastError());
  const float alpha = 1.f, beta = 0.f;
  int rc = 0;
  const double ms = TimeEventsMs(s, 3, runs, [&](int) {
    rc |=
        gemm(handle, kOpN, kOpN, n, n, n, &alpha, a, kCudaR16BF, n, b,
             kCudaR16BF, n, &beta, c, kCudaR16BF, n, kComputeF32, kAlgoDefault);
  });
  BENCH_CHECK(cudaFree(a));
  BENCH_CHECK(cudaFree(b));
  BENCH_CHECK(cudaFree(c));
  if (rc != 0) {
    std::fprintf(stderr, "cublasGemmEx failed (%d)\n", rc);
    return 0;
  }
  return 2.0 * n * n * double{n} / (ms * 1e-3) / 1e12;
}

// ------------------------------------------------------------ corpora --

constexpr int kDim = 128;
constexpr int32_t kPlaidCentroids = 16384;
// The published PLAID rerank time the plaid_rerank shapes are compared with
// (late-interaction-kernels: 4096 candidates of 300 tokens, Lq 32).
constexpr double kPlaidRerankBaselineMs = 9.25;

// A device-resident corpus (d = 128, fp16 or int8) and its host
// cu_seqlens; a host-placed copy (HostCopy) keeps the tokens in pinned host
// memory and borrows the device offsets of the corpus it copies. An int8
// corpus also holds its per-row scales, on the device and (for the host
// view, which the backend validates) a host copy.
struct Corpus {
  int64_t docs = 0;
  int32_t dim = kDim;
  maxsimd::DType dtype = maxsimd::DType::kFloat16;
  std::vector<int64_t> cu;  // host
  void* tokens = nullptr;
  float* scales = nullptr;         // int8, PLAID: device, [rows]
  std::vector<float> scales_host;  // int8: host copy of `scales`
  // PLAID: device centroid ids [rows] and codec (float16 and fp32
  // centroids [kPlaidCentroids, kDim], bucket weights).
  int32_t* codes = nullptr;
  uint16_t* centroids_f16 = nullptr;
  float* centroids = nullptr;
  float* weights = nullptr;
  std::vector<float> weights_host;  // PLAID: host copy of `weights`
  int64_t* cu_dev = nullptr;
  bool host = false;  // tokens are pinned host memory, cu_dev borrowed
  maxsimd::SegmentRef ref;

  // Bytes a search reads per token row: the elements and, for int8, the
  // row's scale.
  int64_t RowBytes() const {
    if (maxsimd::PlaidNbits(dtype) > 0) {
      return maxsimd::TokenRowBytes(dtype, dim) + 8;  // + id + scale
    }
    return dim * static_cast<int64_t>(maxsimd::DTypeSize(dtype)) +
           (dtype == maxsimd::DType::kInt8 ? int64_t{sizeof(float)} : 0);
  }

  ~Corpus() {
    if (host) {
      if (tokens) BENCH_CHECK(cudaFreeHost(tokens));
      return;
    }
    if (tokens) BENCH_CHECK(cudaFree(tokens));
    if (scales) BENCH_CHECK(cudaFree(scales));
    if (codes) BENCH_CHECK(cudaFree(codes));
    if (centroids_f16) BENCH_CHECK(cudaFree(centroids_f16));
    if (centroids) BENCH_CHECK(cudaFree(centroids));
    if (weights) BENCH_CHECK(cudaFree(weights));
    if (cu_dev) BENCH_CHECK(cudaFree(cu_dev));
  }
};

// Document lengths uniform in [min_len, max_len] drawn from `seed`, so two
// corpora of the same seed (an fp16 shape and its int8 twin) have the same
// documents. Tokens are `dim` wide (PLAID: kDim only, its codec's width).
std::unique_ptr<Corpus> MakeCorpus(
    cudaStream_t s, int64_t docs, int min_len, int max_len, uint64_t seed,
    maxsimd::DType dtype = maxsimd::DType::kFloat16, int32_t dim = kDim) {
  auto c = std::make_unique<Corpus>();
  c->docs = docs;
  c->dim = dim;
  c->dtype = dtype;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(min_len, max_len);
  c->cu.assign(1, 0);
  for (int64_t d = 0; d < docs; ++d) c->cu.push_back(c->cu.back() + len(rng));
  const int64_t rows = c->cu.back();
  const int64_t elems = rows * dim;
  const bool plaid = maxsimd::PlaidNbits(dtype) > 0;
  BENCH_CHECK(
      cudaMalloc(&c->tokens, plaid ? rows * maxsimd::TokenRowBytes(dtype, dim)
                                   : elems * maxsimd::DTypeSize(dtype)));
  BENCH_CHECK(cudaMalloc(&c->cu_dev, c->cu.size() * sizeof(int64_t)));
  BENCH_CHECK(cudaMemcpy(c->cu_dev, c->cu.data(),
                         c->cu.size() * sizeof(int64_t),
                         cudaMemcpyHostToDevice));
  if (plaid) {
    // Random residual bytes and centroid ids; centroids ~U(-0.1, 0.1) as
    // the fp16 corpus's values, bucket weights within +-0.02, scales in
    // [0.5, 1].
    const int nb = 1 << maxsimd::PlaidNbits(dtype);
    BENCH_CHECK(cudaMalloc(&c->scales, rows * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&c->codes, rows * sizeof(int32_t)));
    BENCH_CHECK(cudaMalloc(&c->centroids_f16,
                           kPlaidCentroids * kDim * sizeof(uint16_t)));
    BENCH_CHECK(
        cudaMalloc(&c->centroids, kPlaidCentroids * kDim * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&c->weights, nb * sizeof(float)));
    FillBytes<<<8192, 256, 0, s>>>(static_cast<uint8_t*>(c->tokens),
                                   rows * maxsimd::TokenRowBytes(dtype, kDim),
                                   seed);
    FillCodes<<<8192, 256, 0, s>>>(c->codes, rows, seed + 2, kPlaidCentroids);
    FillScales<<<8192, 256, 0, s>>>(c->scales, rows, seed + 1, 1.f);
    FillHalf<<<1024, 256, 0, s>>>(reinterpret_cast<__half*>(c->centroids_f16),
                                  kPlaidCentroids * kDim, seed + 3, 0.1f);
    WidenHalf<<<1024, 256, 0, s>>>(
        reinterpret_cast<const __half*>(c->centroids_f16), c->centroids,
        kPlaidCentroids * kDim);
    BENCH_CHECK(cudaGetLastError());
    std::vector<float>& w = c->weights_host;
    w.resize(nb);
    for (int b = 0; b < nb; ++b) w[b] = -0.02f + 0.04f * (b + 0.5f) / nb;
    BENCH_CHECK(cudaMemcpy(c->weights, w.data(), nb * sizeof(float),
                           cudaMemcpyHostToDevice));
  } else if (dtype == maxsimd::DType::kInt8) {
    // Codes over the whole int8 range with scales of rows ~U(-0.1, 0.1)
    // (max |x| / 127), so scores have the fp16 corpus's magnitudes.
    BENCH_CHECK(cudaMalloc(&c->scales, rows * sizeof(float)));
    FillInt8<<<8192, 256, 0, s>>>(static_cast<int8_t*>(c->tokens), elems, seed);
    FillScales<<<8192, 256, 0, s>>>(c->scales, rows, seed + 1, 0.1f / 127.f);
    BENCH_CHECK(cudaGetLastError());
    c->scales_host.resize(static_cast<size_t>(rows));
    BENCH_CHECK(cudaMemcpyAsync(c->scales_host.data(), c->scales,
                                rows * sizeof(float), cudaMemcpyDeviceToHost,
                                s));
  } else {
    // Values ~U(-0.1, 0.1): magnitudes of unit-norm 128-d embeddings.
    FillHalf<<<8192, 256, 0, s>>>(static_cast<__half*>(c->tokens), elems, seed,
                                  0.1f);
    BENCH_CHECK(cudaGetLastError());
  }
  BENCH_CHECK(cudaStreamSynchronize(s));
  maxsimd::SegmentView v;
  v.cu_seqlens = c->cu.data();
  v.scales = c->scales != nullptr ? c->scales_host.data() : nullptr;
  v.num_docs = docs;
  v.num_tokens = rows;
  v.dim = dim;
  v.dtype = dtype;
  if (plaid) {
    // The GPU backend reads only the offsets (and tombstones) and the
    // bucket weights of the host view; its other PLAID fields, which Search
    // checks for presence, name the device arrays.
    v.scales = c->scales;
    v.codes = c->codes;
    v.plaid.centroids = c->centroids;
    v.plaid.centroids_f16 = c->centroids_f16;
    v.plaid.bucket_weights = c->weights_host.data();
    v.plaid.num_centroids = kPlaidCentroids;
  }
  c->ref.host = v;
  if (plaid) v.plaid.bucket_weights = c->weights;
  v.tokens = c->tokens;
  v.scales = c->scales;
  v.cu_seqlens = c->cu_dev;
  c->ref.resident = v;
  return c;
}

// The tokens of `dev` copied to pinned host memory, marked for streaming.
// REQUIRES: dev is fp16 (no host-placed int8 shape).
std::unique_ptr<Corpus> HostCopy(const Corpus& dev) {
  auto c = std::make_unique<Corpus>();
  c->docs = dev.docs;
  c->cu = dev.cu;
  c->host = true;
  const size_t bytes = static_cast<size_t>(dev.cu.back()) * kDim * 2;
  BENCH_CHECK(cudaHostAlloc(&c->tokens, bytes, cudaHostAllocDefault));
  BENCH_CHECK(cudaMemcpy(c->tokens, dev.tokens, bytes, cudaMemcpyDeviceToHost));
  c->cu_dev = dev.cu_dev;
  c->ref = dev.ref;
  c->ref.host.cu_seqlens = c->cu.data();
  c->ref.resident.tokens = c->tokens;
  c->ref.streamed = true;
  return c;
}

// ------------------------------------------------------------- shapes --

struct Result {
  std::string name;
  double gpu_ms = 0, wall_ms = 0, kernel_ms = 0, topk_ms = 0;
  double bytes = 0, flops = 0, floor_ms = 0, pct = 0;
  std::string target;
  bool has_target = false, met = false;
  // Target kind 3: the twin's gpu_ms / this shape's, once both ran
  // (has_speedup false: the twin did not run).
  double speedup = 0;
  bool has_speedup = false;
  // PLAID shapes: % of the HBM read ceiling on the compressed bytes; for
  // reranks, ms per query and the speedup over kPlaidRerankBaselineMs.
  bool plaid = false;
  double hbm_pct = 0;
  double ms_per_query = 0, vs_baseline = 0;
};

struct Shape {
  std::string name;
  int nq, lq;
  Corpus* corpus;
  int64_t candidates;  // 0: scan
  // Target: kind 0 = none, 1 = % of floor >= value, 2 = gpu ms <= value,
  // 3 = gpu ms of the fp16 twin (TwinOf) / gpu ms >= value, 4 = gpu ms per
  // query <= value.
  int target_kind;
  double target_value;
  bool quantize = false;  // int8: queries quantised (quantize_queries)
};

// The fp16 shape an `_int8` shape is compared with: its name without the
// suffix; "" for every other shape.
std::string TwinOf(const std::string& name) {
  for (const std::string suffix : {"_int8", "_int8q", "_plaid2", "_plaid4"}) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return name.substr(0, name.size() - suffix.size());
    }
  }
  return "";
}

// A host-placed corpus is measured by wall time against the pinned
// host -> device rate (`h2d_gbps`): its floor is moving the tokens over the
// bus, the compute overlapping.
Result RunShape(maxsimd::Backend& backend, const Shape& sh, double hbm_tbps,
                double gemm_tflops, double h2d_gbps, int runs) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  const int sets = sh.candidates > 0 ? 8 : 1;
  // Query sets and candidate sets to rotate among.
  std::vector<std::vector<float>> queries(sets);
  std::vector<std::vector<maxsimd::DocRef>> cands(sets);
  for (int i = 0; i < sets; ++i) {
    queries[i].resize(static_cast<size_t>(sh.nq) * sh.lq * sh.corpus->dim);
    for (float& v : queries[i]) v = u(rng);
    if (sh.candidates > 0) {
      // Distinct documents per query (the server de-duplicates).
      std::vector<int64_t> perm(sh.corpus->docs);
      for (int64_t d = 0; d < sh.corpus->docs; ++d) perm[d] = d;
      for (int q = 0; q < sh.nq; ++q) {
        for (int64_t c = 0; c < sh.candidates; ++c) {
          std::uniform_int_distribution<int64_t> pick(c, sh.corpus->docs - 1);
          std::swap(perm[c], perm[pick(rng)]);
          cands[i].push_back({0, perm[c]});
        }
      }
    }
  }
  std::vector<int64_t> qoff(sh.nq + 1), coff(sh.nq + 1);
  for (int q = 0; q <= sh.nq; ++q) {
    qoff[q] = int64_t{q} * sh.lq;
    coff[q] = int64_t{q} * sh.candidates;
  }
  std::vector<int32_t> topk(sh.nq, 100);
  std::vector<std::vector<maxsimd::ScoredDoc>> results(sh.nq);
  // Bytes: tokens of every document read (candidates: the average set),
  // plus 8 bytes of cu_seqlens per document; FLOPs: 2 * rows * d per token.
  double tokens = 0, docs = 0;
  if (sh.candidates > 0) {
    for (const auto& set : cands) {
      for (const auto& r : set) {
        tokens += sh.corpus->cu[r.doc + 1] - sh.corpus->cu[r.doc];
      }
    }
    tokens /= sets;
    docs = double(sh.candidates) * sh.nq;
  } else {
    tokens = double(sh.corpus->cu.back());
    docs = double(sh.corpus->docs);
  }
  Result r;
  r.name = sh.name;
  const double rows_per_token =
      sh.candidates > 0 ? sh.lq : double(sh.nq) * sh.lq;
  r.bytes = tokens * sh.corpus->RowBytes() + (sh.corpus->host ? 0 : docs * 8);
  r.flops = 2.0 * rows_per_token * sh.corpus->dim * tokens;
  const double mem_ms = sh.corpus->host ? r.bytes / (h2d_gbps * 1e9) * 1e3
                                        : r.bytes / (hbm_tbps * 1e12) * 1e3;
  const double cmp_ms =
      gemm_tflops > 0 ? r.flops / (gemm_tflops * 1e12) * 1e3 : 0;
  r.floor_ms = std::max(mem_ms, cmp_ms);

  std::vector<double> gpu, wall, kern, topk_t;
  const int warmup = 3;
  for (int i = 0; i < warmup + runs; ++i) {
    const int set = i % sets;
    maxsimd::SearchParams p;
    p.query_tokens = queries[set].data();
    p.query_offsets = qoff.data();
    p.num_queries = sh.nq;
    p.dim = sh.corpus->dim;
    p.segments = absl::MakeConstSpan(&sh.corpus->ref, 1);
    p.top_k = topk.data();
    p.quantize_queries = sh.quantize;
    if (sh.candidates > 0) {
      p.candidate_offsets = coff.data();
      p.candidates = cands[set].data();
    }
    maxsimd::SearchTiming t;
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status st = backend.Search(p, absl::MakeSpan(results), &t);
    const auto t1 = std::chrono::steady_clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "%s: %s\n", sh.name.c_str(), st.ToString().c_str());
      std::exit(3);
    }
    if (results[0].size() != 100u) {
      std::fprintf(stderr, "%s: %zu results\n", sh.name.c_str(),
                   results[0].size());
      std::exit(3);
    }
    if (i >= warmup) {
      gpu.push_back((t.kernel_ns + t.topk_ns) * 1e-6);
      kern.push_back(t.kernel_ns * 1e-6);
      topk_t.push_back(t.topk_ns * 1e-6);
      wall.push_back(
          std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  r.gpu_ms = Median(gpu);
  r.wall_ms = Median(wall);
  r.kernel_ms = Median(kern);
  r.topk_ms = Median(topk_t);
  r.pct = 100.0 * r.floor_ms / (sh.corpus->host ? r.wall_ms : r.gpu_ms);
  if (maxsimd::PlaidNbits(sh.corpus->dtype) > 0) {
    r.plaid = true;
    r.hbm_pct = 100.0 * mem_ms / r.gpu_ms;
    if (sh.candidates > 0) {
      r.ms_per_query = r.gpu_ms / sh.nq;
      r.vs_baseline = kPlaidRerankBaselineMs / r.ms_per_query;
    }
  }
  char buf[64];
  if (sh.target_kind == 1) {
    r.has_target = true;
    r.met = r.pct >= sh.target_value;
    std::snprintf(buf, sizeof(buf), ">=%.0f%% of floor", sh.target_value);
    r.target = buf;
  } else if (sh.target_kind == 2) {
    r.has_target = true;
    r.met = r.gpu_ms <= sh.target_value;
    std::snprintf(buf, sizeof(buf), "<=%.3f ms", sh.target_value);
    r.target = buf;
  } else if (sh.target_kind == 3) {
    // Judged once every shape ran (SetSpeedups): not met until then.
    r.has_target = true;
    std::snprintf(buf, sizeof(buf), ">=%.1fx fp16", sh.target_value);
    r.target = buf;
  } else if (sh.target_kind == 4) {
    r.has_target = true;
    r.met = r.gpu_ms / sh.nq <= sh.target_value;
    std::snprintf(buf, sizeof(buf), "<=%.3f ms/q", sh.target_value);
    r.target = buf;
  }
  return r;
}

// Fills speedup and met of the kind-3 shapes from their twins' times in
// `results`; a shape whose twin did not run keeps has_speedup false and
// met false.
void SetSpeedups(const std::vector<Shape>& shapes,
                 std::vector<Result>& results) {
  for (Result& r : results) {
    const std::string twin = TwinOf(r.name);
    if (twin.empty()) continue;
    const auto sh =
        std::find_if(shapes.begin(), shapes.end(),
                     [&](const Shape& s) { return s.name == r.name; });
    const auto base =
        std::find_if(results.begin(), results.end(),
                     [&](const Result& t) { return t.name == twin; });
    if (base == results.end() || r.gpu_ms <= 0) {
      std::printf(
          "  %s: %s did not run, so no speedup (--only %s,%s measures both)\n",
          r.name.c_str(), twin.c_str(), twin.c_str(), r.name.c_str());
      continue;
    }
    r.has_speedup = true;
    r.speedup = base->gpu_ms / r.gpu_ms;
    if (sh != shapes.end() && sh->target_kind == 3) {
      r.met = r.speedup >= sh->target_value;
    }
  }
}

// Splits a comma-separated list.
std::vector<std::string> SplitNames(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    if (end > begin) out.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, kernels = "tma";
  std::vector<std::string> only;  // empty: every shape
  int box = 64;
  int scan_group = 0;
  int64_t chunk_entries = 0;  // 0: the backend's defaults
  int64_t docs_per_unit = 0;
  bool plaid_int8_mma = true;
  bool plaid_warp_scan = true;
  int runs = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--runs" && i + 1 < argc)
      runs = std::max(20, std::atoi(argv[++i]));
    else if (a == "--only" && i + 1 < argc)
      only = SplitNames(argv[++i]);
    else if (a == "--kernels" && i + 1 < argc)
      kernels = argv[++i];
    else if (a == "--tma-box" && i + 1 < argc)
      box = std::atoi(argv[++i]);
    else if (a == "--tma-scan-group" && i + 1 < argc)
      scan_group = std::atoi(argv[++i]);
    else if (a == "--scan-chunk-entries" && i + 1 < argc)
      chunk_entries = std::atoll(argv[++i]);
    else if (a == "--scan-docs-per-unit" && i + 1 < argc)
      docs_per_unit = std::atoll(argv[++i]);
    else if (a == "--plaid-int8-mma" && i + 1 < argc)
      plaid_int8_mma = std::atoi(argv[++i]) != 0;
    else if (a == "--plaid-warp-scan" && i + 1 < argc)
      plaid_warp_scan = std::atoi(argv[++i]) != 0;
    else {
      std::fprintf(stderr,
                   "usage: %s [--json PATH] [--runs N] "
                   "[--only NAME[,NAME...]] "
                   "[--kernels tma|mma] [--tma-box 16|64] "
                   "[--tma-scan-group TILES] [--scan-chunk-entries N] "
                   "[--scan-docs-per-unit N] [--plaid-int8-mma 0|1] "
                   "[--plaid-warp-scan 0|1]\n",
                   argv[0]);
      return 1;
    }
  }
  if (maxsimd::GpuBackend::DeviceCount() == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double hbm = MeasureHbmReadTBps(s, runs);
  const double gemm = MeasureBf16GemmTflops(s, runs);
  const double h2d = MeasurePinnedH2DGBps(s, runs);
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf(
      "ceilings: HBM read %.3f TB/s (6 GiB, 16-byte loads, max), "
      "bf16 GEMM %.1f TFLOP/s (cuBLAS 8192^3), pinned H2D %.1f GB/s "
      "(1 GiB copies)\n",
      hbm, gemm, h2d);

  maxsimd::GpuBackendOptions opt;
  opt.num_workers = 1;
  opt.use_tma = kernels != "mma";
  opt.tma_scan_box_rows = box;
  opt.tma_scan_tile_group = scan_group;
  if (chunk_entries > 0) opt.scan_chunk_entries = chunk_entries;
  opt.tma_scan_docs_per_unit = docs_per_unit;
  opt.plaid_int8_mma = plaid_int8_mma;
  opt.plaid_warp_scan = plaid_warp_scan;
  opt.limits.max_batch_candidates = 1 << 20;
  auto backend_or = maxsimd::GpuBackend::Create(opt);
  if (!backend_or.ok()) {
    std::fprintf(stderr, "%s\n", backend_or.status().ToString().c_str());
    return 1;
  }
  auto backend = std::move(backend_or).value();

  auto wanted = [&](const std::string& name) {
    return only.empty() ||
           std::find(only.begin(), only.end(), name) != only.end();
  };
  auto any_wanted = [&](const char* part) {
    return only.empty() ||
           std::any_of(only.begin(), only.end(), [&](const std::string& n) {
             return n.find(part) != std::string::npos;
           });
  };
  auto colbert = MakeCorpus(s, 100000, 300, 300, 11);
  auto ragged = MakeCorpus(s, 100000, 32, 512, 12);
  auto longdoc = MakeCorpus(s, 10000, 1024, 1024, 13);
  auto colpali = MakeCorpus(s, 10000, 1030, 1030, 14);
  // Host placement: the colbert corpus in pinned host memory, streamed.
  auto colbert_host = any_wanted("_host") ? HostCopy(*colbert) : nullptr;
  // Int8 twins of the colbert and long-document corpora: the same seeds,
  // so the same document lengths (4 GB and 1.4 GB beside the fp16 ones).
  // Only a backend with an int8 kernel at d = 128 scores them.
  const bool int8_ok = backend->SupportsDType(maxsimd::DType::kInt8, kDim);
  if (!int8_ok && any_wanted("_int8")) {
    std::printf(
        "int8 shapes skipped: the GPU backend (--kernels %s) has no "
        "int8 kernel at d = %d\n",
        kernels.c_str(), kDim);
  }
  const bool want_int8 = int8_ok && any_wanted("_int8");
  auto colbert_int8 =
      want_int8 ? MakeCorpus(s, 100000, 300, 300, 11, maxsimd::DType::kInt8)
                : nullptr;
  auto longdoc_int8 =
      want_int8 ? MakeCorpus(s, 10000, 1024, 1024, 13, maxsimd::DType::kInt8)
                : nullptr;

  // PLAID corpora (d = 128): the colbert corpus's documents at 2 and 4
  // bits, and 25k documents of 300 tokens at 2 bits for the rerank.
  auto plaid_corpus = [&](const char* part, int64_t docs, uint64_t seed,
                          int nbits) -> std::unique_ptr<Corpus> {
    const maxsimd::DType dt = maxsimd::PlaidDType(nbits);
    if (!any_wanted(part)) return nullptr;
    if (!backend->SupportsDType(dt, kDim)) {
      std::printf(
          "%s shapes skipped: the GPU backend (--kernels %s) has no "
          "%s kernel at d = %d\n",
          part, kernels.c_str(), maxsimd::DTypeName(dt), kDim);
      return nullptr;
    }
    return MakeCorpus(s, docs, 300, 300, seed, dt);
  };
  // Other widths (answerai-colbert-small's 96; 320, a multimodal
  // retriever's): fp16 and int8 twins of 300-token documents, fewer at
  // 320 (about the bytes of the 96-wide corpus).
  auto width_corpus = [&](const char* part, int64_t docs, int32_t dim,
                          maxsimd::DType dt) -> std::unique_ptr<Corpus> {
    if (!any_wanted(part) || !backend->SupportsDType(dt, dim)) return nullptr;
    return MakeCorpus(s, docs, 300, 300, 16, dt, dim);
  };
  auto d96 = width_corpus("_d96", 100000, 96, maxsimd::DType::kFloat16);
  auto d96_int8 = width_corpus("_d96_int8", 100000, 96, maxsimd::DType::kInt8);
  auto d320 = width_corpus("_d320", 30000, 320, maxsimd::DType::kFloat16);
  auto d320_int8 =
      width_corpus("_d320_int8", 30000, 320, maxsimd::DType::kInt8);
  auto colbert_plaid2 = plaid_corpus("_plaid2", 100000, 11, 2);
  auto colbert_plaid4 = plaid_corpus("_plaid4", 100000, 11, 4);
  auto rerank_plaid = plaid_corpus("plaid_rerank", 25000, 15, 2);

  const std::vector<Shape> shapes = {
      {"colbert_rerank_1k", 1, 32, colbert.get(), 1000, 2, 0.040},
      {"colbert_scan_100k", 1, 32, colbert.get(), 0, 1, 95},
      {"colbert_scan_100k_int8", 1, 32, colbert_int8.get(), 0, 3, 1.7},
      {"colbert_scan_100k_int8q", 1, 32, colbert_int8.get(), 0, 3, 1.7, true},
      {"colbert_scan_100k_plaid2", 1, 32, colbert_plaid2.get(), 0, 0, 0},
      {"colbert_scan_100k_plaid4", 1, 32, colbert_plaid4.get(), 0, 0, 0},
      {"plaid_rerank_25k", 1, 32, rerank_plaid.get(), 4096, 4,
       kPlaidRerankBaselineMs / 10},
      {"plaid_rerank_25k_batch16", 16, 32, rerank_plaid.get(), 4096, 4,
       kPlaidRerankBaselineMs / 10},
      // Smaller batches, as the service runs them below its scan capacity
      // (no target: the cost per query against batch64's).
      {"colbert_batch16_scan_100k", 16, 32, colbert.get(), 0, 0, 0},
      {"colbert_batch32_scan_100k", 32, 32, colbert.get(), 0, 0, 0},
      {"colbert_batch64_scan_100k", 64, 32, colbert.get(), 0, 1, 60},
      {"colbert_batch64_scan_100k_int8q", 64, 32, colbert_int8.get(), 0, 0, 0,
       true},
      {"longdoc_rerank_10k", 1, 32, longdoc.get(), 10000, 1, 95},
      {"longdoc_rerank_10k_int8", 1, 32, longdoc_int8.get(), 10000, 3, 1.7},
      {"longdoc_rerank_10k_int8q", 1, 32, longdoc_int8.get(), 10000, 3, 1.7,
       true},
      {"medium_rerank_1k", 1, 128, longdoc.get(), 1000, 2, 0.080},
      {"colpali_text_rerank_10k", 1, 32, colpali.get(), 10000, 1, 95},
      {"colpali_page_rerank_1k", 1, 1024, longdoc.get(), 1000, 1, 60},
      {"ragged_scan_100k", 1, 32, ragged.get(), 0, 1, 90},
      {"colbert_scan_100k_host", 1, 32, colbert_host.get(), 0, 1, 85},
      {"colbert_rerank_1k_host", 1, 32, colbert_host.get(), 1000, 0, 0},
      // Widths without the TMA kernel's int8 path (mma.sync, codes widened
      // in registers): int8 against the fp16 scan of the same width.
      {"colbert_scan_100k_d96", 1, 32, d96.get(), 0, 0, 0},
      {"colbert_scan_100k_d96_int8", 1, 32, d96_int8.get(), 0, 3, 1.3},
      {"colbert_scan_100k_d96_int8q", 1, 32, d96_int8.get(), 0, 3, 1.7, true},
      {"colbert_scan_30k_d320", 1, 32, d320.get(), 0, 0, 0},
      {"colbert_scan_30k_d320_int8", 1, 32, d320_int8.get(), 0, 3, 1.3},
      {"colbert_scan_30k_d320_int8q", 1, 32, d320_int8.get(), 0, 3, 1.7, true},
  };
  std::vector<Result> results;
  for (const Shape& sh : shapes) {
    if (!wanted(sh.name)) continue;
    if (sh.corpus == nullptr) continue;
    results.push_back(RunShape(*backend, sh, hbm, gemm, h2d, runs));
    const Result& r = results.back();
    std::printf(
        "  %-27s gpu %9.4f ms (maxsim %9.4f + top-k %7.4f)  wall %9.4f ms"
        "  floor %8.4f ms  %6.1f%%\n",
        r.name.c_str(), r.gpu_ms, r.kernel_ms, r.topk_ms, r.wall_ms, r.floor_ms,
        r.pct);
    if (r.plaid) {
      std::printf("  %-27s %.1f%% of HBM read on compressed bytes", "",
                  r.hbm_pct);
      if (r.ms_per_query > 0) {
        std::printf(", %.4f ms/query, %.1fx %.2f ms", r.ms_per_query,
                    r.vs_baseline, kPlaidRerankBaselineMs);
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  SetSpeedups(shapes, results);

  std::printf("\n%-27s %10s %10s %10s %10s %8s %-18s %-3s %s\n", "shape",
              "gpu_ms", "wall_ms", "GB", "GFLOP", "floor_ms", "%floor / target",
              "met", "vs_fp16");
  for (const Result& r : results) {
    char speedup[96] = "-";
    if (r.has_speedup) {
      std::snprintf(speedup, sizeof(speedup), "%.2fx", r.speedup);
    }
    if (r.plaid) {
      // PLAID: the twin's speedup, % of HBM read, and for reranks the ms
      // per query against the published PLAID time.
      char more[64];
      std::snprintf(more, sizeof(more), " hbm %.1f%%", r.hbm_pct);
      std::strncat(speedup, more, sizeof(speedup) - std::strlen(speedup) - 1);
      if (r.ms_per_query > 0) {
        std::snprintf(more, sizeof(more), " %.4f ms/q %.1fx PLAID",
                      r.ms_per_query, r.vs_baseline);
        std::strncat(speedup, more, sizeof(speedup) - std::strlen(speedup) - 1);
      }
    }
    std::printf(
        "%-27s %10.4f %10.4f %10.3f %10.1f %8.4f %6.1f%% %-11s %-3s %s\n",
        r.name.c_str(), r.gpu_ms, r.wall_ms, r.bytes / 1e9, r.flops / 1e9,
        r.floor_ms, r.pct, r.target.c_str(),
        r.has_target ? (r.met ? "yes" : "no") : "-", speedup);
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::perror(json_path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\n  \"device\": \"%s\",\n  \"hbm_read_tbps\": %.4f,\n"
                 "  \"bf16_gemm_tflops\": %.2f,\n"
                 "  \"pinned_h2d_gbps\": %.2f,\n  \"runs\": %d,\n"
                 "  \"shapes\": [\n",
                 prop.name, hbm, gemm, h2d, runs);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      // speedup_vs_fp16: int8 shapes whose twin ran; null otherwise.
      char speedup[32] = "null";
      if (r.has_speedup) {
        std::snprintf(speedup, sizeof(speedup), "%.4f", r.speedup);
      }
      // PLAID shapes: hbm_pct (compressed bytes), and for reranks
      // ms_per_query and speedup_vs_plaid (kPlaidRerankBaselineMs).
      char plaid[160] = "";
      if (r.plaid) {
        std::snprintf(plaid, sizeof(plaid),
                      ", \"hbm_pct\": %.2f, \"ms_per_query\": %.5f, "
                      "\"speedup_vs_plaid\": %.3f",
                      r.hbm_pct, r.ms_per_query, r.vs_baseline);
      }
      std::fprintf(
          f,
          "    {\"name\": \"%s\", \"gpu_ms\": %.5f, \"wall_ms\": %.5f, "
          "\"maxsim_ms\": %.5f, \"topk_ms\": %.5f, "
          "\"bytes\": %.0f, \"flops\": %.0f, \"floor_ms\": %.5f, "
          "\"pct_of_floor\": %.2f, \"target\": \"%s\", \"met\": %s, "
          "\"speedup_vs_fp16\": %s%s}%s\n",
          r.name.c_str(), r.gpu_ms, r.wall_ms, r.kernel_ms, r.topk_ms, r.bytes,
          r.flops, r.floor_ms, r.pct, r.target.c_str(),
          r.has_target ? (r.met ? "true" : "false") : "null", speedup, plaid,
          i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  backend.reset();
  BENCH_CHECK(cudaStreamDestroy(s));
  return 0;
}
