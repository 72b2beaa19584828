// GpuBackend for builds without CUDA: no devices, and Create() says why.
#include "kernels/gpu_backend.h"

namespace maxsimd {

int GpuBackend::DeviceCount() { return 0; }

bool GpuBackend::TmaKernelsAvailable(int) { return false; }

absl::StatusOr<std::unique_ptr<Backend>> GpuBackend::Create(
    const GpuBackendOptions&) {
  return absl::UnimplementedError(
      "GpuBackend::Create: this build of maxsimd has no CUDA support "
      "(configure with -DMAXSIMD_WITH_CUDA=ON)");
}

}  // namespace maxsimd
