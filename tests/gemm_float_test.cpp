// F16 / F32 matmul against scalar models of llama.cpp's two float orders on each x86 build:
// llamafile tinyBLAS for prefill-shaped products (one fused chain per output: AVX-512 build
// tinyBLAS<16, __m512>, AVX2 build tinyBLAS<8, __m256>), and ggml_vec_dot_f16 / _f32 (four fused
// chains over 64- resp. 32-element steps) for decode, for shapes tinyBLAS refuses and for expert
// matrices (MUL_MAT_ID). agentkv's AVX-512 level must give the AVX-512 build's bits, its AVX2 and
// scalar levels the AVX2 build's, every output bit for bit.
#include <gtest/gtest.h>

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_float.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

namespace agentkv {
namespace {

// _mm512_reduce_add_ps: upper half + lower half (16 -> 8 -> 4), then (v0 + v2) + (v1 + v3).
float reduce_add_16(const float* v) {
  float h8[8], h4[4];
  for (int l = 0; l < 8; ++l) h8[l] = v[l + 8] + v[l];
  for (int l = 0; l < 4; ++l) h4[l] = h8[l + 4] + h8[l];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// tinyBLAS's hsum(__m256): upper 128 + lower 128 bits, then (v0 + v2) + (v1 + v3).
float hsum_8(const float* v) {
  float h4[4];
  for (int l = 0; l < 4; ++l) h4[l] = v[l + 4] + v[l];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// GGML_F32x8_REDUCE's last steps: 128-bit halves added, then hadd(hadd(t, t), t).
float reduce_hadd_8(const float* v) {
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = v[l] + v[l + 4];
  return (t[0] + t[1]) + (t[2] + t[3]);
}

// Vector width of the llama.cpp build a level reproduces: 16 floats for AVX-512, 8 otherwise.
int lanes_of(CpuLevel level) { return level == CpuLevel::Avx512 ? 16 : 8; }

// tinyBLAS: lane l of the one accumulator sums elements l, l + L, l + 2L, ... by fused steps.
float tinyblas_order(const float* w, const float* x, int64_t n, CpuLevel level) {
  const int L = lanes_of(level);
  float lanes[16] = {};
  for (int64_t i = 0; i < n; i += L)
    for (int l = 0; l < L; ++l) lanes[l] = std::fma(w[i + l], x[i + l], lanes[l]);
  return L == 16 ? reduce_add_16(lanes) : hsum_8(lanes);
}

// ggml_vec_dot_f16 / _f32: accumulator j takes elements [Lj, Lj + L) of every 4L-element step;
// (acc0 + acc2) + (acc1 + acc3), reduced (AVX-512: _mm512_reduce_add_ps; AVX2: halves, then two
// hadds); the tail one product at a time (f16: float products summed in double; f32: a float
// fused chain on the AVX-512 build, rounded products added in float on the AVX2 one).
float vec_dot_order(const float* w, const float* x, int64_t n, bool half, CpuLevel level) {
  const int L = lanes_of(level);
  float acc[4][16] = {};
  const int64_t np = n & ~int64_t{4 * L - 1};
  for (int64_t i = 0; i < np; i += 4 * L)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < L; ++l) acc[j][l] = std::fma(w[i + L * j + l], x[i + L * j + l], acc[j][l]);
  float combined[16];
  for (int l = 0; l < L; ++l) combined[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  const float reduced = L == 16 ? reduce_add_16(combined) : reduce_hadd_8(combined);
  if (half) {
    double sum = reduced;
    for (int64_t i = np; i < n; ++i) sum += static_cast<double>(w[i] * x[i]);
    return static_cast<float>(sum);
  }
  float sum = reduced;
  for (int64_t i = np; i < n; ++i) {
    if (L == 16) {
      sum = std::fma(w[i], x[i], sum);
    } else {
      volatile float p = w[i] * x[i];  // the AVX2 build rounds each product of the tail
      sum += p;
    }
  }
  return sum;
}

struct Case {
  GgmlType type;
  int64_t n_in, n_out, n_tokens;
  int64_t w_pad = 0;  // extra elements at the end of every weight row (row_bytes > packed size)
};

// Runs at every CPU level (the parameter); a level the CPU lacks is skipped.
class GemmFloatTest : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    level_ = GetParam();
    if (detected_cpu_level() < level_) GTEST_SKIP() << "the CPU has no " << cpu_level_name(level_) << " level";
    set_cpu_level(level_);
  }
  void TearDown() override { set_cpu_level(level_before_); }

  // Runs matmul and compares every output with the order llama.cpp would use for the call.
  void check(const Case& c, RowGrouping grouping, bool want_tinyblas) { check(c, grouping, want_tinyblas, pool_); }

  void check(const Case& c, RowGrouping grouping, bool want_tinyblas, ThreadPool& pool) {
    std::mt19937 rng(static_cast<uint32_t>(c.n_in * 131 + c.n_out * 7 + c.n_tokens));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const bool half = c.type == GgmlType::F16;
    const int64_t x_stride = c.n_in + 3, y_stride = c.n_out + 5;
    const int64_t w_stride = c.n_in + c.w_pad;
    std::vector<float> w_values(c.n_in * c.n_out), x(c.n_tokens * x_stride);
    std::vector<uint8_t> w_bytes(w_stride * c.n_out * (half ? 2 : 4));
    for (int64_t r = 0; r < c.n_out; ++r) {
      for (int64_t i = 0; i < c.n_in; ++i) {
        const float v = dist(rng);
        if (half) {
          const uint16_t h = fp32_to_fp16(v);
          reinterpret_cast<uint16_t*>(w_bytes.data())[r * w_stride + i] = h;
          w_values[r * c.n_in + i] = fp16_to_fp32(h);
        } else {
          reinterpret_cast<float*>(w_bytes.data())[r * w_stride + i] = v;
          w_values[r * c.n_in + i] = v;
        }
      }
    }
    for (float& v : x) v = dist(rng);
    WeightMatrix w{c.type, c.n_in, c.n_out, w_bytes.data(), c.w_pad == 0 ? 0 : static_cast<size_t>(w_stride) * (half ? 2 : 4)};
    if (grouping == RowGrouping::kBatch) {
      EXPECT_EQ(float_gemm_applies(w, c.n_tokens), want_tinyblas);
    }
    std::vector<float> y(c.n_tokens * y_stride, -7.0f);
    matmul(w, x.data(), c.n_tokens, x_stride, y.data(), y_stride, pool, grouping);

    std::vector<float> act(c.n_in);
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      for (int64_t i = 0; i < c.n_in; ++i) {
        const float v = x[t * x_stride + i];
        act[i] = half ? fp16_to_fp32(fp32_to_fp16(v)) : v;  // ggml's vec_dot_type conversion
      }
      for (int64_t r = 0; r < c.n_out; ++r) {
        const float* wr = w_values.data() + r * c.n_in;
        const float want = want_tinyblas ? tinyblas_order(wr, act.data(), c.n_in, level_)
                                         : vec_dot_order(wr, act.data(), c.n_in, half, level_);
        ASSERT_EQ(fp32_to_bits(y[t * y_stride + r]), fp32_to_bits(want))
            << ggml_type_name(c.type) << " [" << c.n_in << " x " << c.n_out << "] tokens " << c.n_tokens << " t=" << t
            << " r=" << r << (want_tinyblas ? " (tinyBLAS order)" : " (vec_dot order)") << " at "
            << cpu_level_name(level_);
      }
      for (int64_t r = c.n_out; r < y_stride; ++r) ASSERT_EQ(y[t * y_stride + r], -7.0f) << "wrote past n_out";
    }
  }

  const CpuLevel level_before_ = active_cpu_level();
  CpuLevel level_ = CpuLevel::Scalar;
  ThreadPool pool_{2};
};

TEST_P(GemmFloatTest, PrefillShapesFollowTinyBlasOrder) {
  for (GgmlType type : {GgmlType::F16, GgmlType::F32}) {
    // Token counts around the 6-token register tile; 4096-element rows cut the tokens into
    // several cache chunks (12 tokens each).
    for (const Case& c : {Case{type, 64, 8, 2}, Case{type, 160, 12, 7}, Case{type, 96, 20, 13},
                          Case{type, 4096, 8, 29}, Case{type, 48, 4, 6}}) {
      check(c, RowGrouping::kBatch, true);
    }
  }
}

// The blocking of the kernel: k split into blocks (n_in > 1024, unequal ones for 1040), widened
// weight panels of 768 KiB (n_out past 192 rows of 1024, 64 rows of 3072), token counts that
// leave 1..5 tokens after the 6-token tiles, padded weight rows, and 1 or 2 threads.
TEST_P(GemmFloatTest, BlockedShapesFollowTinyBlasOrder) {
  ThreadPool one_thread(1);
  for (GgmlType type : {GgmlType::F16, GgmlType::F32}) {
    for (const Case& c : {Case{type, 1024, 200, 13}, Case{type, 2048, 36, 11}, Case{type, 3072, 132, 9, 32},
                          Case{type, 1040, 12, 8}, Case{type, 1024, 4, 3, 16}, Case{type, 3072, 8, 2}}) {
      check(c, RowGrouping::kBatch, true, one_thread);
      check(c, RowGrouping::kBatch, true, pool_);
    }
  }
}

TEST_P(GemmFloatTest, DecodeMissesAndExpertsFollowVecDotOrder) {
  const bool avx512 = level_ == CpuLevel::Avx512;
  for (GgmlType type : {GgmlType::F16, GgmlType::F32}) {
    check({type, 160, 12, 1}, RowGrouping::kBatch, false);    // decode
    check({type, 96, 10, 5}, RowGrouping::kBatch, false);     // rows not a multiple of 4
    check({type, 200, 8, 5}, RowGrouping::kBatch, !avx512);   // row length a multiple of 8, not of 16
    check({type, 196, 8, 5}, RowGrouping::kBatch, false);     // row length not a multiple of 8
    check({type, 160, 12, 7}, RowGrouping::kEachRowAlone, false);  // MUL_MAT_ID
    // vec_dot tails: 32-element steps (AVX2) leave 0..31 elements, 64-element steps (AVX-512) 0..63
    for (int64_t n_in : {8, 31, 33, 64, 72, 100, 127, 1000}) check({type, n_in, 4, 1}, RowGrouping::kBatch, false);
  }
}

// ggml_vec_dot_bf16 on AVX-512: two 16-lane accumulators reduced separately and added in double,
// the tail in double. With AVX512-BF16 lane l of a vdpbf16ps step takes elements 2l and 2l + 1
// of its 32-element half (modelled as two rounded adds of the exact bf16 products; the order of
// the pair made no difference on these data); without it, lane l takes element l of each
// 16-element half of a 32-element step.
float bf16_dot_order(const std::vector<float>& x, const std::vector<float>& y, bool dp) {
  const int64_t n = static_cast<int64_t>(x.size());
  float acc[2][16] = {};
  int64_t i = 0;
  if (dp) {
    for (; i + 64 <= n; i += 64)
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 16; ++l) {
          const int64_t e = i + 32 * h + 2 * l;
          acc[h][l] += x[e + 1] * y[e + 1];
          acc[h][l] += x[e] * y[e];
        }
  } else {
    for (; i + 32 <= n; i += 32)
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 16; ++l) acc[h][l] += x[i + 16 * h + l] * y[i + 16 * h + l];
  }
  double sum = reduce_add_16(acc[0]);
  sum += reduce_add_16(acc[1]);
  for (; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

TEST(GemmFloatBf16, Avx512DotFollowsGgmlOrder) {
  if (detected_cpu_level() < CpuLevel::Avx512) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const bool dp = cpu_features().avx512_bf16;
  for (int64_t n : {32, 64, 96, 160, 1000}) {
    std::vector<uint16_t> xb(n), yb(n);
    std::vector<float> x(n), y(n);
    for (int64_t i = 0; i < n; ++i) {
      xb[i] = fp32_to_bf16(dist(rng));
      yb[i] = fp32_to_bf16(dist(rng));
      x[i] = bf16_to_fp32(xb[i]);
      y[i] = bf16_to_fp32(yb[i]);
    }
    const float got = vec_dot_fn(GgmlType::BF16, CpuLevel::Avx512)(n, xb.data(), yb.data());
    ASSERT_EQ(fp32_to_bits(got), fp32_to_bits(bf16_dot_order(x, y, dp))) << "n=" << n << (dp ? " (vdpbf16ps)" : "");
  }
}

// ggml_vec_dot_bf16 on AVX2 (agentkv's AVX2 and scalar levels): four 8-lane accumulators over
// 32-element steps, (c1 + c3) + (c2 + c4), hsum (halves, then (0 + 2) + (1 + 3)), then the sum and
// the tail in double. bf16 products are exact in float, so mul + add equals a fused step.
float bf16_dot_order_avx2(const std::vector<float>& x, const std::vector<float>& y) {
  const int64_t n = static_cast<int64_t>(x.size());
  float acc[4][8] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) acc[j][l] += x[i + 8 * j + l] * y[i + 8 * j + l];
  float combined[8];
  for (int l = 0; l < 8; ++l) combined[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  double sum = hsum_8(combined);
  for (; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

TEST(GemmFloatBf16, Avx2AndScalarDotsFollowGgmlAvx2Order) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (CpuLevel level : {CpuLevel::Avx2, CpuLevel::Scalar}) {
    if (detected_cpu_level() < level) continue;
    for (int64_t n : {8, 32, 40, 64, 96, 160, 1000}) {
      std::vector<uint16_t> xb(n), yb(n);
      std::vector<float> x(n), y(n);
      for (int64_t i = 0; i < n; ++i) {
        xb[i] = fp32_to_bf16(dist(rng));
        yb[i] = fp32_to_bf16(dist(rng));
        x[i] = bf16_to_fp32(xb[i]);
        y[i] = bf16_to_fp32(yb[i]);
      }
      const float got = vec_dot_fn(GgmlType::BF16, level)(n, xb.data(), yb.data());
      ASSERT_EQ(fp32_to_bits(got), fp32_to_bits(bf16_dot_order_avx2(x, y))) << "n=" << n << " at " << cpu_level_name(level);
    }
  }
}

// Single-thread throughput of the prefill GEMM on Qwen3-0.6B's F16 shapes with 512 tokens, timed in
// thread CPU time (the machine is shared, wall time is noisy). Run with --gtest_also_run_disabled_tests.
TEST_P(GemmFloatTest, DISABLED_Throughput) {
  if (level_ == CpuLevel::Scalar) GTEST_SKIP();
  ThreadPool one_thread(1);
  const int64_t n_tokens = 512;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const auto& [n_in, n_out] : {std::pair<int64_t, int64_t>{1024, 3072}, {3072, 1024}, {1024, 2048}, {2048, 1024}}) {
    std::vector<uint16_t> w_bytes(n_in * n_out);
    for (uint16_t& h : w_bytes) h = fp32_to_fp16(dist(rng));
    std::vector<float> x(n_tokens * n_in), y(n_tokens * n_out);
    for (float& v : x) v = dist(rng);
    const WeightMatrix w{GgmlType::F16, n_in, n_out, reinterpret_cast<const uint8_t*>(w_bytes.data()), 0};
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      timespec t0{}, t1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      float_gemm(w, x.data(), n_tokens, n_in, y.data(), n_out, one_thread);
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      best = std::min(best, (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    }
    std::printf("F16 [%lld x %lld] x %lld tokens: %.1f GFLOP/s (%.2f ms)\n", static_cast<long long>(n_in),
                static_cast<long long>(n_out), static_cast<long long>(n_tokens),
                2.0 * n_in * n_out * n_tokens / best * 1e-9, best * 1e3);
  }
}

TEST_P(GemmFloatTest, RefusesShapesOutsideTinyBlas) {
  std::vector<uint8_t> bytes(16 * 10 * 4);
  WeightMatrix w{GgmlType::F32, 16, 10, bytes.data(), 0};
  std::vector<float> x(16 * 2), y(10 * 2);
  EXPECT_FALSE(float_gemm_applies(w, 2));
  EXPECT_THROW(float_gemm(w, x.data(), 2, 16, y.data(), 10, pool_), Error);
}

INSTANTIATE_TEST_SUITE_P(Levels, GemmFloatTest, ::testing::Values(CpuLevel::Avx512, CpuLevel::Avx2, CpuLevel::Scalar),
                         [](const ::testing::TestParamInfo<CpuLevel>& info) {
                           return std::string(cpu_level_name(info.param));
                         });

}  // namespace
}  // namespace agentkv
