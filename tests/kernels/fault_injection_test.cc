// The fault point registry: which hits of an armed point fail (once, always,
// the nth), counts, disarming, concurrent hits; and, in a build without
// MAXSIMD_FAULT_INJECTION, that a point is the constant false whatever is
// armed.
#include "kernels/base/fault_injection.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/fault_skip.h"

namespace maxsimd {
namespace {

// A point's failures over its next `n` hits, as a string of '.' (passed)
// and 'x' (failed).
std::string Pattern(const char* point, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += MAXSIMD_FAULT_POINT(point) ? 'x' : '.';
  return out;
}

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override { MAXSIMD_SKIP_WITHOUT_FAULT_INJECTION(); }
  void TearDown() override { fault::DisarmAll(); }
};

TEST_F(FaultInjectionTest, SchedulesFailTheHitsTheyName) {
  fault::Arm(fault::kCpuSearch, fault::Schedule::Once());
  EXPECT_EQ(Pattern(fault::kCpuSearch, 4), "x...");
  fault::Arm(fault::kCpuSearch, fault::Schedule::Always());
  EXPECT_EQ(Pattern(fault::kCpuSearch, 4), "xxxx");
  fault::Arm(fault::kCpuSearch, fault::Schedule::NthHit(3));
  EXPECT_EQ(Pattern(fault::kCpuSearch, 5), "..x..");
  fault::Arm(fault::kCpuSearch, fault::Schedule{2, 2});
  EXPECT_EQ(Pattern(fault::kCpuSearch, 6), "..xx..");
  fault::Arm(fault::kCpuSearch, fault::Schedule{1, -1});
  EXPECT_EQ(Pattern(fault::kCpuSearch, 4), ".xxx");
}

TEST_F(FaultInjectionTest, CountsRestartWhenArmedAndOutliveDisarm) {
  EXPECT_EQ(fault::Hits(fault::kGpuMalloc), 0);
  fault::Arm(fault::kGpuMalloc, fault::Schedule::NthHit(2));
  EXPECT_EQ(Pattern(fault::kGpuMalloc, 3), ".x.");
  EXPECT_EQ(fault::Hits(fault::kGpuMalloc), 3);
  EXPECT_EQ(fault::Failures(fault::kGpuMalloc), 1);
  fault::Disarm(fault::kGpuMalloc);
  EXPECT_EQ(Pattern(fault::kGpuMalloc, 3), "...");  // not counted
  EXPECT_EQ(fault::Hits(fault::kGpuMalloc), 3);
  EXPECT_EQ(fault::Failures(fault::kGpuMalloc), 1);
  fault::Arm(fault::kGpuMalloc, fault::Schedule::NthHit(2));
  EXPECT_EQ(fault::Hits(fault::kGpuMalloc), 0);
  EXPECT_EQ(Pattern(fault::kGpuMalloc, 2), ".x");  // the schedule restarts
  fault::DisarmAll();
  EXPECT_EQ(fault::Hits(fault::kGpuMalloc), 0);
}

TEST_F(FaultInjectionTest, OnlyTheArmedPointFailsAndScopedFaultDisarms) {
  {
    fault::ScopedFault full_disk(fault::kStorageWrite,
                                 fault::Schedule::Always());
    EXPECT_TRUE(MAXSIMD_FAULT_POINT(fault::kStorageWrite));
    EXPECT_FALSE(MAXSIMD_FAULT_POINT(fault::kStorageFsync));
    EXPECT_FALSE(MAXSIMD_FAULT_POINT(fault::kStorageRename));
    EXPECT_EQ(fault::Hits(fault::kStorageFsync), 0);
  }
  EXPECT_FALSE(MAXSIMD_FAULT_POINT(fault::kStorageWrite));
  EXPECT_EQ(fault::Failures(fault::kStorageWrite), 1);
}

TEST_F(FaultInjectionTest, ConcurrentHitsFailExactlyTheScheduledNumber) {
  fault::Arm(fault::kGpuKernel, fault::Schedule{100, 250});
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&failed] {
      for (int i = 0; i < 1000; ++i) {
        if (MAXSIMD_FAULT_POINT(fault::kGpuKernel)) ++failed;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 250);
  EXPECT_EQ(fault::Hits(fault::kGpuKernel), 8000);
  EXPECT_EQ(fault::Failures(fault::kGpuKernel), 250);
}

TEST(FaultInjectionOffTest, APointIsFalseWhateverIsArmedWithoutTheBuildFlag) {
  if (fault::kEnabled) {
    GTEST_SKIP() << "this build has fault injection; the test is for one "
                    "without it";
  }
  fault::ScopedFault armed(fault::kCpuAlloc, fault::Schedule::Always());
#ifndef MAXSIMD_FAULT_INJECTION
  // A constant: the branch it guards is compiled out.
  static_assert(!MAXSIMD_FAULT_POINT(fault::kCpuAlloc));
#endif
  EXPECT_FALSE(MAXSIMD_FAULT_POINT(fault::kCpuAlloc));
  EXPECT_EQ(fault::Hits(fault::kCpuAlloc), 0);
}

}  // namespace
}  // namespace maxsimd
