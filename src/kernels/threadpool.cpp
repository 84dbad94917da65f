#include "kernels/threadpool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define AGENTKV_PAUSE() _mm_pause()
#else
#define AGENTKV_PAUSE() std::this_thread::yield()
#endif

namespace agentkv {

// Workers wait on a generation counter: they spin for a short while (ops in a forward pass follow
// each other within microseconds) and then fall back to a condition variable.
struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> pending{0};
  const std::function<void(int, int)>* job = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> stop{false};
  int n = 1;

  void worker_loop(int ith) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      int spins = 0;
      while ((g = generation.load(std::memory_order_acquire)) == seen) {
        if (stop.load(std::memory_order_relaxed)) return;
        if (++spins < 20000) {
          // On an oversubscribed machine a spinning worker can starve the thread it waits for.
          if (spins % 256 == 0) std::this_thread::yield();
          else AGENTKV_PAUSE();
        } else {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return generation.load() != seen || stop.load(); });
        }
      }
      if (stop.load()) return;
      seen = g;
      (*job)(ith, n);
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl), n_threads_(n_threads < 1 ? 1 : n_threads) {
  impl_->n = n_threads_;
  for (int i = 1; i < n_threads_; ++i) impl_->workers.emplace_back([this, i] { impl_->worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->workers) t.join();
  delete impl_;
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  impl_->job = &fn;
  impl_->pending.store(n_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->generation.fetch_add(1, std::memory_order_acq_rel);
  }
  impl_->cv.notify_all();
  fn(0, n_threads_);
  for (int spins = 1; impl_->pending.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins % 256 == 0) std::this_thread::yield();  // let a descheduled worker run
    else AGENTKV_PAUSE();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t n_chunks = (n + grain - 1) / grain;
  run([&](int ith, int nth) {
    const int64_t c0 = n_chunks * ith / nth, c1 = n_chunks * (ith + 1) / nth;
    const int64_t b = c0 * grain, e = std::min(n, c1 * grain);
    if (b < e) fn(b, e);
  });
}

int64_t balanced_chunk(int64_t n, int64_t unit, int n_threads, int64_t cap_units) {
  const int64_t units = (n + unit - 1) / unit;
  const int64_t per_chunk = units / (8 * static_cast<int64_t>(std::max(1, n_threads)));
  return std::clamp<int64_t>(per_chunk, 1, std::max<int64_t>(1, cap_units)) * unit;
}

void ThreadPool::parallel_chunks(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (chunk < 1) chunk = 1;
  if (n_threads_ == 1 || n <= chunk) {
    for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk));
    return;
  }
  // Chunk i < nth goes to worker i without touching the counter; the rest are claimed. The
  // counter has a cache line to itself: the claims bounce it between cores, nothing else should.
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  struct alignas(64) Counter {
    std::atomic<int64_t> next;
  } counter{{n_threads_}};
  run([&](int ith, int) {
    for (int64_t c = ith; c < n_chunks; c = counter.next.fetch_add(1, std::memory_order_relaxed))
      fn(c * chunk, std::min(n, (c + 1) * chunk));
  });
}

}  // namespace agentkv
