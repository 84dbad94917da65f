// Test data and checks the quantized GEMM tests (gemm_q4_K / q6_K / q8_0 / iq4_xs) share: weight
// rows from quantize_row with padded strides, activations with outliers and NaN padding, the
// "a token in a batch gets exactly what it gets alone" check through matmul(), and, for the GEMMs
// over q8_K activations, the bit-for-bit check against the per-dot kernel and the throughput report.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <cstdio>
#include <random>
#include <string>
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

// A GEMM over q8_K activations (q6_K_gemm, iq_gemm of one type).
using Q8KGemmFn = void (*)(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                           size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

inline std::vector<uint8_t> q8_K_rows(const std::vector<float>& x, int64_t n_in, int64_t count, int64_t x_stride) {
  const size_t stride = ggml_row_size(GgmlType::Q8_K, n_in);
  std::vector<uint8_t> act(stride * count);
  for (int64_t t = 0; t < count; ++t)
    quantize_activation_row(GgmlType::Q8_K, x.data() + t * x_stride, act.data() + t * stride, n_in);
  return act;
}

// Every (row, token) of gemm equals the active level's per-dot kernel bit for bit, over odd token
// counts, row counts off the tile, several superblock steps and weight chunks, padded strides, and
// one or two threads; nothing is written into y's padding.
inline void expect_q8_K_gemm_equals_per_dot(GgmlType type, Q8KGemmFn gemm) {
  struct Shape {
    int64_t n_in, n_out, n_tokens;
  };
  const VecDotFn dot = vec_dot_fn(type, active_cpu_level());
  const Shape shapes[] = {{256, 1, 2},  {256, 5, 3},    {512, 7, 9},   {1024, 13, 17}, {768, 66, 5},
                          {2560, 9, 8}, {3072, 96, 11}, {256, 3, 1},   {512, 10, 13},  {768, 23, 6},
                          {1024, 130, 4}, {512, 45, 509}};
  std::mt19937 rng(17);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const Shape& s : shapes) {
      const QuantRows w = make_k_quant_weights(type, s.n_in, s.n_out, 10, rng);
      const std::vector<float> x = make_k_quant_activations(s.n_in, s.n_tokens, s.n_in, rng);
      const size_t act_stride = ggml_row_size(GgmlType::Q8_K, s.n_in);
      const std::vector<uint8_t> act = q8_K_rows(x, s.n_in, s.n_tokens, s.n_in);
      const int64_t y_stride = s.n_out + 2;
      std::vector<float> y(s.n_tokens * y_stride, -7.f);
      gemm(w.bytes.data(), w.stride, s.n_out, s.n_in, act.data(), act_stride, s.n_tokens, y.data(), y_stride, pool);
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        for (int64_t r = 0; r < y_stride; ++r) {
          const std::string where = "shape " + std::to_string(s.n_in) + "x" + std::to_string(s.n_out) + " tokens " +
                                    std::to_string(s.n_tokens) + " threads " + std::to_string(threads) + " row " +
                                    std::to_string(r) + " token " + std::to_string(t);
          if (r >= s.n_out) {
            EXPECT_EQ(y[t * y_stride + r], -7.f) << "wrote into the y padding, " << where;
            continue;
          }
          const float want = dot(s.n_in, w.row(r), act.data() + t * act_stride);
          EXPECT_EQ(fp32_to_bits(y[t * y_stride + r]), fp32_to_bits(want)) << where;
        }
      }
    }
  }
}

// Single-thread throughput of gemm against the per-dot loop it replaces, 512 and 7 tokens, thread
// CPU time (the DISABLED_ThroughputReport tests; run with --gtest_also_run_disabled_tests).
inline void report_q8_K_gemm_throughput(GgmlType type, Q8KGemmFn gemm) {
  ThreadPool one_thread(1);
  std::mt19937 rng(5);
  const VecDotFn dot = vec_dot_fn(type);
  for (const auto& shape : kQwen3SmallShapes) {
    const int64_t n_in = shape[0], n_out = shape[1];
    for (int64_t n_tokens : {int64_t{512}, int64_t{7}}) {
      const QuantRows w = make_k_quant_weights(type, n_in, n_out, 0, rng);
      const std::vector<float> x = make_k_quant_activations(n_in, n_tokens, n_in, rng);
      const size_t act_stride = ggml_row_size(GgmlType::Q8_K, n_in);
      const std::vector<uint8_t> act = q8_K_rows(x, n_in, n_tokens, n_in);
      std::vector<float> y(n_tokens * n_out);
      const double blocked = best_thread_seconds(3, [&] {
        gemm(w.bytes.data(), w.stride, n_out, n_in, act.data(), act_stride, n_tokens, y.data(), n_out, one_thread);
      });
      const double per_dot = best_thread_seconds(n_tokens > 64 ? 1 : 3, [&] {
        for (int64_t r = 0; r < n_out; ++r)
          for (int64_t t = 0; t < n_tokens; ++t) y[t * n_out + r] = dot(n_in, w.row(r), act.data() + t * act_stride);
      });
      std::printf("%s [%lld x %lld] x %lld tokens: blocked %.2f ms (%.1f GMAC/s), per-dot %.2f ms: %.2fx\n",
                  std::string(ggml_type_name(type)).c_str(), static_cast<long long>(n_in), static_cast<long long>(n_out),
                  static_cast<long long>(n_tokens), blocked * 1e3, 1e-9 * n_in * n_out * n_tokens / blocked,
                  per_dot * 1e3, per_dot / blocked);
    }
  }
}

}  // namespace agentkv::test
