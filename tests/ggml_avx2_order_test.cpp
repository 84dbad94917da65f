// The element-wise float orders that differ between llama.cpp's AVX-512 and AVX2 x86 builds, at
// the CPU levels that follow the AVX2 build (AVX2 and scalar): ggml_v_expf's AVX2 form (its own
// rounding: the polynomial without the 1, then one fused k * j + k), the 8-element vector groups
// of ggml_vec_swiglu_f32 / ggml_vec_silu_f32 / ggml_vec_soft_max_f32, and ggml_ssm_conv's taps
// summed as rounded products (the AVX2 reference build is compiled with GCC's Zen tuning, which
// leaves loop-carried multiply-add chains unfused). Each kernel is compared bit for bit with a
// scalar model written out here; the AVX-512 level's forms are covered by the fidelity tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/delta_net.h"
#include "kernels/dispatch.h"
#include "kernels/ggml_expf-inl.h"
#include "kernels/moe_router.h"
#include "kernels/ops.h"
#include "kernels/threadpool.h"

namespace agentkv {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The AVX2 build's ggml_v_expf step by step: n = round(x / ln 2) by the 1.5 * 2^23 trick, the
// reduced argument in two fused steps, the polynomial without its constant term, and k = 2^n from
// z's low bits; outside |n| <= 126 the two-factor scale, beyond 192 the square of the first.
float expf_avx2_model(float x) {
  const float z = std::fma(x, 0x1.715476p+0f, 0x1.8p23f);
  const float n = z - 0x1.8p23f;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = bits(z) << 23;
  float k, s1, s2;
  const uint32_t kb = e + 0x3f800000u;
  std::memcpy(&k, &kb, 4);
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(k, j, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const uint32_t s1b = g + 0x7f000000u, s2b = e - g;
  std::memcpy(&s1, &s1b, 4);
  std::memcpy(&s2, &s2b, 4);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

class GgmlAvx2Order : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    if (detected_cpu_level() < GetParam()) GTEST_SKIP() << "the CPU has no " << cpu_level_name(GetParam()) << " level";
    set_cpu_level(GetParam());
    ASSERT_EQ(ggml_build_lanes(), 8);
  }
  void TearDown() override { set_cpu_level(before_); }
  const CpuLevel before_ = active_cpu_level();
};

// Inputs that reach every branch: ordinary values, the edges of |n| <= 126 and <= 192, huge,
// infinite and NaN inputs.
std::vector<float> expf_inputs() {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 87.0f, 88.0f, 88.7f, 89.0f, -87.0f, -87.4f, -88.0f, -100.0f,
                          -103.0f, -104.0f, 120.0f, 133.0f, 134.0f, -133.0f, -134.0f, -200.0f, 1e10f, -1e10f,
                          INFINITY, -INFINITY};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::uniform_real_distribution<float> wide(-140.0f, 140.0f);
  for (int i = 0; i < 4000; ++i) x.push_back(i % 2 ? nd(rng) : wide(rng));
  return x;
}

TEST(GgmlExpfAvx2, LaneFormFollowsTheIntrinsics) {
  for (float x : expf_inputs()) {
    ASSERT_EQ(bits(ggml_math::GgmlExpLaneAvx2(x)), bits(expf_avx2_model(x))) << "x = " << x;
  }
  EXPECT_TRUE(std::isnan(ggml_math::GgmlExpLaneAvx2(NAN)));
  EXPECT_EQ(ggml_math::GgmlExpLaneAvx2(-INFINITY), 0.0f);
  EXPECT_EQ(ggml_math::GgmlExpLaneAvx2(INFINITY), INFINITY);
}

// ggml_vec_swiglu_f32, AVX2 build: groups of 8 take x / (1 + e^-x) with its vector expf, times u;
// the rest x / (1 + expf(-x)) * u. Row lengths around the group width, and the in-range /
// out-of-range mix inside one group (the vector kernel then finishes lanes by the scalar form).
TEST_P(GgmlAvx2Order, SwigluTakesGroupsOfEight) {
  const std::vector<float> pool = expf_inputs();
  for (int64_t n : {1, 7, 8, 9, 16, 31, 64, 100, 128, 1000}) {
    std::vector<float> g(n), u(n), y(n);
    for (int64_t i = 0; i < n; ++i) {
      const float v = pool[static_cast<size_t>(i * 7 + n) % pool.size()];
      g[i] = std::isinf(v) || std::fabs(v) > 1e9f ? 3.0f : v;  // keep the model finite
      u[i] = 0.5f + 0.01f * static_cast<float>(i % 13);
    }
    swiglu(g.data(), u.data(), y.data(), n);
    const int64_t n_vec = n - n % 8;
    for (int64_t i = 0; i < n; ++i) {
      const float e = i < n_vec ? expf_avx2_model(0.0f - g[i]) : std::exp(-g[i]);
      const float want = g[i] / (1.0f + e) * u[i];
      ASSERT_EQ(bits(y[i]), bits(want)) << "n=" << n << " i=" << i << " g=" << g[i];
    }
  }
}

// ggml_vec_soft_max_f32 on the AVX2 build, as the MoE router's softmax over the experts: groups of
// 8 exponentials by the vector expf, each group's sum (halves, then (0 + 2) + (1 + 3)) added in
// double, the rest by expf; then 1 / sum in double, applied in float.
TEST_P(GgmlAvx2Order, RouterSoftmaxTakesGroupsOfEight) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int n_expert : {4, 8, 12, 32, 37}) {
    std::vector<float> logits(n_expert);
    for (float& v : logits) v = nd(rng);
    MoeRouteParams p;
    p.n_expert = n_expert;
    p.n_used = 1;
    p.normalize = false;
    int32_t id = -1;
    float w = 0.0f;
    moe_route_token(logits.data(), p, &id, &w);
    float max = -INFINITY;
    for (float v : logits) max = std::fmax(max, v);
    std::vector<float> e(n_expert);
    double sum = 0.0;
    int i = 0;
    for (; i + 8 <= n_expert; i += 8) {
      float h[4];
      for (int l = 0; l < 8; ++l) e[i + l] = expf_avx2_model(logits[i + l] - max);
      for (int l = 0; l < 4; ++l) h[l] = e[i + l + 4] + e[i + l];
      sum += double((h[0] + h[2]) + (h[1] + h[3]));
    }
    for (; i < n_expert; ++i) {
      e[i] = std::exp(logits[i] - max);
      sum += double(e[i]);
    }
    const float inv = float(1.0 / sum);
    int best = 0;
    for (int k = 1; k < n_expert; ++k)
      if (logits[k] > logits[best]) best = k;
    ASSERT_EQ(id, best);
    ASSERT_EQ(bits(w), bits(e[best] * inv)) << "n_expert=" << n_expert;
  }
}

// ggml_ssm_conv + ggml_silu on the AVX2 build: per channel the taps oldest first, each product
// rounded before it is added (no fused chain), then silu in groups of 8 channels by the vector
// expf, the channels after the last whole group by expf. Prefill-sized and decode-sized calls
// (the kernel lays the weights out differently for them).
TEST_P(GgmlAvx2Order, ConvSumsRoundedProductsThenSiluInGroupsOfEight) {
  ThreadPool pool(2);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t channels : {8, 20, 128}) {
    for (int64_t n_tokens : {1, 2, 5, 17}) {
      const int d_conv = 4;
      std::vector<float> x(n_tokens * channels), w(channels * d_conv), state(channels * (d_conv - 1));
      for (float& v : x) v = nd(rng);
      for (float& v : w) v = nd(rng);
      for (float& v : state) v = nd(rng);
      const std::vector<float> state0 = state;
      std::vector<float> out(n_tokens * channels);
      causal_conv1d_silu(x.data(), channels, n_tokens, channels, w.data(), d_conv, state.data(), out.data(),
                         channels, pool);
      const int64_t n_vec = channels - channels % 8;
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t c = 0; c < channels; ++c) {
          float acc = 0.0f;
          for (int i = 0; i < d_conv; ++i) {
            const int64_t p = t + i;  // window row: state rows first, then the tokens
            const float v = p < d_conv - 1 ? state0[c * (d_conv - 1) + p] : x[(p - (d_conv - 1)) * channels + c];
            volatile float prod = v * w[c * d_conv + i];
            acc += prod;
          }
          const float e = c < n_vec ? expf_avx2_model(0.0f - acc) : std::exp(-acc);
          const float want = acc / (1.0f + e);
          ASSERT_EQ(bits(out[t * channels + c]), bits(want))
              << "channels=" << channels << " tokens=" << n_tokens << " t=" << t << " c=" << c;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, GgmlAvx2Order, ::testing::Values(CpuLevel::Avx2, CpuLevel::Scalar),
                         [](const ::testing::TestParamInfo<CpuLevel>& info) {
                           return std::string(cpu_level_name(info.param));
                         });

}  // namespace
}  // namespace agentkv
