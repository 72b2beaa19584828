// Test-only fault injection: named points on failure paths that a test
// cannot reach otherwise (a cudaMalloc that fails, a kernel that faults, a
// disk that fills up). A test arms a point to fail on chosen hits; the code
// at the point then takes the path of the real failure.
//
// A point is one MAXSIMD_FAULT_POINT(name) in production code, with `name`
// one of the constants below. It is true when the point is armed and this
// hit is one that fails; the call site then acts as the failure it stands
// for (returns cudaErrorMemoryAllocation instead of calling cudaMalloc, sets
// errno to ENOSPC instead of calling write(2), ...), so everything above it
// runs its ordinary error handling.
//
// Builds: the points exist only where the build defines
// MAXSIMD_FAULT_INJECTION, the CMake option of that name. It is on by
// default in builds with tests whose CMAKE_BUILD_TYPE is not Release (the
// test build of scripts/test.sh), and off in release builds (the Docker
// image, bench/run_gpu.sh's bundle, scripts/demo.sh). Off, a point is the
// constant false: the failure branch is dead code and the point costs
// nothing. The functions below still build and link either way, so tests
// compile everywhere; they check kEnabled and skip where it is false.
//
// Thread-safety: every function may be called from any thread. While no
// point is armed, a point reads one relaxed atomic; an armed point takes a
// mutex.
#ifndef MAXSIMD_KERNELS_BASE_FAULT_INJECTION_H_
#define MAXSIMD_KERNELS_BASE_FAULT_INJECTION_H_

#include <atomic>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace maxsimd::fault {

#ifdef MAXSIMD_FAULT_INJECTION
inline constexpr bool kEnabled = true;
#else
inline constexpr bool kEnabled = false;
#endif

// The fault points and the failure each stands for.
//
// Every cudaMalloc of the GPU backend (its workspaces at creation, and
// Upload's corpus arrays) fails with cudaErrorMemoryAllocation.
inline constexpr char kGpuMalloc[] = "gpu.malloc";
// A GPU search's wait for its kernels reports cudaErrorLaunchFailure, as an
// asynchronous kernel fault (an illegal address, a trap) does: the batch
// fails UNAVAILABLE and the backend turns unhealthy (sticky).
inline constexpr char kGpuKernel[] = "gpu.kernel";
// CpuBackend::Upload and Pin (the CPU backend's placement of a corpus
// array) fail as an allocation that does not fit: RESOURCE_EXHAUSTED.
inline constexpr char kCpuAlloc[] = "cpu.alloc";
// CpuBackend::Search fails after scoring its batch, as a GPU kernel fault
// does: UNAVAILABLE, and the backend turns unhealthy (sticky).
inline constexpr char kCpuSearch[] = "cpu.search";
// The write(2), fsync(2) (of a file or a directory) and rename(2) of
// index/durable_file.cc's durable files (segments, tombstones, codecs,
// manifests, aliases; corpus directories and snapshots) fail with ENOSPC,
// as on a full disk.
inline constexpr char kStorageWrite[] = "storage.write";
inline constexpr char kStorageFsync[] = "storage.fsync";
inline constexpr char kStorageRename[] = "storage.rename";

// Which hits of an armed point fail, counting from the Arm() call: hits
// skip + 1 to skip + times (times < 0: every hit after the first skip).
struct Schedule {
  int64_t skip = 0;
  int64_t times = 1;

  static Schedule Once() { return {0, 1}; }
  static Schedule Always() { return {0, -1}; }
  // No hit fails: the point only counts its hits (Hits()).
  static Schedule CountOnly() { return {0, 0}; }
  // Only hit n (n >= 1) fails.
  static Schedule NthHit(int64_t n) { return {n - 1, 1}; }
};

// Arms `point` (one of the constants above) with `schedule`, restarting
// its counts; a point armed again takes the new schedule.
void Arm(absl::string_view point, Schedule schedule);
// Disarms `point`; its counts stay readable until it is armed again.
void Disarm(absl::string_view point);
// Disarms every point and forgets every count.
void DisarmAll();
// Hits of `point` since it was last armed (while armed), and how many of
// them failed; 0 for a point never armed.
int64_t Hits(absl::string_view point);
int64_t Failures(absl::string_view point);

// Arms a point for a scope.
class ScopedFault {
 public:
  ScopedFault(absl::string_view point, Schedule schedule) : point_(point) {
    Arm(point_, schedule);
  }
  ~ScopedFault() { Disarm(point_); }
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;

 private:
  absl::string_view point_;  // one of the constants above: static storage
};

namespace internal {
// Points armed now; MAXSIMD_FAULT_POINT looks no further while it is 0.
extern std::atomic<int> armed_points;
// Counts a hit of `point`; true when this hit fails.
bool Hit(absl::string_view point);
}  // namespace internal

}  // namespace maxsimd::fault

// True when this hit of fault point `point` (a fault:: constant) fails.
// Without MAXSIMD_FAULT_INJECTION, the constant false (the name is still
// compiled, so a point named wrongly fails every build).
#ifdef MAXSIMD_FAULT_INJECTION
#define MAXSIMD_FAULT_POINT(point)                                            \
  (::maxsimd::fault::internal::armed_points.load(std::memory_order_relaxed) > \
       0 &&                                                                   \
   ::maxsimd::fault::internal::Hit(point))
#else
#define MAXSIMD_FAULT_POINT(point) (static_cast<void>(point), false)
#endif

#endif  // MAXSIMD_KERNELS_BASE_FAULT_INJECTION_H_
