#include "kernels/base/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace maxsimd {
namespace {

TEST(ThreadPoolTest, VisitsEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 7, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 13, [&](int w, int64_t b, int64_t e) {
      EXPECT_GE(w, 0);
      EXPECT_LT(w, pool.size());
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
}

TEST(ThreadPoolTest, ConcurrentCallersTakeTurns) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) {
        pool.ParallelFor(
            100, 7, [&](int, int64_t b, int64_t e) { total.fetch_add(e - b); });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 100);
}

}  // namespace
}  // namespace maxsimd
