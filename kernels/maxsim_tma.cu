// TMA MaxSim launcher: one entry per layout, the dispatch from run-time
// (dtype, padded width, warpgroups) to the kernel instantiations of its
// decode policy (detail/tma_decode.cuh) in maxsim_tma_{fp16,bf16,int8,
// int8mma}.cu, maxsim_tma_plaid{1,2,4}.cu and maxsim_tma_plaidmma.cu, plus
// the host helper that encodes tensor maps.
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda_check.cuh"
#include "kernels/detail/dtype_dispatch.cuh"
#include "kernels/detail/mma.cuh"
#include "kernels/detail/tma.cuh"
#include "kernels/detail/tma_decode.cuh"
#include "kernels/maxsim_tma.h"
#include "kernels/plaid_scan.h"

namespace maxsimd {
namespace detail {
// Defined in detail/maxsim_tma_kernel.cuh, instantiated per decode policy.
template <typename D, int kDP, int kWG>
absl::Status LaunchTmaTyped(const TmaArgs<typename D::Layout>& p,
                            cudaStream_t stream);
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

template <typename D, int kDP>
absl::Status DispatchWarpgroups(const TmaArgs<typename D::Layout>& p,
                                cudaStream_t s) {
  if (p.warpgroups == 1) return detail::LaunchTmaTyped<D, kDP, 1>(p, s);
  if (p.warpgroups == 2) return detail::LaunchTmaTyped<D, kDP, 2>(p, s);
  return absl::InvalidArgumentError(absl::StrCat(
      "LaunchMaxSimTma: warpgroups is ", p.warpgroups, ", must be 1 or 2"));
}

absl::Status NoKernel(const TmaLaunch& p) {
  return absl::InvalidArgumentError(absl::StrCat(
      "LaunchMaxSimTma: a ", DTypeName(p.dtype), " launch of dim ", p.dim,
      " (dpad ", p.dpad, ", ", p.warpgroups, " warpgroups) has no TMA kernel"));
}

// The padded widths of decode policy D; `served`: whether D's layout takes
// p.dim on this path (the TmaSupports* of launch_shapes.h).
template <typename D>
absl::Status DispatchDim(const TmaArgs<typename D::Layout>& p, bool served,
                         cudaStream_t s) {
  if (!served || p.dpad != TmaPaddedDim(p.dim)) return NoKernel(p);
  switch (p.dpad) {
    case 64:
      // No 1-bit PLAID instance at 64 (TmaSupportsPlaidDim refuses it).
      if constexpr (D::kPlaidBits != 1) return DispatchWarpgroups<D, 64>(p, s);
      break;
    case 128:
      return DispatchWarpgroups<D, 128>(p, s);
    case 256:
      return DispatchWarpgroups<D, 256>(p, s);
    default:
      break;
  }
  return NoKernel(p);
}

// A scan's tiles must fit one block's running maxima (TmaLaunch).
absl::Status CheckTiles(const TmaLaunch& p) {
  if (p.records == nullptr && p.num_tiles > TmaMaxTiles(p.warpgroups)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LaunchMaxSimTma: ", p.num_tiles, " tiles, the limit is ",
                     TmaMaxTiles(p.warpgroups)));
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT naming `field` where it is missing.
absl::Status Require(bool present, const TmaLaunch& p, const char* field) {
  if (present) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "LaunchMaxSimTma: a ", DTypeName(p.dtype), " launch needs ", field));
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

absl::Status LaunchMaxSimTma(const TmaDenseArgs& p, cudaStream_t stream) {
  MAXSIMD_RETURN_IF_ERROR(CheckTiles(p));
  return detail::DispatchDtype(p.dtype, "LaunchMaxSimTma", [&](auto tag) {
    using D = detail::DenseDecode<decltype(tag)>;
    return DispatchDim<D>(p, TmaSupportsDim(p.dim), stream);
  });
}

absl::Status LaunchMaxSimTma(const TmaInt8Args& p, cudaStream_t stream) {
  MAXSIMD_RETURN_IF_ERROR(CheckTiles(p));
  MAXSIMD_RETURN_IF_ERROR(Require(p.dtype == DType::kInt8, p, "dtype int8"));
  MAXSIMD_RETURN_IF_ERROR(Require(p.scales != nullptr, p, "scales"));
  if (p.q_scales != nullptr && TmaInt8UsesMma(p.dim, true)) {
    // Quantised queries: the block of the float16 width dim / 2.
    if (p.dpad != TmaPaddedDim(p.dim)) return NoKernel(p);
    switch (p.dim) {
      case 128:
        return DispatchWarpgroups<detail::Int8MmaDecode, 64>(p, stream);
      case 256:
        return DispatchWarpgroups<detail::Int8MmaDecode, 128>(p, stream);
      default:
        return NoKernel(p);
    }
  }
  return DispatchDim<detail::Int8Decode>(p, TmaSupportsInt8Dim(p.dim), stream);
}

absl::Status LaunchMaxSimTma(const TmaPlaidArgs& p, cudaStream_t stream) {
  MAXSIMD_RETURN_IF_ERROR(CheckTiles(p));
  const int nbits = PlaidNbits(p.dtype);
  MAXSIMD_RETURN_IF_ERROR(Require(nbits > 0, p, "a PLAID dtype"));
  MAXSIMD_RETURN_IF_ERROR(Require(
      p.scales != nullptr && p.codes != nullptr && p.centroids_f16 != nullptr &&
          p.bucket_weights != nullptr && p.num_centroids > 0,
      p, "scales, codes, centroids_f16, bucket_weights and num_centroids"));
  const bool served = TmaSupportsPlaidDim(p.dim, nbits);
  switch (nbits) {
    case 1:
      return DispatchDim<detail::PlaidDecode<1>>(p, served, stream);
    case 2:
      return DispatchDim<detail::PlaidDecode<2>>(p, served, stream);
    case 4:
      return DispatchDim<detail::PlaidDecode<4>>(p, served, stream);
    default:
      return NoKernel(p);
  }
}

absl::Status LaunchMaxSimTma(const TmaPlaidMmaArgs& p, cudaStream_t stream) {
  MAXSIMD_RETURN_IF_ERROR(CheckTiles(p));
  const int nbits = PlaidNbits(p.dtype);
  MAXSIMD_RETURN_IF_ERROR(Require(nbits > 0, p, "a PLAID dtype"));
  MAXSIMD_RETURN_IF_ERROR(Require(
      p.scales != nullptr && p.codes != nullptr && p.num_centroids > 0 &&
          p.plaid_qc != nullptr && p.q_scales != nullptr,
      p, "scales, codes, num_centroids, plaid_qc and q_scales"));
  if (PlaidScanApplies(p)) return LaunchPlaidScan(p, stream);
  // d = 128, one warpgroup (TmaPlaidUsesMma).
  if (!TmaPlaidUsesMma(p.dim, nbits, p.warpgroups) ||
      p.dpad != TmaPaddedDim(p.dim)) {
    return NoKernel(p);
  }
  switch (nbits) {
    case 1:
      return detail::LaunchTmaTyped<detail::PlaidMmaDecode<1>, 64, 1>(p,
                                                                      stream);
    case 2:
      return detail::LaunchTmaTyped<detail::PlaidMmaDecode<2>, 64, 1>(p,
                                                                      stream);
    default:
      return detail::LaunchTmaTyped<detail::PlaidMmaDecode<4>, 64, 1>(p,
                                                                      stream);
  }
}

}  // namespace maxsimd
