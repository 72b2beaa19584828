// Device primitives shared by the MaxSim kernels: the m16n8k16 tensor-core
// MMA for fp16 / bf16 with fp32 accumulation, the m16n8k32 int8 MMA, int8
// codes widened exactly to float16, streaming loads, and the 64-bit
// ranking key.
//
// Fragment layout (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
//   A (16x16, row): a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)
//                   a3 = (g+8, 2t+8..)
//   B (16x8, col):  b0 = (2t..2t+1, g)  b1 = (2t+8.., g)
//   C (16x8):       c0,c1 = (g, 2t..2t+1)  c2,c3 = (g+8, 2t..2t+1)
// A dot product does not care in which order it visits the k dimension, so
// the kernels permute k inside every 32-wide slab of the embedding: lane t
// of a quad reads the 8 contiguous elements [32j + 8t, 32j + 8t + 8) of its
// row (one 16-byte load) and uses elements 0-3 for k-step 2j and 4-7 for
// k-step 2j+1. A and B use the same permutation, so every 16-byte load,
// from global or shared memory, is already a fragment.
#ifndef MAXSIMD_KERNELS_DETAIL_MMA_CUH_
#define MAXSIMD_KERNELS_DETAIL_MMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace maxsimd::detail {

// Tag types naming the 16-bit storage type of a corpus.
struct Fp16 {
  using Storage = __half;
};
struct Bf16 {
  using Storage = __nv_bfloat16;
};
// The int8 MMA's operands (s8 x s8 -> s32, exact): int8 codes on both
// sides (the TMA kernel's Int8MmaDecode and PlaidMmaDecode,
// detail/tma_decode.cuh).
struct Int8Mma {
  using Storage = int8_t;
};

// An int8 corpus on the mma.sync kernels (detail/maxsim_warp.cuh): each
// document row is int8 codes with an fp32 scale; the codes are widened
// exactly to float16 in registers (WidenI8x4) for the float16 MMA, and
// each cell is multiplied by its token's scale.
struct Int8Widened {
  using Storage = int8_t;
};

// The MMA operand type of a corpus tag: the tag itself for float16 and
// bfloat16, float16 for the widened int8 codes.
template <typename Tag>
struct MmaOperand {
  using type = Tag;
};
template <>
struct MmaOperand<Int8Widened> {
  using type = Fp16;
};

// Four int8 values -> two float16x2 words, exactly. A byte b is placed as
// the mantissa of 1024 (0x6400) after b ^ 0x80 = b + 128, then 1152 is
// subtracted.
__device__ __forceinline__ void WidenI8x4(uint32_t x, uint32_t& lo,
                                          uint32_t& hi) {
  x ^= 0x80808080u;
  const uint32_t a = __byte_perm(x, 0x64646464u, 0x5140);
  const uint32_t b = __byte_perm(x, 0x64646464u, 0x5342);
  const __half2 bias =
      __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480));
  const __half2 ha = __hsub2(*reinterpret_cast<const __half2*>(&a), bias);
  const __half2 hb = __hsub2(*reinterpret_cast<const __half2*>(&b), bias);
  lo = *reinterpret_cast<const uint32_t*>(&ha);
  hi = *reinterpret_cast<const uint32_t*>(&hb);
}

// c += a * b for one 16x8x16 tile.
template <typename Tag>
__device__ __forceinline__ void Mma16816(float (&c)[4], uint32_t a0,
                                         uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void Mma16816<Fp16>(float (&c)[4], uint32_t a0,
                                               uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void Mma16816<Bf16>(float (&c)[4], uint32_t a0,
                                               uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += a * b for one 16x8x32 tile of int8 (row.col, int32 accumulators).
__device__ __forceinline__ void MmaS8(int32_t (&d)[4], uint32_t a0, uint32_t a1,
                                      uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16-byte global load that bypasses L1 allocation: corpus tokens are read
// once per pass, so keeping them out of L1 leaves it to the query tiles.
__device__ __forceinline__ uint4 LoadStreaming16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 8-byte global load that bypasses L1 allocation (LoadStreaming16's).
__device__ __forceinline__ uint2 LoadStreaming8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p));
  return v;
}

// Maps a score to 32 bits whose unsigned order is the ranking order: higher
// scores map higher, -0 and +0 map alike, NaN maps to 1 (below every
// number). 0 is never produced; it marks "no entry".
__device__ __forceinline__ uint32_t OrderedScore(float s) {
  if (s != s) return 1u;
  if (s == 0.f) s = 0.f;
  const uint32_t u = __float_as_uint(s);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The 64-bit ranking key: ordered score above, ~position below, so that the
// larger key ranks first and equal scores go to the lower position. 0 means
// "no entry" (a deleted document, padding).
__device__ __forceinline__ uint64_t MakeKey(float score, uint32_t position) {
  return (static_cast<uint64_t>(OrderedScore(score)) << 32) |
         static_cast<uint64_t>(~position);
}

}  // namespace maxsimd::detail

#endif  // MAXSIMD_KERNELS_DETAIL_MMA_CUH_
