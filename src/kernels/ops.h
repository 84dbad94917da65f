// Element-wise and row-wise ops of the forward pass. All work on contiguous f32 rows.
// Numerics follow ggml's CPU ops (the formulas and the order of float roundings), so activations
// stay within llama.cpp's own numeric noise.
#pragma once
#include <cstdint>

namespace agentkv {

// y = x / sqrt(mean(x^2) + eps) * w   (w may be nullptr: no weight). In-place allowed.
// As ggml: the sum of squares is accumulated in double, the normalised row is rounded to float
// before the weight multiplication (ggml runs RMS_NORM and MUL as two ops).
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// Rotary embedding on the first n_rot dims of one head; dims beyond n_rot are untouched. Two
// layouts of the rotated pairs, as ggml's two rope modes:
// - NEOX (Qwen): pairs (i, i + n_rot/2);
// - NORM (Llama, whose converter permutes Q/K rows for it): adjacent pairs (2i, 2i + 1).
// theta_i = pos * freq_base^(-2i/n_rot) / freq_factors[i] * freq_scale (freq_factors: Llama 3's
// rope_freqs tensor, n_rot/2 floats, or null for 1), with the angles computed in float exactly as
// ggml's rope cache does (theta_scale = powf(base, -2/n_rot), theta multiplied by it pair after
// pair). Context shift calls it with pos = the position delta.
enum class RopeStyle { Neox, Norm };
void rope_neox(float* head, int64_t head_dim, int64_t n_rot, float pos, float freq_base,
               float freq_scale);
// The same in two steps, so the cos/sin of one position serve every head of a token:
// cos_sin receives n_rot floats (cos, sin interleaved per pair).
void rope_cache(float pos, int64_t n_rot, float freq_base, float freq_scale, const float* freq_factors,
                float* cos_sin);
// YaRN (rope.scaling.type = yarn), as ggml's rope_yarn: pair i's angle mixes the interpolated
// theta * freq_scale with the extrapolated theta by ramp * ext_factor, ramp = 1 - clamp((i -
// corr_dims[0]) / max(0.001, corr_dims[1] - corr_dims[0]), 0, 1), and cos / sin are multiplied
// by attn_factor * (1 + 0.1 ln(1 / freq_scale)) (only attn_factor when ext_factor is 0). The
// mixed angle and that factor are the fused multiply-adds ggml-cpu's compiled code has. With
// ext_factor 0 and attn_factor 1 it is the plain rope_cache above, bit for bit.
struct RopeYarn {
  float ext_factor = 0.f;
  float attn_factor = 1.f;
  float corr_dims[2] = {0.f, 0.f};
};
// ggml_rope_yarn_corr_dims: the first and last pair whose wavelength falls between the
// original context / beta_fast and / beta_slow, clamped to [0, n_rot - 1].
void rope_yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                         float dims[2]);
void rope_cache(float pos, int64_t n_rot, float freq_base, float freq_scale, const float* freq_factors,
                const RopeYarn& yarn, float* cos_sin);
// Qwen3.5's interleaved multi-axis RoPE (ggml's IMROPE): pair k turns with the height position
// when k' = k mod (s0+s1+s2+s3) has k' % 3 == 1 and k' < 3 s1, with the width when k' % 3 == 2 and
// k' < 3 s2, with the time when k' % 3 == 0 and k' < 3 s0, else with position 0; each axis's angle
// runs through rope_cache's float steps from its own position. t = h = w gives rope_cache's bits.
void rope_cache_imrope(const int32_t thw[3], int64_t n_rot, const int32_t sections[4], float freq_base,
                       float freq_scale, const float* freq_factors, const RopeYarn& yarn, float* cos_sin);
inline void rope_neox_cache(float pos, int64_t n_rot, float freq_base, float freq_scale, float* cos_sin) {
  rope_cache(pos, n_rot, freq_base, freq_scale, nullptr, cos_sin);
}
// The rotation x0 c - x1 s, x0 s + x1 c with each a fused multiply-add, as GCC compiles ggml-cpu's
// rotate_pairs in the -march builds x86 llama.cpp ships (bit-equal with llama.cpp's).
void rope_neox_apply(float* head, int64_t n_rot, const float* cos_sin);
void rope_norm_apply(float* head, int64_t n_rot, const float* cos_sin);
inline void rope_apply(RopeStyle style, float* head, int64_t n_rot, const float* cos_sin) {
  if (style == RopeStyle::Neox) rope_neox_apply(head, n_rot, cos_sin);
  else rope_norm_apply(head, n_rot, cos_sin);
}

// out = silu(gate) * up. In-place allowed (out may alias gate or up).
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// rows x width floats += bias (width), as ggml_add of a broadcast bias row (attention and expert biases).
inline void add_row_bias(float* x, int64_t rows, int64_t width, const float* bias) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) x[r * width + i] += bias[i];
}
// gpt-oss's clamped SwiGLU, ggml's swiglu_oai: x = min(gate, limit), y = clamp(up, -limit, limit),
// out = x / (1 + exp(alpha * -x)) * (y + 1). In-place allowed.
constexpr float kSwigluOaiAlpha = 1.702f;
constexpr float kSwigluOaiLimit = 7.0f;
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha = kSwigluOaiAlpha,
                float limit = kSwigluOaiLimit);
// out = gelu(gate) * up with ggml's GELU (tanh form) read from its fp16 table, as ggml-cpu's
// geglu: gate rounded to fp16, the table entry is fp16(gelu(that)); gate <= -10 gives 0 and
// gate >= 10 gives gate * up. In-place allowed.
void geglu(const float* gate, const float* up, float* out, int64_t n);
// y = gelu(x) from an fp16 table, as ggml-cpu's GELU op in its -march builds (the polynomial's
// 1 + a x^2 fused: equal to ggml's table at every fp16 value); x <= -10 gives 0, x >= 10 gives x.
// In-place allowed.
void gelu(const float* x, float* y, int64_t n);
float silu(float x);      // x / (1 + exp(-x))
float sigmoid(float x);   // 1 / (1 + exp(-x))
float softplus(float x);  // ggml's: x > 20 ? x : log(1 + exp(x))
// Row versions (in-place allowed).
void silu_row(const float* x, float* y, int64_t n);
void sigmoid_row(const float* x, float* y, int64_t n);

// In-place softmax of one row; returns log(sum(exp(x - max))) + max (the row's log-sum-exp).
// An empty row or a row of -INFINITY returns -INFINITY (and leaves zeros).
float softmax(float* x, int64_t n);
// Log-sum-exp of a row (sum accumulated in double), without modifying it.
float log_sum_exp(const float* x, int64_t n);
// log-softmax top-k of a logits row: fills ids / logprobs (descending, ties by lower id),
// returns min(k, n_vocab).
int top_k_logprobs(const float* logits, int64_t n_vocab, int k, int32_t* ids, float* logprobs);

}  // namespace agentkv
