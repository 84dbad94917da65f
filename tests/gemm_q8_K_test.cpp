// The prefill GEMMs over q8_K activations (q6_K, the i-quants) must return, for every (row, token),
// exactly the bits of the type's dot product (which every CPU level shares with the scalar kernel
// and llama.cpp's x86 order, see quant_test / iq_quant_test), for odd token counts, row counts off
// the tile, several superblock steps and weight chunks, and padded strides; and matmul() must give
// a token in a batch what it gets alone.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/gemm_iq.h"
#include "kernels/gemm_q6_K.h"
#include "kernels/matmul.h"
#include "kernels/threadpool.h"
#include "quant_gemm_test_util.h"

namespace agentkv {
namespace {

struct Kernel {
  GgmlType type;
  test::Q8KGemmFn gemm;
  bool (*available)();
};
template <GgmlType kType>
void iq_gemm_of(const uint8_t* w, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act, size_t act_stride,
                int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  iq_gemm(kType, w, w_stride, n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool);
}
template <GgmlType kType>
bool iq_available() {
  return iq_gemm_available(kType);
}
const Kernel kKernels[] = {{GgmlType::Q6_K, q6_K_gemm, q6_K_gemm_available},
                           {GgmlType::IQ4_XS, iq_gemm_of<GgmlType::IQ4_XS>, iq_available<GgmlType::IQ4_XS>},
                           {GgmlType::IQ3_S, iq_gemm_of<GgmlType::IQ3_S>, iq_available<GgmlType::IQ3_S>},
                           {GgmlType::IQ3_XXS, iq_gemm_of<GgmlType::IQ3_XXS>, iq_available<GgmlType::IQ3_XXS>},
                           {GgmlType::IQ2_S, iq_gemm_of<GgmlType::IQ2_S>, iq_available<GgmlType::IQ2_S>},
                           {GgmlType::IQ2_XS, iq_gemm_of<GgmlType::IQ2_XS>, iq_available<GgmlType::IQ2_XS>},
                           {GgmlType::IQ2_XXS, iq_gemm_of<GgmlType::IQ2_XXS>, iq_available<GgmlType::IQ2_XXS>}};

// Each weight type at each SIMD level the machine has (AVX2 and AVX-512 VNNI have their own kernels).
class Q8KGemm : public ::testing::TestWithParam<std::tuple<int, CpuLevel>> {
 protected:
  void SetUp() override {
    before_ = active_cpu_level();
    const CpuLevel level = std::get<1>(GetParam());
    if (set_cpu_level(level) != level) GTEST_SKIP() << "the machine lacks " << cpu_level_name(level);
    if (!kernel().available()) GTEST_SKIP() << "no blocked kernel at " << cpu_level_name(level);
  }
  void TearDown() override { set_cpu_level(before_); }
  const Kernel& kernel() const { return kKernels[std::get<0>(GetParam())]; }
  CpuLevel before_ = CpuLevel::Scalar;
};

INSTANTIATE_TEST_SUITE_P(TypesAndLevels, Q8KGemm,
                         ::testing::Combine(::testing::Range(0, 7), ::testing::Values(CpuLevel::Avx2, CpuLevel::Avx512)),
                         [](const ::testing::TestParamInfo<std::tuple<int, CpuLevel>>& info) {
                           return std::string(ggml_type_name(kKernels[std::get<0>(info.param)].type)) + "_" +
                                  std::string(cpu_level_name(std::get<1>(info.param)));
                         });

// Against the per-dot kernel of the level under test (the path matmul took before the blocked kernels).
TEST_P(Q8KGemm, EqualsPerDotBitForBit) { test::expect_q8_K_gemm_equals_per_dot(kernel().type, kernel().gemm); }

TEST_P(Q8KGemm, MatmulBatchEqualsOneTokenAtATime) {
  std::mt19937 rng(23);
  ThreadPool pool(2);
  const int64_t n_in = 1280, n_out = 37, n_tokens = 7, x_stride = n_in + 3, y_stride = n_out + 1;
  const test::QuantRows w = test::make_k_quant_weights(kernel().type, n_in, n_out, 0, rng);
  const WeightMatrix wm{kernel().type, n_in, n_out, w.bytes.data(), w.stride};
  const std::vector<float> x = test::make_k_quant_activations(n_in, n_tokens, x_stride, rng);
  test::expect_batch_equals_one_token_at_a_time(wm, x, n_tokens, x_stride, y_stride, pool);
}

// Single-thread throughput against the per-dot loop. Run with --gtest_also_run_disabled_tests.
TEST_P(Q8KGemm, DISABLED_ThroughputReport) { test::report_q8_K_gemm_throughput(kernel().type, kernel().gemm); }

}  // namespace
}  // namespace agentkv
