// Test data and checks the quantized GEMM tests (gemm_q4_K / q6_K / q8_0) share: weight rows from
// quantize_row with padded strides, activations with outliers and NaN padding, and the
// "a token in a batch gets exactly what it gets alone" check through matmul().
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <random>
#include <vector>

#include "agentkv/fp16.h"
#include "agentkv/ggml_type.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

namespace agentkv::test {

// The CPU levels this machine can run, lowest first (each kernel path a level selects gets tested).
inline std::vector<CpuLevel> machine_cpu_levels() {
  std::vector<CpuLevel> levels;
  for (CpuLevel level : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512})
    if (level <= detected_cpu_level()) levels.push_back(level);
  return levels;
}

// Runs the scope at `level`, then restores the level that was active.
class ScopedCpuLevel {
 public:
  explicit ScopedCpuLevel(CpuLevel level) : before_(active_cpu_level()) { set_cpu_level(level); }
  ~ScopedCpuLevel() { set_cpu_level(before_); }
  ScopedCpuLevel(const ScopedCpuLevel&) = delete;
  ScopedCpuLevel& operator=(const ScopedCpuLevel&) = delete;

 private:
  CpuLevel before_;
};

// Rows of a quantized weight matrix, `stride` bytes apart (may exceed the dense row size; the
// padding is 0xCD).
struct QuantRows {
  size_t stride = 0;
  std::vector<uint8_t> bytes;
  const uint8_t* row(int64_t i) const { return bytes.data() + i * stride; }
};

// k-quant weights from small normal values, one outlier per row (large sub-block scales).
inline QuantRows make_k_quant_weights(GgmlType type, int64_t n_in, int64_t count, size_t pad, std::mt19937& rng) {
  QuantRows r{ggml_row_size(type, n_in) + pad, {}};
  r.bytes.assign(r.stride * count, 0xCD);
  std::normal_distribution<float> dist(0.f, 0.05f);
  std::vector<float> x(n_in);
  for (int64_t i = 0; i < count; ++i) {
    for (auto& v : x) v = dist(rng);
    x[rng() % n_in] *= 8.f;  // outliers give large sub-block scales
    quantize_row(type, x.data(), r.bytes.data() + i * r.stride, n_in);
  }
  return r;
}

// Activations for k-quant weights: normal values, one -40 per row (quantizes to -128 in q8_K),
// NaN in the row padding (which must never be read).
inline std::vector<float> make_k_quant_activations(int64_t n_in, int64_t count, int64_t stride, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(count * stride, NAN);
  for (int64_t t = 0; t < count; ++t) {
    for (int64_t i = 0; i < n_in; ++i) x[t * stride + i] = dist(rng);
    x[t * stride + rng() % n_in] = -40.f;
  }
  return x;
}

// matmul() of n_tokens rows of x (x_stride floats apart) gives every token the bits it gets alone.
inline void expect_batch_equals_one_token_at_a_time(const WeightMatrix& w, const std::vector<float>& x,
                                                    int64_t n_tokens, int64_t x_stride, int64_t y_stride,
                                                    ThreadPool& pool) {
  std::vector<float> batch(n_tokens * y_stride, 0.f), alone(w.n_out);
  matmul(w, x.data(), n_tokens, x_stride, batch.data(), y_stride, pool);
  for (int64_t t = 0; t < n_tokens; ++t) {
    matmul(w, x.data() + t * x_stride, 1, x_stride, alone.data(), w.n_out, pool);
    for (int64_t r = 0; r < w.n_out; ++r)
      EXPECT_EQ(fp32_to_bits(batch[t * y_stride + r]), fp32_to_bits(alone[r])) << "row " << r << " token " << t;
  }
}

// Best of `reps` runs of fn() in this thread's CPU time, seconds (the machine is shared: wall time
// is noisy). For the DISABLED_*Throughput reports.
template <class Fn>
double best_thread_seconds(int reps, const Fn& fn) {
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    timespec t0{}, t1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    fn();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    best = std::min(best, (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
  }
  return best;
}

// Qwen3-0.6B's matmul shapes (n_in, n_out): q/o, k/v, gate/up, down.
inline constexpr int64_t kQwen3SmallShapes[][2] = {{1024, 2048}, {2048, 1024}, {1024, 1024}, {1024, 3072}, {3072, 1024}};

}  // namespace agentkv::test
