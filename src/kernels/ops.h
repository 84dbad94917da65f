// Element-wise and row-wise ops of the forward pass. All work on contiguous f32 rows.
#pragma once
#include <cstdint>

namespace agentkv {

// y = x / sqrt(mean(x^2) + eps) * w   (w may be nullptr: no weight). In-place allowed.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
// NEOX rotary embedding on the first n_rot dims of one head (pairs (i, i + n_rot/2)); dims beyond
// n_rot are untouched. theta_i = pos * freq_base^(-2i/n_rot) * freq_scale.
void rope_neox(float* head, int64_t head_dim, int64_t n_rot, float pos, float freq_base,
               float freq_scale);
// Rotation by an angle multiple: used by context shift (rotate stored keys by delta positions).
// out = silu(gate) * up
void swiglu(const float* gate, const float* up, float* out, int64_t n);
float silu(float x);
float sigmoid(float x);
float softplus(float x);  // ggml's: x > 20 ? x : log1p(exp(x))
// In-place softmax of one row; returns log(sum(exp(x - max))) + max (the row's log-sum-exp).
float softmax(float* x, int64_t n);
// log-softmax top-k of a logits row: fills ids / logprobs (descending), returns k.
int top_k_logprobs(const float* logits, int64_t n_vocab, int k, int32_t* ids, float* logprobs);

}  // namespace agentkv
