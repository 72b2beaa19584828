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

#endif  // MAXSIMD_KERNELS_CUDA_CHECK_CUH_
