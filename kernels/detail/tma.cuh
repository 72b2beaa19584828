// Hopper (sm_90a) device primitives of the TMA MaxSim kernel: mbarriers,
// the bulk copy engine (tensor and plain), named barriers, and the wgmma
// shared-memory descriptors and fences. Thin wrappers over inline PTX; each
// names the PTX instruction it issues.
#ifndef MAXSIMD_KERNELS_DETAIL_TMA_CUH_
#define MAXSIMD_KERNELS_DETAIL_TMA_CUH_

#include <cstdint>

// 1 where a kernel that uses these primitives compiles its body: the host
// pass, and device passes for sm_90a (machine code or compute_90a PTX). A
// build for other GPUs as well (cmake/MaxsimdCudaArchs.cmake: 80, 86, 89,
// PTX for newer ones) compiles such a kernel there as a trap, since those
// GPUs lack the instructions; the backend never launches it on them
// (maxsim_tma.h, TmaKernelsLoaded).
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MAXSIMD_TMA_DEVICE_CODE 1
#else
#define MAXSIMD_TMA_DEVICE_CODE 0
#endif

namespace maxsimd::detail {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// mbarrier.init: `count` arrivals complete a phase.
__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(bar)),
               "r"(count)
               : "memory");
}

// Makes the initialised barriers visible to the async proxy (the copy
// engine) before any copy signals them. Followed by __syncthreads().
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also expects `bytes` of copy-engine traffic.
__device__ __forceinline__ void MbarArriveExpectTx(uint64_t* bar,
                                                   uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   SmemAddr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SmemAddr(bar))
               : "memory");
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = SmemAddr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (done == 0);
}

// cp.async.bulk.tensor.2d: the box at (c0, c1) of the tensor map `map`
// (an address in global, constant or parameter memory) into shared memory
// at `dst`, completing `bytes` on `bar`.
__device__ __forceinline__ void TmaLoad2D(void* dst, const void* map,
                                          uint64_t* bar, int32_t c0,
                                          int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(SmemAddr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(SmemAddr(bar))
      : "memory");
}

// cp.async of 4 bytes from global to shared memory (both 4-byte aligned).
__device__ __forceinline__ void CpAsync4(void* dst, const void* src) {
  asm volatile(
      "cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(SmemAddr(dst)),
      "l"(src)
      : "memory");
}

// cp.async of 4 bytes to shared memory at byte address `dst` from `src`
// (both 4-byte aligned), of which the first `src_bytes` (0 or 4) are read
// and the rest zero-filled: with 0, `src` is not read and may lie past an
// array's end.
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src,
                                         uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst),
               "l"(src), "r"(src_bytes)
               : "memory");
}

// cp.async of 16 bytes from global to shared memory (both 16-byte
// aligned), cached in L2 only.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(SmemAddr(dst)),
      "l"(src)
      : "memory");
}

// Closes this thread's group of cp.async copies issued since the last one.
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still
// in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWaitGroup() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Waits for every cp.async copy this thread issued.
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Has the phase of `bar` wait for this thread's cp.async copies issued so
// far: the pending count goes up by one now and down once they landed. Call
// before the arrival that could complete the phase.
__device__ __forceinline__ void CpAsyncMbarArrive(uint64_t* bar) {
  asm volatile(
      "cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(SmemAddr(bar))
      : "memory");
}

// Orders this thread's earlier generic-proxy writes to shared memory
// before later async-proxy reads of it (wgmma operands written by threads
// rather than by the copy engine); a barrier among the writers and the
// readers follows.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// cp.async.bulk: `bytes` (a multiple of 16) contiguous bytes from global to
// shared memory, completing on `bar`.
__device__ __forceinline__ void BulkLoad(void* dst, const void* src,
                                         uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1], %2, [%3];\n" ::"r"(SmemAddr(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
}

__device__ __forceinline__ void PrefetchTensorMap(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// bar.sync on named barrier `id` (1..15; 0 is __syncthreads) for `threads`
// threads, a multiple of 32.
__device__ __forceinline__ void NamedBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Shared-memory matrix descriptor of a K-major operand in the 128-byte
// swizzle layout: rows of 64 16-bit elements (128 bytes), 8-row atoms of
// 1024 bytes stacked densely (stride byte offset 1024). The low word holds
// the start address / 16 (14 bits: shared addresses lie below 256 KB) and
// the leading byte offset field (1); the high word, the stride and the
// swizzle mode, is the same for every operand. `p` may point into an atom
// (k offset within the 128-byte row); the atom itself must be 1024-byte
// aligned. An operand `bytes` further (a multiple of 16, still inside
// shared memory) is SmemDescLo(p) + bytes / 16: the add never carries out
// of the address field.
__device__ __forceinline__ uint32_t SmemDescLo(const void* p) {
  return (SmemAddr(p) >> 4) | (1u << 16);
}
__device__ __forceinline__ uint64_t SmemDescOf(uint32_t lo) {
  return (uint64_t{(1024 >> 4) | (1u << 30)} << 32) | lo;
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending committed MMA groups are still in flight.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending)
               : "memory");
}
// Tells the compiler that `r` may change here (the asynchronous MMAs write
// their accumulators behind its back).
__device__ __forceinline__ void FenceRegister(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}
__device__ __forceinline__ void FenceRegister(int32_t& r) {
  asm volatile("" : "+r"(r)::"memory");
}

}  // namespace maxsimd::detail

#endif  // MAXSIMD_KERNELS_DETAIL_TMA_CUH_
