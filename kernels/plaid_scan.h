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

// Whether a launch is a PlaidMma scan that the warp kernel of
// plaid_scan.cu takes (LaunchMaxSimTma dispatches it there): d = 128, 2 or
// 4 bits, one tile, with the unit table, the slot's rows and the row
// factors.
inline bool PlaidScanApplies(const TmaLaunchParams& p) {
  const int nbits = PlaidNbits(p.dtype);
  return p.records == nullptr && (nbits == 2 || nbits == 4) && p.dim == 128 &&
         p.warpgroups == 1 && p.num_tiles == 1 && p.plaid_units != nullptr &&
         (!PlaidUnitsInt16(nbits) || p.plaid_units_max != nullptr) &&
         p.plaid_rows != nullptr && p.codes != nullptr && p.scales != nullptr &&
         p.q_scales != nullptr;
}

// The PLAID scan of plaid_scan.cu: REQUIRES PlaidScanApplies(params) (else
// INVALID_ARGUMENT). Scores as LaunchMaxSimTma does.
absl::Status LaunchPlaidScan(const TmaLaunchParams& params,
                             cudaStream_t stream);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_PLAID_SCAN_H_
