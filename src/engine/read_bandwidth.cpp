#include "agentkv/read_bandwidth.h"

#include "engine/context_impl.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace agentkv {
namespace {
constexpr size_t kPrefetchWords = 4096 / sizeof(uint64_t);  // 4 KiB ahead, one request per line
}  // namespace

double measure_read_bandwidth_gbs(Context& ctx, size_t megabytes, int repeats) {
  ThreadPool& pool = thread_pool(ctx);
  const size_t n = megabytes * 1024 * 1024 / sizeof(uint64_t);
  std::vector<uint64_t> buf(n);
  pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i) * 2654435761u;
  }, 4096);
  double best = 0;
  std::vector<uint64_t> sums(pool.size() * 8, 0);
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int ith, int nth) {
      const size_t b = n * ith / nth, e = n * (ith + 1) / nth;
      // Four independent accumulators keep several loads in flight; XOR keeps it cheap. Each
      // cache line is also asked for kPrefetchBytes ahead, as the decode kernels do (gemv.cpp):
      // without it one stream per core leaves bandwidth unused and the "roofline" would be one
      // that the kernels beat.
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      size_t i = b;
      for (; i + 8 <= e; i += 8) {
        if (i + kPrefetchWords < e) __builtin_prefetch(&buf[i + kPrefetchWords]);
        a0 ^= buf[i] ^ buf[i + 4];
        a1 ^= buf[i + 1] ^ buf[i + 5];
        a2 ^= buf[i + 2] ^ buf[i + 6];
        a3 ^= buf[i + 3] ^ buf[i + 7];
      }
      for (; i < e; ++i) a0 ^= buf[i];
      sums[ith * 8] = a0 ^ a1 ^ a2 ^ a3;
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s / 1e9);
  }
  volatile uint64_t sink = 0;
  for (auto v : sums) sink = sink ^ v;
  (void)sink;
  return best;
}

}  // namespace agentkv
