// Persistent worker pool: threads spin briefly then sleep, so back-to-back ops in a forward pass
// pay no thread wake-up cost. run() blocks until every worker finished its share.
#pragma once
#include <cstdint>
#include <functional>

namespace agentkv {

// A chunk size for ThreadPool::parallel_chunks: about eight chunks per thread (so the threads
// finish at most one chunk, an eighth of a share, apart), a multiple of `unit`, at most
// `cap_units` units (at least one).
int64_t balanced_chunk(int64_t n, int64_t unit, int n_threads, int64_t cap_units);

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
  // Hands [0, n) out in chunks of `chunk` items (the last may be shorter), each to whichever
  // worker asks first. For work whose threads do not run at one speed (a busy core, a vCPU the
  // host preempts, one thread's caches colder): a fixed split waits for the slowest thread.
  // fn sees only whole chunks, so a kernel whose chunk is a multiple of its tile computes every
  // output with the same tiles as under any other split.
  void parallel_chunks(int64_t n, int64_t chunk, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  struct Impl;
  Impl* impl_;
  int n_threads_;
};

}  // namespace agentkv
