// Persistent worker pool: threads spin briefly then sleep, so back-to-back ops in a forward pass
// pay no thread wake-up cost. run() blocks until every worker finished its share.
#pragma once
#include <cstdint>
#include <functional>

namespace agentkv {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1; the caller's thread is worker 0
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(ith, nth) on every worker, ith in [0, nth). Not reentrant.
  void run(const std::function<void(int ith, int nth)>& fn);
  // Splits [0, n) into contiguous chunks (multiples of `grain` where possible), one per worker.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                    int64_t grain = 1);

 private:
  struct Impl;
  Impl* impl_;
  int n_threads_;
};

}  // namespace agentkv
