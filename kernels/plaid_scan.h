// Launcher of the PLAID scan (plaid_scan.cu): the warp kernel that scores
// PlaidMma scans at 2 and 4 bits, residuals decoded in registers, the
// centroid term from the unit table of plaid_qc.h as the MMA's initial
// accumulator. LaunchMaxSimTma dispatches a launch here when
// PlaidScanApplies.
//
// Internal to kernels/: this header names cudaStream_t.
// Thread-safety: stateless.
#ifndef MAXSIMD_KERNELS_PLAID_SCAN_H_
#define MAXSIMD_KERNELS_PLAID_SCAN_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/maxsim_tma.h"

namespace maxsimd {

// Whether a PlaidMma launch is a scan that the warp kernel of
// plaid_scan.cu takes (LaunchMaxSimTma dispatches it there): d = 128, 2 or
// 4 bits, one warpgroup, one tile, with the unit table (at 2 bits, its
// tiles' largest values too) and the slot's rows in device memory.
inline bool PlaidScanApplies(const TmaPlaidMmaArgs& p) {
  const int nbits = PlaidNbits(p.dtype);
  return p.records == nullptr && (nbits == 2 || nbits == 4) && p.dim == 128 &&
         p.warpgroups == 1 && p.num_tiles == 1 && p.plaid_units != nullptr &&
         (!PlaidUnitsInt16(nbits) || p.plaid_units_max != nullptr) &&
         p.plaid_rows != nullptr;
}

// The PLAID scan of plaid_scan.cu: REQUIRES PlaidScanApplies(params) and
// the fields LaunchMaxSimTma requires of a PlaidMma launch (else
// INVALID_ARGUMENT). Scores as LaunchMaxSimTma does.
absl::Status LaunchPlaidScan(const TmaPlaidMmaArgs& params,
                             cudaStream_t stream);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_PLAID_SCAN_H_
