// q8_0 x q8_0 numerics: llama.cpp runs one float order for this pair on x86 (ggml_vec_dot_q8_0_q8_0
// for one token, llamafile tinyBLAS_Q0_AVX for several; both per block: d = d_w * d_a in float,
// eight int32 lane sums of 4 products, lane = fma(d, sum, lane), then hsum_float_8). Every CPU
// level's dot product must return exactly those bits, and so must the blocked prefill GEMM and
// matmul() for any shape (odd token counts, row counts off the tile, padded strides).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_q8_0.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "quant_gemm_test_util.h"
#include "kernels/quant_blocks.h"
#include "kernels/threadpool.h"

namespace agentkv {
namespace {

// The formula written out plainly (independent of the library's kernels).
float llama_q8_0_dot(const BlockQ8_0* w, const BlockQ8_0* a, int64_t nb) {
  float lane[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const float d = fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d);
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int k = 0; k < 4; ++k) s += int32_t{w[b].qs[4 * l + k]} * int32_t{a[b].qs[4 * l + k]};
      lane[l] = std::fma(d, static_cast<float>(s), lane[l]);
    }
  }
  const float t0 = lane[4] + lane[0], t1 = lane[5] + lane[1], t2 = lane[6] + lane[2], t3 = lane[7] + lane[3];
  return (t0 + t2) + (t1 + t3);
}

struct Rows {
  int64_t n_in = 0, count = 0;
  size_t stride = 0;  // bytes between rows (may exceed the dense row size)
  std::vector<uint8_t> bytes;
  const BlockQ8_0* row(int64_t i) const { return reinterpret_cast<const BlockQ8_0*>(bytes.data() + i * stride); }
};

// Weight rows from quantize_row; some rows get the extreme quant -128 (never produced by the
// quantizer, but legal in a file) to exercise the unsigned shift of the VNNI kernels.
Rows make_weights(int64_t n_in, int64_t count, size_t pad, std::mt19937& rng) {
  Rows r{n_in, count, ggml_row_size(GgmlType::Q8_0, n_in) + pad, {}};
  r.bytes.assign(r.stride * count, 0xCD);
  std::normal_distribution<float> dist(0.f, 0.05f);
  std::vector<float> x(n_in);
  for (int64_t i = 0; i < count; ++i) {
    for (auto& v : x) v = dist(rng);
    quantize_row(GgmlType::Q8_0, x.data(), r.bytes.data() + i * r.stride, n_in);
    if (i % 3 == 1) {
      auto* blocks = reinterpret_cast<BlockQ8_0*>(r.bytes.data() + i * r.stride);
      blocks[0].qs[rng() % 32] = -128;
      blocks[n_in / 32 - 1].qs[rng() % 32] = -128;
    }
  }
  return r;
}

std::vector<float> make_activations(int64_t n_in, int64_t count, int64_t stride, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(count * stride, NAN);  // padding must never be read
  for (int64_t t = 0; t < count; ++t) {
    for (int64_t i = 0; i < n_in; ++i) x[t * stride + i] = dist(rng);
    x[t * stride + rng() % n_in] *= 30.f;  // an outlier, as real activations have
  }
  return x;
}

Rows quantize_activations(const std::vector<float>& x, int64_t n_in, int64_t count, int64_t stride) {
  Rows r{n_in, count, ggml_row_size(GgmlType::Q8_0, n_in), {}};
  r.bytes.resize(r.stride * count);
  for (int64_t t = 0; t < count; ++t)
    quantize_activation_row(GgmlType::Q8_0, x.data() + t * stride, r.bytes.data() + t * r.stride, n_in);
  return r;
}

const CpuLevel kLevels[] = {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512};

TEST(Q8_0Dot, EveryCpuLevelEqualsLlamaFloatOrderBitForBit) {
  std::mt19937 rng(7);
  for (int64_t n_in : {32, 64, 96, 1024, 3104}) {
    const Rows w = make_weights(n_in, 6, 0, rng);
    const std::vector<float> x = make_activations(n_in, 3, n_in, rng);
    const Rows a = quantize_activations(x, n_in, 3, n_in);
    for (int64_t i = 0; i < w.count; ++i) {
      for (int64_t t = 0; t < a.count; ++t) {
        const float want = llama_q8_0_dot(w.row(i), a.row(t), n_in / 32);
        for (CpuLevel level : kLevels) {
          const float got = vec_dot_fn(GgmlType::Q8_0, level)(n_in, w.row(i), a.row(t));
          EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(want))
              << "level " << cpu_level_name(level) << " (clamped to " << cpu_level_name(detected_cpu_level())
              << ") n_in " << n_in << " row " << i << " token " << t << ": " << got << " vs " << want;
        }
      }
    }
  }
}

struct Shape {
  int64_t n_in, n_out, n_tokens;
};

// q8_0_gemm at every level of the machine that has a blocked kernel (AVX2, AVX-512 VNNI) against
// the formula and that level's vec_dot: token counts 1..13 (whole and partial register tiles),
// ~512 (several token chunks), row counts off the tiles, one to ~100 blocks, padded strides.
TEST(Q8_0Gemm, EqualsPerTokenDotBitForBit) {
  std::vector<Shape> shapes = {{32, 1, 1},    {96, 7, 1},    {2080, 130, 1}, {32, 1, 2},
                               {32, 5, 3},    {64, 4, 8},    {96, 7, 9},     {288, 13, 17},
                               {128, 67, 5},  {1024, 9, 33}, {256, 130, 16}, {64, 3, 1 + 2 * 4 * 3},
                               {2080, 130, 7}, {1024, 11, 512}, {3104, 6, 511}, {256, 5, 190}};
  for (int64_t n_tokens = 1; n_tokens <= 13; ++n_tokens) shapes.push_back({160, 4 + n_tokens % 4 + 4 * (n_tokens % 2), n_tokens});
  std::mt19937 rng(11);
  bool ran = false;
  for (CpuLevel level : test::machine_cpu_levels()) {
    test::ScopedCpuLevel at(level);
    if (!q8_0_gemm_available()) continue;
    ran = true;
    const VecDotFn dot = vec_dot_fn(GgmlType::Q8_0);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (const Shape& s : shapes) {
        const Rows w = make_weights(s.n_in, s.n_out, 6, rng);  // padded row stride
        const std::vector<float> x = make_activations(s.n_in, s.n_tokens, s.n_in, rng);
        const Rows a = quantize_activations(x, s.n_in, s.n_tokens, s.n_in);
        const int64_t y_stride = s.n_out + 3;
        std::vector<float> y(s.n_tokens * y_stride, -7.f);
        q8_0_gemm(w.bytes.data(), w.stride, s.n_out, s.n_in, a.bytes.data(), a.stride, s.n_tokens, y.data(), y_stride,
                  pool);
        for (int64_t t = 0; t < s.n_tokens; ++t) {
          for (int64_t r = 0; r < y_stride; ++r) {
            const auto where = [&] {
              return std::string(cpu_level_name(level)) + " shape " + std::to_string(s.n_in) + "x" +
                     std::to_string(s.n_out) + " tokens " + std::to_string(s.n_tokens) + " threads " +
                     std::to_string(threads) + " row " + std::to_string(r) + " token " + std::to_string(t);
            };
            if (r >= s.n_out) {
              ASSERT_EQ(y[t * y_stride + r], -7.f) << "wrote into the y padding, " << where();
              continue;
            }
            const uint32_t got = fp32_to_bits(y[t * y_stride + r]);
            ASSERT_EQ(got, fp32_to_bits(llama_q8_0_dot(w.row(r), a.row(t), s.n_in / 32))) << where();
            ASSERT_EQ(got, fp32_to_bits(dot(s.n_in, w.row(r), a.row(t)))) << "vs vec_dot, " << where();
          }
        }
      }
    }
  }
  if (!ran) GTEST_SKIP() << "no blocked q8_0 kernel at any level of this machine";
}

// Through matmul(), at every level: a batch gives each token exactly what it gets alone (the
// decode path).
TEST(Q8_0Gemm, MatmulBatchEqualsOneTokenAtATime) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  const int64_t n_in = 160, n_out = 41, n_tokens = 11, x_stride = n_in + 5, y_stride = n_out + 2;
  const Rows w = make_weights(n_in, n_out, 0, rng);
  const WeightMatrix wm{GgmlType::Q8_0, n_in, n_out, w.bytes.data(), w.stride};
  const std::vector<float> x = make_activations(n_in, n_tokens, x_stride, rng);
  for (CpuLevel level : test::machine_cpu_levels()) {
    test::ScopedCpuLevel at(level);
    SCOPED_TRACE(cpu_level_name(level));
    test::expect_batch_equals_one_token_at_a_time(wm, x, n_tokens, x_stride, y_stride, pool);
  }
}

// Expert matrices (RowGrouping::kEachRowAlone, the MoE FFN's per-expert token batches) get
// vec_dot's bits per (row, token) for any batch size, at every level.
TEST(Q8_0Gemm, ExpertBatchesEqualPerTokenDot) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  const int64_t n_in = 256, n_out = 38;
  const Rows w = make_weights(n_in, n_out, 0, rng);
  const WeightMatrix wm{GgmlType::Q8_0, n_in, n_out, w.bytes.data(), w.stride};
  for (CpuLevel level : test::machine_cpu_levels()) {
    test::ScopedCpuLevel at(level);
    const VecDotFn dot = vec_dot_fn(GgmlType::Q8_0);
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 13, 64}) {
      const std::vector<float> x = make_activations(n_in, n_tokens, n_in, rng);
      const Rows a = quantize_activations(x, n_in, n_tokens, n_in);
      std::vector<float> y(n_tokens * n_out);
      matmul(wm, x.data(), n_tokens, n_in, y.data(), n_out, pool, RowGrouping::kEachRowAlone);
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < n_out; ++r)
          ASSERT_EQ(fp32_to_bits(y[t * n_out + r]), fp32_to_bits(dot(n_in, w.row(r), a.row(t))))
              << cpu_level_name(level) << " tokens " << n_tokens << " row " << r << " token " << t;
    }
  }
}

// Not a check: the microbenchmark docs/performance.md quotes. Run it with
//   tests/gemm_q8_0_test --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
// Thread CPU time of one matmul (1 thread, best of 3), so a busy machine disturbs it little.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// matmul's per-(row, token) vec_dot loop (16-row x 8-token tiles), the path without a GEMM.
void per_dot_matmul(const Rows& w, const Rows& a, int64_t n_out, float* y) {
  const VecDotFn dot = vec_dot_fn(GgmlType::Q8_0);
  for (int64_t r0 = 0; r0 < n_out; r0 += 16)
    for (int64_t t0 = 0; t0 < a.count; t0 += 8)
      for (int64_t r = r0; r < std::min(r0 + 16, n_out); ++r)
        for (int64_t t = t0; t < std::min(t0 + 8, a.count); ++t)
          y[t * n_out + r] = dot(w.n_in, w.row(r), a.row(t));
}

TEST(Q8_0Gemm, DISABLED_ThroughputReport) {
  std::mt19937 rng(3);
  ThreadPool pool(1);
  for (int64_t n_tokens : {1, 4, 64, 512}) {
    for (const auto& [n_in, n_out] : {std::pair<int64_t, int64_t>{1024, 3072}, {3072, 1024}, {1024, 256}, {256, 1024}}) {
      const Rows w = make_weights(n_in, n_out, 0, rng);
      const WeightMatrix wm{GgmlType::Q8_0, n_in, n_out, w.bytes.data(), w.stride};
      const std::vector<float> x = make_activations(n_in, n_tokens, n_in, rng);
      const Rows a = quantize_activations(x, n_in, n_tokens, n_in);
      std::vector<float> y(n_tokens * n_out);
      const CpuLevel before = active_cpu_level();
      for (CpuLevel level : {CpuLevel::Avx512, CpuLevel::Avx2}) {
        set_cpu_level(level);
        // Alternated, best of several: matmul, then (for the level's vec_dot) the per-dot loop.
        double best[2] = {1e9, 1e9};
        for (int rep = 0; rep < (n_tokens < 64 ? 60 : 6); ++rep) {
          const double t0 = thread_cpu_seconds();
          if (rep % 2 == 0) {
            matmul(wm, x.data(), n_tokens, n_in, y.data(), n_out, pool);
          } else {
            per_dot_matmul(w, a, n_out, y.data());
          }
          best[rep % 2] = std::min(best[rep % 2], thread_cpu_seconds() - t0);
        }
        const double macs = static_cast<double>(n_in * n_out * n_tokens);
        std::printf("%-6s %5lld x %5lld, %3lld tokens: matmul %8.3f ms %6.1f GMAC/s, per-dot %8.3f ms %6.1f GMAC/s: %.2fx\n",
                    std::string(cpu_level_name(active_cpu_level())).c_str(), static_cast<long long>(n_in),
                    static_cast<long long>(n_out), static_cast<long long>(n_tokens), best[0] * 1e3, macs / best[0] * 1e-9,
                    best[1] * 1e3, macs / best[1] * 1e-9, best[1] / best[0]);
      }
      set_cpu_level(before);
    }
  }
}

}  // namespace
}  // namespace agentkv
