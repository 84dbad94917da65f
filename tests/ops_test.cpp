// Element-wise ops against double-precision formulas, and ggml's float recurrence for RoPE angles.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include "hwy/targets.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace agentkv {
namespace {

std::vector<float> random_row(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(RmsNorm, MatchesDoubleFormulaWithAndWithoutWeight) {
  for (int64_t n : {1, 7, 16, 64, 129, 1000, 4096}) {
    const auto x = random_row(n, static_cast<uint32_t>(n), 3.0f);
    const auto w = random_row(n, static_cast<uint32_t>(n + 1));
    const float eps = 1e-6f;
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv_rms = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);

    std::vector<float> y(static_cast<size_t>(n)), yw(static_cast<size_t>(n));
    rms_norm(x.data(), nullptr, y.data(), n, eps);
    rms_norm(x.data(), w.data(), yw.data(), n, eps);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = x[i] * inv_rms;
      EXPECT_NEAR(y[i], ref, 1e-6 * std::abs(ref) + 1e-7) << "n=" << n << " i=" << i;
      EXPECT_NEAR(yw[i], ref * w[i], 1e-6 * std::abs(ref * w[i]) + 1e-7);
    }
  }
}

TEST(RmsNorm, InPlaceAndEpsDominatesTinyInput) {
  std::vector<float> x = {1e-8f, -1e-8f, 2e-8f, 0.0f};
  rms_norm(x.data(), nullptr, x.data(), 4, 1e-5f);
  // mean(x^2) ~ 1.5e-16 << eps, so the scale is ~ 1/sqrt(1e-5).
  EXPECT_NEAR(x[0], 1e-8 / std::sqrt(1e-5), 1e-9);
  EXPECT_EQ(x[3], 0.0f);
}

// ggml's rope cache: theta = pos, multiplied by powf(base, -2/n_rot) after each pair, all float.
std::vector<float> ggml_style_angles(float pos, int64_t n_rot, float base) {
  std::vector<float> angles;
  const float theta_scale = powf(base, -2.0f / static_cast<float>(n_rot));
  float theta = pos;
  for (int64_t i = 0; i < n_rot; i += 2) {
    angles.push_back(theta);
    theta *= theta_scale;
  }
  return angles;
}

TEST(RopeNeox, SmallPositionsMatchExactRotation) {
  const int64_t head_dim = 64;
  for (int64_t n_rot : {64, 32, 16}) {
    for (float pos : {0.0f, 1.0f, 5.0f, 37.0f}) {
      auto head = random_row(head_dim, 11);
      const auto orig = head;
      rope_neox(head.data(), head_dim, n_rot, pos, 10000.0f, 1.0f);
      const int64_t half = n_rot / 2;
      for (int64_t i = 0; i < half; ++i) {
        const double theta = pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / n_rot);
        const double x0 = orig[i], x1 = orig[i + half];
        EXPECT_NEAR(head[i], x0 * std::cos(theta) - x1 * std::sin(theta), 2e-5) << i;
        EXPECT_NEAR(head[i + half], x0 * std::sin(theta) + x1 * std::cos(theta), 2e-5) << i;
      }
      for (int64_t i = n_rot; i < head_dim; ++i) EXPECT_EQ(head[i], orig[i]) << "dim beyond n_rot";
    }
  }
}

TEST(RopeNeox, LargePositionsFollowGgmlFloatAngles) {
  // At 32k the float recurrence differs from exact angles by far more than float rounding of the
  // result; llama.cpp uses the recurrence, so we must too.
  const int64_t n_rot = 128;
  const float base = 1000000.0f;
  const float pos = 32001.0f;
  const auto angles = ggml_style_angles(pos, n_rot, base);
  auto head = random_row(n_rot, 5);
  const auto orig = head;
  rope_neox(head.data(), n_rot, n_rot, pos, base, 1.0f);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const float c = cosf(angles[i]), s = sinf(angles[i]);
    // The rotation as ggml-cpu's compiled rotate_pairs: one fused multiply-add each.
    EXPECT_EQ(head[i], std::fma(orig[i], c, -(orig[i + n_rot / 2] * s))) << i;
    EXPECT_EQ(head[i + n_rot / 2], std::fma(orig[i], s, orig[i + n_rot / 2] * c)) << i;
  }
}

TEST(RopeNeox, FreqScaleScalesAnglesAndRotationPreservesNorm) {
  const int64_t n = 32;
  auto a = random_row(n, 3);
  auto b = a;
  rope_neox(a.data(), n, n, 10.0f, 10000.0f, 0.5f);
  rope_neox(b.data(), n, n, 5.0f, 10000.0f, 1.0f);
  double na = 0, nb = 0, n0 = 0;
  const auto orig = random_row(n, 3);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5);
    na += a[i] * a[i];
    nb += b[i] * b[i];
    n0 += orig[i] * orig[i];
  }
  EXPECT_NEAR(na, n0, 1e-4 * n0);
}

TEST(RopeNeox, ShiftByDeltaComposes) {
  // Context shift rotates stored keys by a position delta: rope(p) then rope(d) ~ rope(p + d).
  const int64_t n = 64;
  auto shifted = random_row(n, 9);
  auto direct = shifted;
  rope_neox(shifted.data(), n, n, 100.0f, 10000.0f, 1.0f);
  rope_neox(shifted.data(), n, n, -40.0f, 10000.0f, 1.0f);
  rope_neox(direct.data(), n, n, 60.0f, 10000.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(shifted[i], direct[i], 1e-4);
}

TEST(Activations, ScalarAndRowFormsMatchDouble) {
  std::vector<float> x = random_row(203, 21, 6.0f);
  x.push_back(-90.0f);
  x.push_back(90.0f);
  x.push_back(0.0f);
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> up = random_row(n, 22);
  std::vector<float> s(x.size()), g(x.size()), sw(x.size());
  silu_row(x.data(), s.data(), n);
  sigmoid_row(x.data(), g.data(), n);
  swiglu(x.data(), up.data(), sw.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double xd = x[i];
    const double sig = 1.0 / (1.0 + std::exp(-xd));
    EXPECT_NEAR(sigmoid(x[i]), sig, 1e-6);
    EXPECT_NEAR(g[i], sig, 1e-6);
    EXPECT_NEAR(silu(x[i]), xd * sig, 1e-6 * std::max(1.0, std::abs(xd)));
    EXPECT_NEAR(s[i], xd * sig, 1e-6 * std::max(1.0, std::abs(xd)));
    EXPECT_NEAR(sw[i], xd * sig * up[i], 1e-5 * std::max(1.0, std::abs(xd * up[i])));
  }
  EXPECT_NEAR(softplus(0.0f), std::log(2.0), 1e-7);
  EXPECT_NEAR(softplus(-5.0f), std::log1p(std::exp(-5.0)), 1e-7);
  EXPECT_EQ(softplus(25.0f), 25.0f);  // ggml's cut-off at 20
  // swiglu in place over the gate row
  std::vector<float> inplace = x;
  swiglu(inplace.data(), up.data(), inplace.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(inplace[i], sw[i]);
}

TEST(Softmax, MatchesDoubleAndReturnsLogSumExp) {
  for (int64_t n : {1, 5, 16, 100, 151936}) {
    auto x = random_row(n, static_cast<uint32_t>(n), 4.0f);
    if (n > 3) x[2] = -INFINITY;
    const auto orig = x;
    double mx = -INFINITY;
    for (float v : orig) mx = std::max(mx, static_cast<double>(v));
    double sum = 0;
    for (float v : orig) sum += std::exp(v - mx);
    const double lse = mx + std::log(sum);
    EXPECT_NEAR(log_sum_exp(orig.data(), n), lse, 1e-5 * std::max(1.0, std::abs(lse)));
    const float got = softmax(x.data(), n);
    EXPECT_NEAR(got, lse, 1e-5 * std::max(1.0, std::abs(lse)));
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double ref = std::exp(orig[i] - lse);
      EXPECT_NEAR(x[i], ref, 1e-6 * ref + 1e-12) << i;
      total += x[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-4);
  }
}

TEST(Softmax, AllMaskedRowGivesZerosAndMinusInfinity) {
  std::vector<float> x(8, -INFINITY);
  EXPECT_EQ(log_sum_exp(x.data(), 8), -INFINITY);
  EXPECT_EQ(softmax(x.data(), 8), -INFINITY);
  for (float v : x) EXPECT_EQ(v, 0.0f);
}

TEST(TopKLogprobs, SortedDescendingWithTiesByLowerIdAndNormalised) {
  const int64_t n = 151936;
  auto logits = random_row(n, 77, 2.0f);
  logits[500] = 9.0f;
  logits[100] = 9.0f;  // tie: 100 must come before 500
  logits[7] = 10.0f;
  double mx = 10.0, sum = 0;
  for (float v : logits) sum += std::exp(v - mx);
  const double lse = mx + std::log(sum);

  for (int k : {1, 3, 10, 100}) {
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> lp(static_cast<size_t>(k));
    ASSERT_EQ(top_k_logprobs(logits.data(), n, k, ids.data(), lp.data()), k);
    EXPECT_EQ(ids[0], 7);
    if (k >= 3) {
      EXPECT_EQ(ids[1], 100);
      EXPECT_EQ(ids[2], 500);
    }
    for (int i = 0; i < k; ++i) {
      EXPECT_NEAR(lp[i], logits[ids[i]] - lse, 1e-5);
      if (i > 0) {
        EXPECT_LE(lp[i], lp[i - 1]);
      }
    }
    // nothing outside the list beats its last entry
    int64_t strictly_better = 0, at_least_as_good = 0;
    for (int64_t t = 0; t < n; ++t) {
      strictly_better += logits[t] > logits[ids[k - 1]];
      at_least_as_good += logits[t] >= logits[ids[k - 1]];
    }
    EXPECT_LE(strictly_better, k - 1) << "k=" << k;
    EXPECT_GE(at_least_as_good, k) << "k=" << k;
  }
  std::vector<int32_t> ids(5);
  std::vector<float> lp(5);
  EXPECT_EQ(top_k_logprobs(logits.data(), 3, 5, ids.data(), lp.data()), 3);
  EXPECT_EQ(top_k_logprobs(logits.data(), n, 0, ids.data(), lp.data()), 0);
}

TEST(Ops, EveryCompiledCpuTargetMatchesDouble) {
  // Row kernels are dispatched at run time (AVX-512, AVX2, SSE4, ..., scalar): each must hold.
  const int64_t n = 1003;  // odd length: vector bodies and scalar tails
  const auto x = random_row(n, 101, 3.0f);
  const auto up = random_row(n, 102);
  double ss = 0, mx = -INFINITY;
  for (float v : x) {
    ss += static_cast<double>(v) * v;
    mx = std::max(mx, static_cast<double>(v));
  }
  double sum = 0;
  for (float v : x) sum += std::exp(v - mx);
  const double lse = mx + std::log(sum);
  const double inv_rms = 1.0 / std::sqrt(ss / n + 1e-6);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::vector<float> y(static_cast<size_t>(n)), sw(y.size()), sm = x;
    rms_norm(x.data(), nullptr, y.data(), n, 1e-6f);
    swiglu(x.data(), up.data(), sw.data(), n);
    EXPECT_NEAR(softmax(sm.data(), n), lse, 1e-5 * std::abs(lse));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(y[i], x[i] * inv_rms, 1e-6 * std::abs(x[i] * inv_rms) + 1e-7);
      const double silu = x[i] / (1.0 + std::exp(-static_cast<double>(x[i])));
      ASSERT_NEAR(sw[i], silu * up[i], 1e-5 * std::max(1.0, std::abs(silu * up[i])));
      ASSERT_NEAR(sm[i], std::exp(x[i] - lse), 1e-6 * std::exp(x[i] - lse) + 1e-12);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// gpt-oss's YaRN: 64 rotated dims, base 150000, factor 32 over an original context of 4096 and
// llama.cpp's defaults beta_fast 32, beta_slow 1, ext_factor 1. The expected table is ggml's
// rope_yarn written out here in its float order (ggml_rope_yarn_corr_dims without fused
// operations, as ggml-base is built; the mixed angle and the magnitude factor as the fused
// multiply-adds of ggml-cpu's -march=native code).
TEST(RopeYarn, CorrectionDimsOfGptOss) {
  float dims[2];
  rope_yarn_corr_dims(64, 4096, 150000.0f, 32.0f, 1.0f, dims);
  // 64 ln(4096 / 64pi) / 2 ln(150000) = 8.09..., 64 ln(4096 / 2pi) / 2 ln(150000) = 17.39...
  EXPECT_EQ(dims[0], 8.0f);
  EXPECT_EQ(dims[1], 18.0f);
  rope_yarn_corr_dims(8, 1000000000, 10000.0f, 32.0f, 1.0f, dims);  // 6.69..., 8.19... clamped to n_rot - 1
  EXPECT_EQ(dims[0], 6.0f);
  EXPECT_EQ(dims[1], 7.0f);
  rope_yarn_corr_dims(8, 64, 10000.0f, 32.0f, 1.0f, dims);  // -0.49... clamped to 0, 1.00...
  EXPECT_EQ(dims[0], 0.0f);
  EXPECT_EQ(dims[1], 2.0f);
}

TEST(RopeYarn, CacheEqualsGgmlRopeYarn) {
  const int64_t n_rot = 64;
  const float base = 150000.0f;
  const float freq_scale = 1.0f / 32.0f;
  RopeYarn yarn;
  yarn.ext_factor = 1.0f;
  // llama_context's attn_factor for a YaRN model: get_mscale(32, 1) / (1 + 0.1 ln 32).
  const float get_mscale = 0.1f * 1.0f * logf(32.0f) + 1.0f;
  yarn.attn_factor = get_mscale * (1.0f / (1.0f + 0.1f * logf(32.0f)));
  rope_yarn_corr_dims(n_rot, 4096, base, 32.0f, 1.0f, yarn.corr_dims);
  const float low = yarn.corr_dims[0], high = yarn.corr_dims[1];
  for (float pos : {0.0f, 1.0f, 7.0f, 4095.0f, 70000.0f}) {
    std::vector<float> got(static_cast<size_t>(n_rot));
    rope_cache(pos, n_rot, base, freq_scale, nullptr, yarn, got.data());
    const float theta_scale = powf(base, -2.0f / 64.0f);
    const float mscale = yarn.attn_factor * fmaf(0.1f, logf(1.0f / freq_scale), 1.0f);
    float theta = pos;
    for (int64_t i0 = 0; i0 < n_rot; i0 += 2) {
      const float y = (static_cast<float>(static_cast<int>(i0) / 2) - low) / std::max(0.001f, high - low);
      const float ramp = 1.0f - std::min(1.0f, std::max(0.0f, y));
      const float ramp_mix = ramp * 1.0f;
      const float interp = freq_scale * theta;
      const float angle = fmaf(interp, 1.0f - ramp_mix, theta * ramp_mix);
      EXPECT_EQ(got[i0], cosf(angle) * mscale) << "pos " << pos << " pair " << i0 / 2;
      EXPECT_EQ(got[i0 + 1], sinf(angle) * mscale) << "pos " << pos << " pair " << i0 / 2;
      theta *= theta_scale;
    }
    // The low pairs extrapolate (the plain angle), the high ones interpolate (angle / 32).
    if (pos == 7.0f) {
      EXPECT_NEAR(std::atan2(got[1], got[0]), 7.0 - 2 * M_PI, 1e-5);  // pair 0: ramp 1
      const double last = 7.0 * std::pow(150000.0, -62.0 / 64.0) / 32.0;
      EXPECT_NEAR(std::atan2(got[63], got[62]), last, 1e-9);
    }
  }
  // ext_factor 0, attn_factor 1: the plain table.
  RopeYarn plain;
  std::vector<float> a(static_cast<size_t>(n_rot)), b(static_cast<size_t>(n_rot));
  rope_cache(123.0f, n_rot, base, freq_scale, nullptr, plain, a.data());
  rope_cache(123.0f, n_rot, base, freq_scale, nullptr, b.data());
  EXPECT_EQ(a, b);
}

TEST(SwigluOai, MatchesGgmlFormulaAndClamps) {
  std::vector<float> gate = random_row(301, 41, 6.0f), up = random_row(301, 42, 6.0f);
  gate.insert(gate.end(), {10.0f, -10.0f, 7.0f, 0.0f, -100.0f});
  up.insert(up.end(), {-9.0f, 9.0f, 7.5f, 3.0f, 1.0f});
  const int64_t n = static_cast<int64_t>(gate.size());
  std::vector<float> out(gate.size());
  swiglu_oai(gate.data(), up.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i] < 7.0f ? gate[i] : 7.0f;
    const float y = up[i] < -7.0f ? -7.0f : (up[i] > 7.0f ? 7.0f : up[i]);
    const float want = x / (1.0f + expf(1.702f * (-x))) * (y + 1.0f);
    EXPECT_EQ(out[i], want) << i;
    const double xd = std::min<double>(gate[i], 7.0), yd = std::clamp<double>(up[i], -7.0, 7.0);
    EXPECT_NEAR(out[i], xd / (1.0 + std::exp(-1.702 * xd)) * (yd + 1.0), 1e-5 * (1.0 + std::abs(out[i])));
  }
  EXPECT_NEAR(out[n - 5], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * -6.0, 1e-5);  // both clamped
  EXPECT_EQ(out[n - 2], 0.0f);
  // in place over the gate row
  std::vector<float> inplace(gate);
  swiglu_oai(inplace.data(), up.data(), inplace.data(), n);
  EXPECT_EQ(inplace, out);
}

}  // namespace
}  // namespace agentkv
