// Numeric kernels of the Gated DeltaNet recurrent layer (qwen3next / qwen35 / qwen35moe), for one
// sequence and one layer, f32 throughout. The model code projects the token rows, calls these in
// order (conv -> normalize q/k -> delta rule -> gated norm) and applies ssm_out itself.
//
// Memory layouts (chosen to be byte-compatible with llama.cpp's recurrent state rows):
//   conv weight  GGUF ssm_conv1d, ne {d_conv, C}: weight[ch*d_conv + i], i = tap (oldest first).
//   conv state   llama.cpp r_l row (n_embd_r = (d_conv-1)*C floats), ne {d_conv-1, C}, time
//                fastest: conv_state[ch*(d_conv-1) + t], t = 0 the oldest of the last d_conv-1
//                raw (pre-conv) inputs. Zero for a new sequence.
//   token rows   x / out / q / k / v / g / beta / z: one row per token, `*_stride` floats apart;
//                inside a row, heads are contiguous (q, k: H_k heads of D_k; v, o, z: H_v heads of
//                D_v; g, beta: H_v scalars).
//   delta state  llama.cpp s_l row (n_embd_s = D_k*D_v*H_v floats), ne {D_k, D_v, H_v}: the
//                matrix S_h (D_k x D_v) of v-head h is at state[h*D_k*D_v + j*D_k + i] = S_h[i][j]
//                (i = key index, fastest; j = value index), i.e. transposed w.r.t. HF's
//                [H, D_k, D_v]. Zero for a new sequence.
//
// Recurrence per v-head h (k-head hk from the head mapping), per token:
//   S <- exp(g) S;  delta = beta (v - S^T k);  S <- S + k delta^T;  o = S^T q
// with q, k already L2-normalised and q already scaled by 1/sqrt(D_k) (delta_net_normalize_qk).
#pragma once
#include <cstdint>

#include "kernels/threadpool.h"

namespace agentkv {

// How value heads share key heads when H_v > H_k (r = H_v / H_k).
enum class DeltaNetHeadMap {
  Tiled,    // v-head h uses k-head h % H_k      (qwen35, qwen35moe: converter reorders V heads)
  Grouped,  // v-head h uses k-head h / r        (qwen3next)
};

struct DeltaNetShape {
  int n_k_heads = 0;   // H_k (ssm.group_count)
  int n_v_heads = 0;   // H_v (ssm.time_step_rank), a multiple of H_k
  int head_k_dim = 0;  // D_k (ssm.state_size)
  int head_v_dim = 0;  // D_v (ssm.inner_size / H_v)
  DeltaNetHeadMap head_map = DeltaNetHeadMap::Tiled;

  int k_head_of(int v_head) const {
    return head_map == DeltaNetHeadMap::Tiled ? v_head % n_k_heads
                                              : v_head / (n_v_heads / n_k_heads);
  }
  int64_t state_floats() const { return int64_t(head_k_dim) * head_v_dim * n_v_heads; }
};

// Per-token inputs and output of the delta rule for n_tokens consecutive tokens of one sequence.
struct DeltaNetIO {
  int64_t n_tokens = 0;
  const float* q = nullptr;  // H_k*D_k per token (normalised, scaled)
  int64_t q_stride = 0;
  const float* k = nullptr;  // H_k*D_k per token (normalised)
  int64_t k_stride = 0;
  const float* v = nullptr;  // H_v*D_v per token
  int64_t v_stride = 0;
  const float* g = nullptr;  // H_v per token: log decay (<= 0)
  int64_t g_stride = 0;
  const float* beta = nullptr;  // H_v per token: sigmoid already applied
  int64_t beta_stride = 0;
  float* out = nullptr;  // H_v*D_v per token; must not alias the inputs
  int64_t out_stride = 0;
};

// Chunk length of the parallel (prefill) form. llama.cpp's chunked graph uses 64; any length
// gives the same results up to rounding, and 16 is measurably faster on CPUs (the per-chunk
// L x L work shrinks while the D x D products keep their size).
constexpr int kDeltaNetChunk = 16;
constexpr int kDeltaNetMaxChunk = 256;

// Causal depthwise conv1d over time without bias, then SiLU, for `channels` channels:
//   out[t][ch] = silu(sum_{i<d_conv} weight[ch*d_conv+i] * x_{t-(d_conv-1)+i}[ch])
// where inputs before the first token come from conv_state. conv_state is then replaced by the
// last d_conv-1 raw inputs (llama.cpp's ssm_conv + state update). out must not alias x.
// SiLU as ggml_vec_silu_f32 on each token's row of `channels`: ggml_v_silu (ggml's AVX-512 expf) on
// whole groups of 16 channels, x / (1 + expf(-x)) on the last channels % 16.
void causal_conv1d_silu(const float* x, int64_t x_stride, int64_t n_tokens, int64_t channels,
                        const float* weight, int d_conv, float* conv_state, float* out,
                        int64_t out_stride, ThreadPool& pool);

// causal_conv1d_silu followed by delta_net_normalize_qk on the q and k channels of out (the
// first n_k_heads*head_k_dim channels are q, the next as many k), each token normalised right
// after its conv row while it is in cache. Same results as the two calls.
void causal_conv1d_silu_normalize_qk(const float* x, int64_t x_stride, int64_t n_tokens,
                                     int64_t channels, const float* weight, int d_conv,
                                     float* conv_state, float* out, int64_t out_stride,
                                     int n_k_heads, int head_k_dim, float eps, ThreadPool& pool);

// ggml_l2_norm: y = x / max(||x||_2, eps), the sum of squares accumulated in double, eps a floor
// on the norm (not a term under the root). In-place allowed.
void l2_norm(const float* x, float* y, int64_t n, float eps);

// In place, for every token and k-head: q, k <- l2_norm(., eps); then q *= 1/sqrt(D_k).
// eps is the model's rms eps (llama.cpp passes f_norm_rms_eps).
void delta_net_normalize_qk(float* q, int64_t q_stride, float* k, int64_t k_stride,
                            int64_t n_tokens, int n_k_heads, int head_k_dim, float eps);
// The same, tokens split across the pool (same results).
void delta_net_normalize_qk(float* q, int64_t q_stride, float* k, int64_t k_stride,
                            int64_t n_tokens, int n_k_heads, int head_k_dim, float eps,
                            ThreadPool& pool);

// Gates of one token: beta[h] = sigmoid(beta_logit[h]); g[h] = softplus(alpha[h] + dt_bias[h]) *
// ssm_a[h] (ssm_a = -exp(A_log) as stored in GGUF; softplus as ggml: x > 20 ? x : log(1 + e^x)).
void delta_net_gates(const float* beta_logit, const float* alpha, const float* dt_bias,
                     const float* ssm_a, int n_v_heads, float* beta, float* g);

// Token-by-token recurrence (decode, and the reference for the chunked form). Updates state.
// Rounds as llama.cpp's GATED_DELTA_NET CPU op: S^T k and S^T q in ggml_vec_dot_f32's order
// (for D_k < 64 entirely its scalar loop: products rounded, summed in float one at a time), the
// rank-1 update as fused multiply-adds.
void gated_delta_rule_step(const DeltaNetShape& shape, const DeltaNetIO& io, float* state,
                           ThreadPool& pool);

// Chunked (WY / UT-transform) form over chunks of chunk_len tokens (1..kDeltaNetMaxChunk): per
// chunk and head the work is a handful of small matrix products. Same results as the step form
// up to rounding.
void gated_delta_rule_chunked(const DeltaNetShape& shape, const DeltaNetIO& io, float* state,
                              ThreadPool& pool, int chunk_len = kDeltaNetChunk);

// From this many tokens of one sequence on, gated_delta_rule takes the chunked form. Below it
// the step form reproduces llama.cpp's rounding (its fused op runs token by token for prompts
// too); the chunked form differs in the last bits, enough to move logits by a few 1e-3 through
// the f16 roundings downstream. At 512 tokens (llama.cpp's default micro-batch) the chunked form
// takes about half the step form's time per layer (D = 128, 16 heads: ~26 vs ~53 ms on 2 threads).
constexpr int64_t kDeltaNetChunkedMinTokens = 512;

// Step form below kDeltaNetChunkedMinTokens tokens, chunked form (kDeltaNetChunk) from there on.
void gated_delta_rule(const DeltaNetShape& shape, const DeltaNetIO& io, float* state,
                      ThreadPool& pool);

// Gated RMSNorm of one token's output: for each of n_heads heads of head_dim,
//   y_h = (o_h / sqrt(mean(o_h^2) + eps)) * weight * silu(z_h)
// (weight = ssm_norm, shared by the heads, not +1-shifted; silu as ggml_vec_silu_f32 on rows of
// head_dim, see causal_conv1d_silu). y may alias o.
void gated_rms_norm(const float* o, const float* z, const float* weight, float* y, int64_t n_heads,
                    int64_t head_dim, float eps);

// gated_rms_norm on n_tokens token rows (row strides in floats), tokens split across the pool
// (same results). y may alias o row for row.
void gated_rms_norm_rows(const float* o, int64_t o_stride, const float* z, int64_t z_stride,
                         const float* weight, float* y, int64_t y_stride, int64_t n_tokens,
                         int64_t n_heads, int64_t head_dim, float eps, ThreadPool& pool);

}  // namespace agentkv
