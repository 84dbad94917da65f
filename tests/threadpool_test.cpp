// ThreadPool's splits: every item reaches fn exactly once, in the ranges each split promises.
#include "kernels/threadpool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace agentkv {
namespace {

// Random (n, chunk, threads) against the reference: the chunks [k * chunk, min(n, (k + 1) * chunk)),
// each handed out once, together covering [0, n).
TEST(ThreadPool, ParallelChunksHandsOutEveryChunkOnce) {
  std::mt19937 rng(7);
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 200; ++round) {
      const int64_t n = std::uniform_int_distribution<int64_t>(0, 700)(rng);
      const int64_t chunk = std::uniform_int_distribution<int64_t>(round % 7 == 0 ? -1 : 1, 90)(rng);
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      pool.parallel_chunks(n, chunk, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(b, e);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "item " << i << " of " << n;
      const int64_t step = std::max<int64_t>(1, chunk);
      std::sort(ranges.begin(), ranges.end());
      ASSERT_EQ(static_cast<int64_t>(ranges.size()), (n + step - 1) / step);
      for (size_t k = 0; k < ranges.size(); ++k) {
        EXPECT_EQ(ranges[k].first, static_cast<int64_t>(k) * step);
        EXPECT_EQ(ranges[k].second, std::min(n, static_cast<int64_t>(k + 1) * step));
      }
    }
  }
}

// The point of dynamic chunks: a worker that stalls does not hold the others to a fixed share.
TEST(ThreadPool, ParallelChunksLetsAFastWorkerTakeMore) {
  ThreadPool pool(2);
  std::atomic<int> by_caller{0}, by_worker{0};
  const auto caller = std::this_thread::get_id();
  pool.parallel_chunks(64, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() == caller) {
      ++by_caller;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the slow one
    } else {
      ++by_worker;
    }
  });
  EXPECT_EQ(by_caller + by_worker, 64);
  EXPECT_GT(by_worker.load(), 48);  // a fixed split would give it 32
}

TEST(ThreadPool, BalancedChunkIsWholeUnitsWithinTheCap) {
  for (int threads : {1, 2, 4, 16}) {
    for (int64_t unit : {1, 4, 8, 16}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1024}, int64_t{3072}, int64_t{151936}}) {
        for (int64_t cap : {0, 1, 5, 1000}) {
          const int64_t c = balanced_chunk(n, unit, threads, cap);
          EXPECT_EQ(c % unit, 0);
          EXPECT_GE(c, unit);
          EXPECT_LE(c, std::max<int64_t>(1, cap) * unit);
          // About eight chunks per thread where the cap allows it (never fewer than that unless
          // a chunk is already one unit).
          if (c > unit && c < cap * unit) {
            EXPECT_GE((n + c - 1) / c, 8 * threads);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace agentkv
