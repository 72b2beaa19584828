// TMA MaxSim launcher: the dispatch from run-time (dtype, padded width,
// warpgroups) to the kernel instantiations in maxsim_tma_{fp16,bf16,int8,
// int8mma}.cu, maxsim_tma_plaid{1,2,4}.cu and maxsim_tma_plaidmma.cu,
// plus the host helpers that stage queries and encode tensor maps.
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/dtype_dispatch.cuh"
#include "kernels/detail/mma.cuh"
#include "kernels/detail/tma.cuh"
#include "kernels/maxsim_tma.h"
#include "kernels/plaid_scan.h"

namespace maxsimd {
namespace detail {
// Defined in detail/maxsim_tma_kernel.cuh, instantiated per dtype.
template <typename Tag, int kDP, int kWG>
absl::Status LaunchTmaTyped(const TmaLaunchParams& p, cudaStream_t stream);
}  // namespace detail

namespace {

// cuTensorMapEncodeTiled through the driver entry point (the runtime is
// linked statically; the driver is whatever the machine has).
absl::Status EncodeTiled(CUtensorMapDataType type, cuuint32_t rank,
                         const void* base, const cuuint64_t* dims,
                         const cuuint64_t* strides, const cuuint32_t* box,
                         CUtensorMapSwizzle swizzle, TensorMapBytes* map) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult result;
    // The versioned query appeared in CUDA 12.5, and CUDA 13 keeps only it;
    // 12.4's unversioned one returns the same 12.0 signature.
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &result);
#else
    const cudaError_t err = cudaGetDriverEntryPoint(
        "cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &result);
#endif
    if (err == cudaSuccess && result == cudaDriverEntryPointSuccess) {
      encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    } else {
      (void)cudaGetLastError();
    }
  });
  if (encode == nullptr) {
    return absl::UnavailableError(
        "EncodeTokenMap: the driver has no cuTensorMapEncodeTiled");
  }
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult res = encode(
      reinterpret_cast<CUtensorMap*>(map), type, rank, const_cast<void*>(base),
      dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
      // No L2 promotion: with 256-byte promotion each half-row request
      // fetched the whole row and the scan reached 89% of the read
      // ceiling instead of 96% (bench/NOTES.md, v3).
      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    return absl::InternalError(absl::StrCat(
        "cuTensorMapEncodeTiled failed with CUresult ", static_cast<int>(res)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EncodeTokenMap(DType dtype, const void* tokens, int64_t num_tokens,
                            int32_t dim, int32_t box_rows,
                            TensorMapBytes* map) {
  std::memset(map, 0, sizeof(*map));
  if (num_tokens == 0) return absl::OkStatus();
  const bool int8 = dtype == DType::kInt8;
  const int nbits = PlaidNbits(dtype);
  if (num_tokens >= (int64_t{1} << 31) ||
      !(nbits > 0 ? TmaSupportsPlaidDim(dim, nbits)
        : int8    ? TmaSupportsInt8Dim(dim)
                  : TmaSupportsDim(dim)) ||
      reinterpret_cast<uintptr_t>(tokens) % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EncodeTokenMap: ", num_tokens, " ", DTypeName(dtype),
        " tokens of dim ", dim, " are outside the TMA path's limits"));
  }
  if (nbits > 0) {
    // Packed residual rows: [num_tokens, row_bytes] bytes, whole rows per
    // box, unswizzled (the decoding threads read them row-major).
    const cuuint64_t row_bytes =
        static_cast<cuuint64_t>(TokenRowBytes(dtype, dim));
    const cuuint64_t pdims[2] = {row_bytes,
                                 static_cast<cuuint64_t>(num_tokens)};
    const cuuint64_t pstrides[1] = {row_bytes};
    const cuuint32_t pbox[2] = {static_cast<cuuint32_t>(row_bytes),
                                static_cast<cuuint32_t>(box_rows)};
    return EncodeTiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, tokens, pdims,
                       pstrides, pbox, CU_TENSOR_MAP_SWIZZLE_NONE, map);
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(dim),
                              static_cast<cuuint64_t>(num_tokens)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(dim) * (int8 ? 1 : 2)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(int8 ? dim : 64),
                             static_cast<cuuint32_t>(box_rows)};
  const CUtensorMapDataType type =
      int8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
           : (dtype == DType::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  // Int8 rows are widened by threads that read them row-major, so they
  // land unswizzled; the MMAs read float16 boxes in the 128-byte swizzle.
  return EncodeTiled(
      type, 2, tokens, dims, strides, box,
      int8 ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B, map);
}

namespace {

template <typename Tag, int kDP>
absl::Status DispatchWarpgroups(const TmaLaunchParams& p, cudaStream_t s) {
  if (p.warpgroups == 1) return detail::LaunchTmaTyped<Tag, kDP, 1>(p, s);
  if (p.warpgroups == 2) return detail::LaunchTmaTyped<Tag, kDP, 2>(p, s);
  return absl::InvalidArgumentError(absl::StrCat(
      "LaunchMaxSimTma: warpgroups is ", p.warpgroups, ", must be 1 or 2"));
}

template <typename Tag>
inline constexpr int kTagPlaidBits = 0;
template <int kNbits>
inline constexpr int kTagPlaidBits<detail::Plaid<kNbits>> = kNbits;

// Int8 with quantised queries: the block of the float16 width dim / 2.
absl::Status DispatchInt8Mma(const TmaLaunchParams& p, cudaStream_t s) {
  if (p.dpad != TmaPaddedDim(p.dim)) {
    return absl::InvalidArgumentError(absl::StrCat("LaunchMaxSimTma: dim ",
                                                   p.dim, " with dpad ", p.dpad,
                                                   " has no TMA kernel"));
  }
  switch (p.dim) {
    case 128:
      return DispatchWarpgroups<detail::Int8Mma, 64>(p, s);
    case 256:
      return DispatchWarpgroups<detail::Int8Mma, 128>(p, s);
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("LaunchMaxSimTma: dim ", p.dim, " has no int8 MMA kernel"));
}

// PLAID on the int8 MMA: d = 128, one warpgroup (TmaPlaidUsesMma).
absl::Status DispatchPlaidMma(const TmaLaunchParams& p, cudaStream_t s) {
  const int nbits = PlaidNbits(p.dtype);
  if (!TmaPlaidUsesMma(p.dim, nbits, p.warpgroups) ||
      p.dpad != TmaPaddedDim(p.dim) || p.q_scales == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("LaunchMaxSimTma: a ", DTypeName(p.dtype),
                     " launch of dim ", p.dim, " with ", p.warpgroups,
                     " warpgroups has no int8 MMA kernel (or lacks q_scales)"));
  }
  switch (nbits) {
    case 1:
      return detail::LaunchTmaTyped<detail::PlaidMma<1>, 64, 1>(p, s);
    case 2:
      return detail::LaunchTmaTyped<detail::PlaidMma<2>, 64, 1>(p, s);
    default:
      return detail::LaunchTmaTyped<detail::PlaidMma<4>, 64, 1>(p, s);
  }
}

template <typename Tag>
absl::Status DispatchDim(const TmaLaunchParams& p, cudaStream_t s) {
  constexpr bool kInt8 = std::is_same_v<Tag, detail::Int8>;
  constexpr int kNbits = kTagPlaidBits<Tag>;
  const bool served = kNbits > 0 ? TmaSupportsPlaidDim(p.dim, kNbits)
                      : kInt8    ? TmaSupportsInt8Dim(p.dim)
                                 : TmaSupportsDim(p.dim);
  if (!served || p.dpad != TmaPaddedDim(p.dim)) {
    return absl::InvalidArgumentError(absl::StrCat("LaunchMaxSimTma: dim ",
                                                   p.dim, " with dpad ", p.dpad,
                                                   " has no TMA kernel"));
  }
  switch (p.dpad) {
    case 64:
      // No 1-bit PLAID instance at 64 (TmaSupportsPlaidDim refuses it).
      if constexpr (kNbits != 1) return DispatchWarpgroups<Tag, 64>(p, s);
      break;
    case 128:
      return DispatchWarpgroups<Tag, 128>(p, s);
    case 256:
      return DispatchWarpgroups<Tag, 256>(p, s);
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("LaunchMaxSimTma: dpad ", p.dpad));
}

// Writes what this device pass compiled the TMA kernels' bodies as.
__global__ void TmaDeviceCodeProbe(int* out) { *out = MAXSIMD_TMA_DEVICE_CODE; }

}  // namespace

absl::StatusOr<bool> TmaKernelsLoaded(cudaStream_t stream) {
  int* dev = nullptr;
  MAXSIMD_CUDA_CHECK(cudaMalloc(&dev, sizeof(int)));
  int host = 0;
  TmaDeviceCodeProbe<<<1, 1, 0, stream>>>(dev);
  cudaError_t tma_probe = cudaGetLastError();
  if (tma_probe == cudaSuccess) {
    tma_probe = cudaMemcpyAsync(&host, dev, sizeof(int), cudaMemcpyDeviceToHost,
                                stream);
  }
  if (tma_probe == cudaSuccess) tma_probe = cudaStreamSynchronize(stream);
  MAXSIMD_CUDA_CHECK_NOTHROW(cudaFree(dev));
  MAXSIMD_CUDA_CHECK(tma_probe);
  return host == 1;
}

absl::Status LaunchMaxSimTma(const TmaLaunchParams& p, cudaStream_t stream) {
  if (p.records == nullptr && p.num_tiles > TmaMaxTiles(p.warpgroups)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LaunchMaxSimTma: ", p.num_tiles, " tiles, the limit is ",
                     TmaMaxTiles(p.warpgroups)));
  }
  if (PlaidNbits(p.dtype) > 0 &&
      (p.codes == nullptr || p.scales == nullptr ||
       p.centroids_f16 == nullptr || p.bucket_weights == nullptr ||
       p.num_centroids <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchMaxSimTma: a ", DTypeName(p.dtype),
        " launch needs codes, scales, centroids_f16, bucket_weights and "
        "num_centroids"));
  }
  if (PlaidScanApplies(p)) return LaunchPlaidScan(p, stream);
  if (PlaidNbits(p.dtype) > 0 && p.plaid_qc != nullptr) {
    return DispatchPlaidMma(p, stream);
  }
  if (p.dtype == DType::kInt8 && p.q_scales != nullptr &&
      TmaInt8UsesMma(p.dim, true)) {
    return DispatchInt8Mma(p, stream);
  }
  switch (p.dtype) {
    case DType::kPlaid1:
      return DispatchDim<detail::Plaid<1>>(p, stream);
    case DType::kPlaid2:
      return DispatchDim<detail::Plaid<2>>(p, stream);
    case DType::kPlaid4:
      return DispatchDim<detail::Plaid<4>>(p, stream);
    default:
      break;
  }
  return detail::DispatchDtype</*kWithInt8=*/true>(
      p.dtype, "LaunchMaxSimTma",
      [&](auto tag) { return DispatchDim<decltype(tag)>(p, stream); });
}

}  // namespace maxsimd
