// The iq4_xs prefill GEMM must return, for every (row, token), exactly the bits of the iq4_xs dot
// product (which every CPU level shares with the scalar kernel and llama.cpp's x86 order, see
// iq_quant_test), for odd token counts, row counts off the tile, several superblock steps and weight
// chunks, and padded strides; and matmul() must give a token in a batch what it gets alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_iq4_xs.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "quant_gemm_test_util.h"
#include "kernels/threadpool.h"

namespace agentkv {
namespace {

using test::QuantRows;

QuantRows make_weights(int64_t n_in, int64_t count, size_t pad, std::mt19937& rng) {
  return test::make_k_quant_weights(GgmlType::IQ4_XS, n_in, count, pad, rng);
}
std::vector<float> make_activations(int64_t n_in, int64_t count, int64_t stride, std::mt19937& rng) {
  return test::make_k_quant_activations(n_in, count, stride, rng);
}

struct Shape {
  int64_t n_in, n_out, n_tokens;
};

// Each SIMD level the machine has (AVX2 and AVX-512 VNNI have their own kernels).
class IQ4XSGemmLevels : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    before_ = active_cpu_level();
    if (set_cpu_level(GetParam()) != GetParam()) GTEST_SKIP() << "the machine lacks " << cpu_level_name(GetParam());
    if (!iq4_xs_gemm_available()) GTEST_SKIP() << "no blocked iq4_xs kernel at " << cpu_level_name(GetParam());
  }
  void TearDown() override { set_cpu_level(before_); }
  CpuLevel before_ = CpuLevel::Scalar;
};

INSTANTIATE_TEST_SUITE_P(Levels, IQ4XSGemmLevels, ::testing::Values(CpuLevel::Avx2, CpuLevel::Avx512),
                         [](const ::testing::TestParamInfo<CpuLevel>& info) {
                           return std::string(cpu_level_name(info.param));
                         });

// Against the per-dot kernel of the level under test (the path matmul took before the blocked
// kernels; quant_test holds every level to the scalar bits).
TEST_P(IQ4XSGemmLevels, EqualsPerDotBitForBit) {
  const VecDotFn dot = vec_dot_fn(GgmlType::IQ4_XS, GetParam());
  const Shape shapes[] = {{256, 1, 2},  {256, 5, 3},    {512, 7, 9},   {1024, 13, 17}, {768, 66, 5},
                          {2560, 9, 8}, {3072, 96, 11}, {256, 3, 1},   {512, 10, 13},  {768, 23, 6},
                          {1024, 130, 4}, {512, 45, 509}};
  std::mt19937 rng(17);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const Shape& s : shapes) {
      const QuantRows w = make_weights(s.n_in, s.n_out, 10, rng);
      const std::vector<float> x = make_activations(s.n_in, s.n_tokens, s.n_in, rng);
      const size_t act_stride = ggml_row_size(GgmlType::Q8_K, s.n_in);
      std::vector<uint8_t> act(act_stride * s.n_tokens);
      for (int64_t t = 0; t < s.n_tokens; ++t)
        quantize_activation_row(GgmlType::Q8_K, x.data() + t * s.n_in, act.data() + t * act_stride, s.n_in);
      const int64_t y_stride = s.n_out + 2;
      std::vector<float> y(s.n_tokens * y_stride, -7.f);
      iq4_xs_gemm(w.bytes.data(), w.stride, s.n_out, s.n_in, act.data(), act_stride, s.n_tokens, y.data(), y_stride,
                pool);
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

TEST_P(IQ4XSGemmLevels, MatmulBatchEqualsOneTokenAtATime) {
  std::mt19937 rng(23);
  ThreadPool pool(2);
  const int64_t n_in = 1280, n_out = 37, n_tokens = 7, x_stride = n_in + 3, y_stride = n_out + 1;
  const QuantRows w = make_weights(n_in, n_out, 0, rng);
  const WeightMatrix wm{GgmlType::IQ4_XS, n_in, n_out, w.bytes.data(), w.stride};
  const std::vector<float> x = make_activations(n_in, n_tokens, x_stride, rng);
  test::expect_batch_equals_one_token_at_a_time(wm, x, n_tokens, x_stride, y_stride, pool);
}

// Single-thread throughput of the blocked kernel against the per-dot loop it replaces, 512 tokens,
// thread CPU time. Run with --gtest_also_run_disabled_tests.
TEST_P(IQ4XSGemmLevels, DISABLED_ThroughputReport) {
  ThreadPool one_thread(1);
  std::mt19937 rng(5);
  const VecDotFn dot = vec_dot_fn(GgmlType::IQ4_XS);
  for (const auto& shape : test::kQwen3SmallShapes) {
    const int64_t n_in = shape[0], n_out = shape[1];
    for (int64_t n_tokens : {int64_t{512}, int64_t{7}}) {
      const QuantRows w = make_weights(n_in, n_out, 0, rng);
      const std::vector<float> x = make_activations(n_in, n_tokens, n_in, rng);
      const size_t act_stride = ggml_row_size(GgmlType::Q8_K, n_in);
      std::vector<uint8_t> act(act_stride * n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t)
        quantize_activation_row(GgmlType::Q8_K, x.data() + t * n_in, act.data() + t * act_stride, n_in);
      std::vector<float> y(n_tokens * n_out);
      const double blocked = test::best_thread_seconds(3, [&] {
        iq4_xs_gemm(w.bytes.data(), w.stride, n_out, n_in, act.data(), act_stride, n_tokens, y.data(), n_out, one_thread);
      });
      const double per_dot = test::best_thread_seconds(n_tokens > 64 ? 1 : 3, [&] {
        for (int64_t r = 0; r < n_out; ++r)
          for (int64_t t = 0; t < n_tokens; ++t) y[t * n_out + r] = dot(n_in, w.row(r), act.data() + t * act_stride);
      });
      std::printf("iq4_xs [%lld x %lld] x %lld tokens: blocked %.2f ms (%.1f GMAC/s), per-dot %.2f ms: %.2fx\n",
                  static_cast<long long>(n_in), static_cast<long long>(n_out), static_cast<long long>(n_tokens),
                  blocked * 1e3, 1e-9 * n_in * n_out * n_tokens / blocked, per_dot * 1e3, per_dot / blocked);
    }
  }
}

}  // namespace
}  // namespace agentkv
