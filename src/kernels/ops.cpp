// Element-wise ops. Row loops are vectorised with Highway (dynamic dispatch: the widest vector
// unit of the running CPU is picked at run time); scalar formulas are ggml's.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/ops.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/ggml_expf-inl.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace agentkv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of x[i]*x[i]: each product rounded to float, then added in double (ggml_float), as
// ggml_compute_forward_rms_norm_f32 does. Lanes change only the order of the double additions.
double SumOfSquaresF64(const float* x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as doubles
  const int64_t step = static_cast<int64_t>(hn::Lanes(dd));
  auto acc0 = hn::Zero(dd);
  auto acc1 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 2 * step <= n; i += 2 * step) {
    const auto a = hn::LoadU(df, x + i);
    const auto b = hn::LoadU(df, x + i + step);
    acc0 = hn::Add(acc0, hn::PromoteTo(dd, hn::Mul(a, a)));
    acc1 = hn::Add(acc1, hn::PromoteTo(dd, hn::Mul(b, b)));
  }
  double sum = hn::GetLane(hn::SumOfLanes(dd, hn::Add(acc0, acc1)));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  return sum;
}

void ScaleRow(const float* x, float scale, const float* w, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, scale);
  int64_t i = 0;
  if (w) {
    for (; i + step <= n; i += step) {
      const auto normed = hn::Mul(hn::LoadU(d, x + i), vs);
      hn::StoreU(hn::Mul(normed, hn::LoadU(d, w + i)), d, y + i);
    }
    for (; i < n; ++i) {
      const float normed = x[i] * scale;
      y[i] = normed * w[i];
    }
  } else {
    for (; i + step <= n; i += step) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vs), d, y + i);
    for (; i < n; ++i) y[i] = x[i] * scale;
  }
}

// ggml_vec_swiglu_f32 as llama.cpp's x86 builds run it: whole groups of `width` elements (16 on
// the AVX-512 build, 8 on the AVX2 one) take ggml_v_silu (x / (1 + ggml_v_expf(-x)), in that
// build's expf form) times u, the elements after them x / (1 + expf(-x)) * u.
template <class D, bool kAvx2Form>
HWY_INLINE void SwigluGroups(D d, const float* gate, const float* up, float* out, int64_t n_vector) {
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  for (int64_t i = 0; i < n_vector; i += step) {
    const auto g = hn::LoadU(d, gate + i);
    const auto neg = hn::Sub(hn::Zero(d), g);
    const auto e = kAvx2Form ? GgmlExpVecAvx2(d, neg) : GgmlExpVec(d, neg);
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(d, up + i)), d, out + i);
  }
}

void SwigluRow(const float* gate, const float* up, float* out, int64_t n, int64_t width) {
  const int64_t n_vector = n - n % width;
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 8> d8;
  if (width == 16 && 16 % hn::Lanes(d) == 0) {
    SwigluGroups<decltype(d), false>(d, gate, up, out, n_vector);
  } else if (width == 8 && 8 % hn::Lanes(d8) == 0) {
    SwigluGroups<decltype(d8), true>(d8, gate, up, out, n_vector);
  } else {
    // no vector of a width dividing the group: lane by lane, the same arithmetic
    for (int64_t i = 0; i < n_vector; ++i) {
      const float e = width == 16 ? ggml_math::GgmlExpLane(0.0f - gate[i]) : ggml_math::GgmlExpLaneAvx2(0.0f - gate[i]);
      out[i] = gate[i] / (1.0f + e) * up[i];
    }
  }
  for (int64_t i = n_vector; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void SiluRow(const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    const auto v = hn::LoadU(d, x + i);
    hn::StoreU(hn::Div(v, hn::Add(one, hn::Exp(d, hn::Neg(v)))), d, y + i);
  }
  for (; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void SigmoidRow(const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    const auto v = hn::LoadU(d, x + i);
    hn::StoreU(hn::Div(one, hn::Add(one, hn::Exp(d, hn::Neg(v)))), d, y + i);
  }
  for (; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

float MaxOfRow(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  auto m = hn::Set(d, -INFINITY);
  int64_t i = 0;
  for (; i + step <= n; i += step) m = hn::Max(m, hn::LoadU(d, x + i));
  float best = hn::GetLane(hn::MaxOfLanes(d, m));
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

// sum(exp(x - max)) accumulated in double (ggml_vec_soft_max_f32); writes the exponentials to y
// when y != nullptr.
double ExpSumRow(const float* x, float max, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dh;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const int64_t half = static_cast<int64_t>(hn::Lanes(dd));
  const auto vmax = hn::Set(d, max);
  auto acc = hn::Zero(dd);
  HWY_ALIGN float tmp[hn::MaxLanes(d)];
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmax));
    if (y) hn::StoreU(e, d, y + i);
    hn::Store(e, d, tmp);
    for (int64_t j = 0; j < step; j += half) {
      acc = hn::Add(acc, hn::PromoteTo(dd, hn::LoadU(dh, tmp + j)));
    }
  }
  double sum = hn::GetLane(hn::SumOfLanes(dd, acc));
  for (; i < n; ++i) {
    const float e = std::exp(x[i] - max);
    if (y) y[i] = e;
    sum += e;
  }
  return sum;
}

}  // namespace HWY_NAMESPACE
}  // namespace agentkv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace agentkv {

HWY_EXPORT(SumOfSquaresF64);
HWY_EXPORT(ScaleRow);
HWY_EXPORT(SwigluRow);
HWY_EXPORT(SiluRow);
HWY_EXPORT(SigmoidRow);
HWY_EXPORT(MaxOfRow);
HWY_EXPORT(ExpSumRow);

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (n <= 0) return;
  const double sum = HWY_DYNAMIC_DISPATCH(SumOfSquaresF64)(x, n);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  HWY_DYNAMIC_DISPATCH(ScaleRow)(x, scale, w, y, n);
}

void rope_yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                         float dims[2]) {
  // ggml_rope_yarn_corr_dim(n_dims, n_ctx_orig, beta, base), in its float order.
  const auto corr_dim = [&](float beta) {
    return static_cast<float>(n_rot) *
           std::log(static_cast<float>(n_ctx_orig) / (beta * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(freq_base));
  };
  const float start = std::floor(corr_dim(beta_fast));
  const float end = std::ceil(corr_dim(beta_slow));
  dims[0] = std::max(0.0f, start);
  dims[1] = std::min(static_cast<float>(n_rot - 1), end);
}

void rope_cache(float pos, int64_t n_rot, float freq_base, float freq_scale, const float* freq_factors,
                const RopeYarn& yarn, float* cos_sin) {
  if (yarn.ext_factor == 0.0f && yarn.attn_factor == 1.0f) {
    rope_cache(pos, n_rot, freq_base, freq_scale, freq_factors, cos_sin);
    return;
  }
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  float mscale = yarn.attn_factor;
  if (yarn.ext_factor != 0.0f) mscale *= std::fma(0.1f, std::log(1.0f / freq_scale), 1.0f);
  float theta = pos;
  for (int64_t i = 0; i < n_rot; i += 2) {
    const float theta_extrap = freq_factors ? theta / freq_factors[i / 2] : theta;
    const float theta_interp = freq_scale * theta_extrap;
    float angle = theta_interp;
    if (yarn.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i / 2) - yarn.corr_dims[0]) /
                      std::max(0.001f, yarn.corr_dims[1] - yarn.corr_dims[0]);
      const float ramp_mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * yarn.ext_factor;
      angle = std::fma(theta_interp, 1.0f - ramp_mix, theta_extrap * ramp_mix);
    }
    cos_sin[i] = std::cos(angle) * mscale;
    cos_sin[i + 1] = std::sin(angle) * mscale;
    theta *= theta_scale;
  }
}

void rope_cache(float pos, int64_t n_rot, float freq_base, float freq_scale, const float* freq_factors,
                float* cos_sin) {
  // Float arithmetic in ggml's order: theta starts at pos and is multiplied by theta_scale once
  // per pair, so large positions carry the same rounding as llama.cpp's rope cache.
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  float theta = pos;
  for (int64_t i = 0; i < n_rot; i += 2) {
    const float angle = freq_scale * (freq_factors ? theta / freq_factors[i / 2] : theta);
    cos_sin[i] = std::cos(angle);
    cos_sin[i + 1] = std::sin(angle);
    theta *= theta_scale;
  }
}

void rope_cache_imrope(const int32_t thw[3], int64_t n_rot, const int32_t sections[4], float freq_base,
                       float freq_scale, const float* freq_factors, const RopeYarn& yarn, float* cos_sin) {
  if (thw[0] == thw[1] && thw[1] == thw[2]) {
    rope_cache(static_cast<float>(thw[0]), n_rot, freq_base, freq_scale, freq_factors, yarn, cos_sin);
    return;
  }
  const int32_t sect_dims = sections[0] + sections[1] + sections[2] + sections[3];
  thread_local std::vector<float> axis[4];
  const int32_t axis_pos[4] = {thw[0], thw[1], thw[2], 0};
  for (int a = 0; a < 4; ++a) {
    axis[a].resize(static_cast<size_t>(n_rot));
    rope_cache(static_cast<float>(axis_pos[a]), n_rot, freq_base, freq_scale, freq_factors, yarn, axis[a].data());
  }
  for (int64_t k = 0; k < n_rot / 2; ++k) {
    const int32_t s = sect_dims > 0 ? static_cast<int32_t>(k % sect_dims) : 0;
    int a = 3;
    if (s % 3 == 1 && s < 3 * sections[1]) a = 1;
    else if (s % 3 == 2 && s < 3 * sections[2]) a = 2;
    else if (s % 3 == 0 && s < 3 * sections[0]) a = 0;
    cos_sin[2 * k] = axis[a][2 * k];
    cos_sin[2 * k + 1] = axis[a][2 * k + 1];
  }
}

// ggml-cpu's rotate_pairs as GCC contracts it in the -march builds x86 llama.cpp ships (both
// levels have FMA): x0 c - x1 s and x0 s + x1 c each one fused multiply-add. std::fma rounds the
// same with or without the instruction; built for the baseline alone it is a libm call per
// element (the rotation took 2.5 % of a qwen3-0.6b prefill's samples, single-threaded), so an FMA
// clone is chosen at load where the CPU has it.
#define AGENTKV_FMA_CLONES __attribute__((target_clones("fma", "default")))
AGENTKV_FMA_CLONES void rope_neox_apply(float* head, int64_t n_rot, const float* cos_sin) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i];
    const float s = cos_sin[2 * i + 1];
    const float x0 = head[i];
    const float x1 = head[i + half];
    head[i] = std::fma(x0, c, -(x1 * s));
    head[i + half] = std::fma(x0, s, x1 * c);
  }
}

AGENTKV_FMA_CLONES void rope_norm_apply(float* head, int64_t n_rot, const float* cos_sin) {
  for (int64_t i = 0; i < n_rot; i += 2) {
    const float c = cos_sin[i];
    const float s = cos_sin[i + 1];
    const float x0 = head[i];
    const float x1 = head[i + 1];
    head[i] = std::fma(x0, c, -(x1 * s));
    head[i + 1] = std::fma(x0, s, x1 * c);
  }
}

void rope_neox(float* head, int64_t head_dim, int64_t n_rot, float pos, float freq_base,
               float freq_scale) {
  if (n_rot > head_dim) n_rot = head_dim;
  n_rot &= ~int64_t{1};
  if (n_rot <= 0) return;
  constexpr int64_t kStackPairs = 256;
  float stack_buf[2 * kStackPairs];
  std::vector<float> heap_buf;
  float* cos_sin = stack_buf;
  if (n_rot > 2 * kStackPairs) {
    heap_buf.resize(static_cast<size_t>(n_rot));
    cos_sin = heap_buf.data();
  }
  rope_neox_cache(pos, n_rot, freq_base, freq_scale, cos_sin);
  rope_neox_apply(head, n_rot, cos_sin);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SwigluRow)(gate, up, out, n, ggml_build_lanes());
}

namespace {
// ggml's gelu_f32 (tanh approximation) at every fp16 value, rounded to fp16, with 1 + a x^2 as
// the fused multiply-add GCC makes of it in ggml-cpu's -march builds (equal to ggml-cpu's GELU at
// every fp16 value; the unfused form differs at one).
std::vector<uint16_t> make_gelu_fp16_table() {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  std::vector<uint16_t> t(65536);
  for (uint32_t i = 0; i < t.size(); ++i) {
    const float x = fp16_to_fp32(static_cast<uint16_t>(i));
    const float poly = std::fma(kCoefA * x, x, 1.0f);
    t[i] = fp32_to_fp16(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * poly)));
  }
  return t;
}
const std::vector<uint16_t>& gelu_fp16_table() {
  static const std::vector<uint16_t> table = make_gelu_fp16_table();
  return table;
}
}  // namespace

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  const uint16_t* table = gelu_fp16_table().data();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) out[i] = 0.0f;
    else if (x >= 10.0f) out[i] = x * up[i];
    else out[i] = fp16_to_fp32(table[fp32_to_fp16(x)]) * up[i];
  }
}

void gelu(const float* x, float* y, int64_t n) {
  const uint16_t* table = gelu_fp16_table().data();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v <= -10.0f) y[i] = 0.0f;
    else if (v >= 10.0f) y[i] = v;
    else y[i] = fp16_to_fp32(table[fp32_to_fp16(v)]);
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], limit);
    const float y = std::clamp(up[i], -limit, limit);
    out[i] = x / (1.0f + std::exp(alpha * -x)) * (y + 1.0f);
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

void silu_row(const float* x, float* y, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SiluRow)(x, y, n);
}
void sigmoid_row(const float* x, float* y, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SigmoidRow)(x, y, n);
}

float log_sum_exp(const float* x, int64_t n) {
  if (n <= 0) return -INFINITY;
  const float max = HWY_DYNAMIC_DISPATCH(MaxOfRow)(x, n);
  if (max == -INFINITY || std::isnan(max)) return max;
  if (max == INFINITY) return INFINITY;
  const double sum = HWY_DYNAMIC_DISPATCH(ExpSumRow)(x, max, nullptr, n);
  return static_cast<float>(std::log(sum) + static_cast<double>(max));
}

float softmax(float* x, int64_t n) {
  if (n <= 0) return -INFINITY;
  const float max = HWY_DYNAMIC_DISPATCH(MaxOfRow)(x, n);
  if (max == -INFINITY) {
    std::fill(x, x + n, 0.0f);
    return -INFINITY;
  }
  const double sum = HWY_DYNAMIC_DISPATCH(ExpSumRow)(x, max, x, n);
  const float inv = static_cast<float>(1.0 / sum);
  HWY_DYNAMIC_DISPATCH(ScaleRow)(x, inv, nullptr, x, n);
  return static_cast<float>(std::log(sum) + static_cast<double>(max));
}

int top_k_logprobs(const float* logits, int64_t n_vocab, int k, int32_t* ids, float* logprobs) {
  if (k <= 0 || n_vocab <= 0) return 0;
  const int64_t count = std::min<int64_t>(k, n_vocab);
  const float lse = log_sum_exp(logits, n_vocab);

  auto better = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<int32_t> best;
  if (count <= 64) {
    // Small k (the usual case): keep a sorted list of the best ids in one pass.
    best.reserve(static_cast<size_t>(count) + 1);
    for (int64_t i = 0; i < n_vocab; ++i) {
      const auto id = static_cast<int32_t>(i);
      if (static_cast<int64_t>(best.size()) == count && !better(id, best.back())) continue;
      best.insert(std::upper_bound(best.begin(), best.end(), id, better), id);
      if (static_cast<int64_t>(best.size()) > count) best.pop_back();
    }
  } else {
    best.resize(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) best[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::partial_sort(best.begin(), best.begin() + count, best.end(), better);
  }
  for (int64_t i = 0; i < count; ++i) {
    ids[i] = best[static_cast<size_t>(i)];
    logprobs[i] = logits[ids[i]] - lse;
  }
  return static_cast<int>(count);
}

}  // namespace agentkv
#endif  // HWY_ONCE
