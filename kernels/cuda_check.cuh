// CUDA error handling at the kernels/ boundary: every CUDA runtime error
// becomes an absl::Status that names the call and the source line.
//
//   MAXSIMD_CUDA_CHECK(call)      returns a Status from the enclosing
//                                 function (which returns absl::Status or
//                                 absl::StatusOr<T>) when `call` fails.
//   MAXSIMD_CUDA_CHECK_LAUNCH()   follows every <<<>>>: picks up launch
//                                 errors, and in debug builds (NDEBUG not
//                                 defined) synchronises the device so that
//                                 asynchronous faults surface at the launch
//                                 that caused them.
//   MAXSIMD_CUDA_CHECK_NOTHROW(call)  for destructors: logs to stderr and
//                                 carries on.
//
// Status codes: cudaErrorMemoryAllocation -> RESOURCE_EXHAUSTED (the caller
// may retry with less); invalid arguments / configurations, which are our
// bugs, -> INTERNAL; everything else (faults, lost device) -> UNAVAILABLE,
// since retrying on another replica is safe.
//
// This header names CUDA runtime types, so only kernels/ sources and the GPU
// tests include it; no public header does.
// Thread-safety: stateless.
#ifndef MAXSIMD_KERNELS_CUDA_CHECK_CUH_
#define MAXSIMD_KERNELS_CUDA_CHECK_CUH_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace maxsimd {

inline absl::Status CudaErrorToStatus(cudaError_t err, const char* call,
                                      const char* file, int line) {
  const std::string msg =
      absl::StrCat(call, " failed at ", file, ":", line, ": ",
                   cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidResourceHandle:
      return absl::InternalError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

}  // namespace maxsimd

#define MAXSIMD_CUDA_CHECK(call)                                              \
  do {                                                                        \
    const cudaError_t maxsimd_cuda_err_ = (call);                             \
    if (maxsimd_cuda_err_ != cudaSuccess) {                                   \
      return ::maxsimd::CudaErrorToStatus(maxsimd_cuda_err_, #call, __FILE__, \
                                          __LINE__);                          \
    }                                                                         \
  } while (0)

#ifdef NDEBUG
#define MAXSIMD_CUDA_CHECK_LAUNCH() MAXSIMD_CUDA_CHECK(cudaGetLastError())
#else
#define MAXSIMD_CUDA_CHECK_LAUNCH()              \
  do {                                           \
    MAXSIMD_CUDA_CHECK(cudaGetLastError());      \
    MAXSIMD_CUDA_CHECK(cudaDeviceSynchronize()); \
  } while (0)
#endif

#define MAXSIMD_CUDA_CHECK_NOTHROW(call)                                       \
  do {                                                                         \
    const cudaError_t maxsimd_cuda_err_ = (call);                              \
    if (maxsimd_cuda_err_ != cudaSuccess) {                                    \
      std::fprintf(stderr, "maxsimd: %s failed at %s:%d: %s\n", #call,         \
                   __FILE__, __LINE__, cudaGetErrorString(maxsimd_cuda_err_)); \
    }                                                                          \
  } while (0)

namespace maxsimd {

// Raises kernel kKernel's dynamic shared-memory limit to `bytes` (a
// constant of that kernel) on the current device, once per device: the
// attribute call would otherwise cost host time on every launch.
template <auto kKernel>
absl::Status SetSmemLimitOnce(int bytes) {
  static std::atomic<uint64_t> devices{0};
  int device = 0;
  MAXSIMD_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (devices.load(std::memory_order_acquire) & bit) != 0) {
    return absl::OkStatus();
  }
  MAXSIMD_CUDA_CHECK(cudaFuncSetAttribute(
      kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  devices.fetch_or(bit, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_CUDA_CHECK_CUH_
