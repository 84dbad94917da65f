// The part of an attention layer shared by every architecture: store this ubatch's K/V rows in
// the cache, then attend over the cache, one group of tokens per KV stream.
#pragma once
#include <cstdint>
#include <string>

#include "agentkv/batch.h"

#include "kernels/attention.h"
#include "model/model.h"
#include "model/rope_spec.h"
#include "model/weights.h"

namespace agentkv {

// The Q/K/V/O projections of an attention layer as every architecture's converter names them
// (PREFIX = "blk.N."): Q and O span n_head heads, K and V n_head_kv.
struct AttentionWeights {
  WeightMatrix wq, wk, wv, wo;
};
inline AttentionWeights bind_attention(WeightBinder& w, const std::string& prefix, const ModelConfig& cfg) {
  const int64_t E = cfg.n_embd;
  AttentionWeights a;
  a.wq = w.matrix(prefix + "attn_q.weight", E, cfg.n_head * cfg.head_dim_k);
  a.wk = w.matrix(prefix + "attn_k.weight", E, cfg.n_head_kv * cfg.head_dim_k);
  a.wv = w.matrix(prefix + "attn_v.weight", E, cfg.n_head_kv * cfg.head_dim_v);
  a.wo = w.matrix(prefix + "attn_output.weight", cfg.n_head * cfg.head_dim_v, E);
  return a;
}

// Workspace slots 0..15 belong to the architectures; 16..23 to this helper.
constexpr int kAttentionWorkspaceSlot = 16;

// q: n_tokens rows (stride q_stride floats) of n_head*head_dim; k, v: n_tokens rows of
// n_head_kv*head_dim (contiguous); out: n_tokens rows of n_head*head_dim (contiguous).
// window > 0: a sliding-window layer, each token attends to the keys at positions in
// (its position - window, its position] (ModelConfig::attention_window).
// sinks: n_head learned logits joining each head's softmax normaliser (AttentionArgs::sinks;
// gpt-oss's attn_sinks), or null.
void cached_attention(const ForwardBatch& batch, memory::KvCache& kv, int layer,
                      const AttentionShape& shape, const float* q, int64_t q_stride,
                      const float* k, const float* v, float* out, Workspace& ws, ThreadPool& pool,
                      int32_t window = 0, const float* sinks = nullptr);
// The same in the cache that holds the layer: a sliding-window layer's rows in the memory's
// window part when it has one (its own cells and attention view), else the main cache.
void cached_attention(const ForwardBatch& batch, const ModelMemory& mem, int layer,
                      const AttentionShape& shape, const float* q, int64_t q_stride,
                      const float* k, const float* v, float* out, Workspace& ws, ThreadPool& pool,
                      int32_t window = 0, const float* sinks = nullptr);

// Applies RoPE to every head of n_tokens rows (row stride `stride` floats, head stride
// `head_stride`), token t at position pos[t].
void rope_rows(float* x, int64_t n_tokens, int64_t stride, int n_heads, int64_t head_stride,
               int64_t head_dim, const RopeSpec& rope, const int32_t* pos);
// The same with interleaved multi-axis positions (Qwen3.5, kernels/ops.h rope_cache_imrope): token
// t turns by rope[t] on the axes `sections` assigns to its pairs.
void rope_rows_imrope(float* x, int64_t n_tokens, int64_t stride, int n_heads, int64_t head_stride,
                      int64_t head_dim, const RopeSpec& rope, const int32_t sections[4], const RopePos* rope_pos);
// The batch's tokens: by their multi-axis positions when it carries them (images, IMROPE with
// `sections`), else by their positions (IMROPE of a text position is NEOX over the first n_rot).
void rope_batch_rows(const ForwardBatch& b, float* x, int64_t stride, int n_heads, int64_t head_stride,
                     int64_t head_dim, const RopeSpec& rope, const int32_t sections[4]);

// Per-head RMSNorm with a shared weight (Q/K norm).
void rms_norm_heads(float* x, int64_t n_tokens, int64_t stride, int n_heads, int64_t head_stride,
                    int64_t head_dim, const float* w, float eps);

}  // namespace agentkv
