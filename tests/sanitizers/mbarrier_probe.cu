// What compute-sanitizer's racecheck follows through an mbarrier: one warp
// writes shared memory, the other reads it after waiting on the barrier.
// Every mode is correct under the PTX memory model; racecheck reports a
// hazard for modes 0 and 2, where lanes that wrote never arrive themselves
// (lane 0 arrives for the warp). The MaxSim kernel's barriers therefore
// count every lane (kernels/detail/maxsim_tma_kernel.cuh). Not part of the
// build; on a machine with an NVIDIA GPU:
//
//   nvcc -O2 -lineinfo -arch=sm_90a mbarrier_probe.cu -o probe
//   compute-sanitizer --tool racecheck ./probe 0   (then 1 and 2)
//
// (bench/run_gpu.sh sanitize does this.)
//
// Modes: 0: the writers __syncwarp, then lane 0 arrives (count 1);
// 1: every writer lane arrives (count 32); 2: as 0, and the readers arrive
// too before they wait (count 33).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

__device__ uint32_t Smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ void Arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(Smem(bar))
               : "memory");
}

__device__ void WaitParity0(uint64_t* bar) {
  asm volatile(
      "{.reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], "
      "0; @!p bra W;}" ::"r"(Smem(bar))
      : "memory");
}

__global__ void Probe(int mode, int* out) {
  __shared__ int data[32];
  __shared__ uint64_t bar;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    const int count = mode == 0 ? 1 : (mode == 1 ? 32 : 33);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(Smem(&bar)),
                 "r"(count));
  }
  __syncthreads();
  if (warp == 1) {
    data[lane] = 3 * lane;
    if (mode == 1) {
      Arrive(&bar);
    } else {
      __syncwarp();
      if (lane == 0) Arrive(&bar);
    }
    return;
  }
  if (mode == 2) Arrive(&bar);
  WaitParity0(&bar);
  out[lane] = data[31 - lane];
}

}  // namespace

int main(int argc, char** argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : 0;
  int* out = nullptr;
  cudaMalloc(&out, 32 * sizeof(int));
  Probe<<<1, 64>>>(mode, out);
  int host[32];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  const bool ok = host[0] == 93 && cudaGetLastError() == cudaSuccess;
  std::printf("mode %d: %s\n", mode, ok ? "correct" : "WRONG");
  cudaFree(out);
  return ok ? 0 : 1;
}
