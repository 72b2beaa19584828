// Launcher of the PlaidMma query-centroid table (plaid_qc.cu): each staged
// query row against every centroid of a PLAID codec, which the int8 MMA
// path of the TMA kernel and the PLAID scan read.
//
// Internal to kernels/: this header names cudaStream_t.
// Thread-safety: stateless.
#ifndef MAXSIMD_KERNELS_PLAID_QC_H_
#define MAXSIMD_KERNELS_PLAID_QC_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace maxsimd {

// The PlaidMma query-centroid table (TmaPlaidMmaLayout::plaid_qc): for tile
// t, centroid k and row pair 8w + g, the float16 pair (row 16w + g, row
// 16w + g + 8) of q_row . centroids[k] + offset * (the sum of q_row),
// summed in fp32 (the row's sum in order, then added by one fma) and
// rounded once. offset: the levels' (PlaidMmaLevels), 0 below 4 bits.
// rows: float16 query rows [tiles * 32, dim], row-major, device memory;
// centroids: [num_centroids, dim] fp32, device memory; table:
// PlaidQcTableBytes(tiles, num_centroids) bytes. When `units` is not
// null, it gets the same table in units of each row's factor
// (PlaidUnitsTableBytes): for tile t, centroid k and row r, the value
// x = round(float16 dot / factor), the factor q_factors[32 t + r] (0 where
// the factor is not positive), clamped to +-2^30. Where units_int16 is
// false, the int32 at [t][k][r] (int32 elements); where it is true, the
// int16 round(x / 2^s), s = PlaidUnitsShift(units_max[t]) with units_max[t]
// the tile's largest |x| (written here), at int16 element
// 64 t num_centroids + 32 k + 8 (r % 8 / 2) + 2 (r / 8) + r % 2 (a lane's
// eight columns of the mma.sync accumulator together), in two passes.
// REQUIRES: dim a multiple of 4, at most 256.
absl::Status LaunchPlaidQueryCentroids(
    const uint16_t* rows, int64_t tiles, int32_t dim, const float* centroids,
    int64_t num_centroids, float offset, uint32_t* table, cudaStream_t stream,
    const float* q_factors = nullptr, int32_t* units = nullptr,
    bool units_int16 = false, float* units_max = nullptr);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_PLAID_QC_H_
