#include "model/transformer.h"

#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/attention_block.h"
#include "model/output_rows.h"
#include "model/weights.h"

namespace agentkv {

namespace {
// Workspace slots used by this architecture.
enum Slot { kX, kCur, kScratch, kOut };

// Rows per feed-forward block: as many as fit where the attention half's scratch was (so the
// feed-forward adds no memory), a multiple of 4 so that every block starts a row group of the
// batched kernels exactly where the whole batch would (kernels/matmul.cpp: same numerics).
int64_t ffn_block_rows(int64_t n_tokens, int64_t attn_width, int64_t n_ff) {
  if (n_ff == 0) return n_tokens;  // experts: moe_ffn has its own scratch
  const int64_t fit = n_tokens * attn_width / (2 * n_ff) / 4 * 4;
  return std::max<int64_t>(4, std::min(fit, n_tokens));
}
}  // namespace

TransformerModel::TransformerModel(std::unique_ptr<gguf::Reader> g, ModelConfig c)
    : ArchModel(std::move(g), std::move(c)) {
  const auto& cfg = config_;
  const bool qwen = cfg.arch != Arch::Llama;
  WeightBinder w(*gguf_);
  const int64_t E = cfg.n_embd, D = cfg.head_dim_k;
  rope_ = ArchModel::rope();
  if (!qwen) {
    // llama.cpp's LLAMA_ROPE_TYPE_NORM: the converter permuted Q/K rows for adjacent pairs.
    rope_.style = RopeStyle::Norm;
    // Llama 3.1+ frequency scaling: one divisor per rotated pair, shared by every layer.
    if (w.has("rope_freqs.weight")) rope_.freq_factors = w.vector("rope_freqs.weight", cfg.n_rot / 2);
  }
  head_ = bind_embedding_and_head(w, cfg);
  layers_.resize(cfg.n_layer);
  for (int il = 0; il < cfg.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    Layer& l = layers_[il];
    l.attn_norm = w.vector(p + "attn_norm.weight", E);
    l.attn = bind_attention(w, p, cfg);
    if (qwen) {
      l.q_norm = w.vector(p + "attn_q_norm.weight", D);
      l.k_norm = w.vector(p + "attn_k_norm.weight", D);
    }
    l.ffn_norm = w.vector(p + "ffn_norm.weight", E);
    l.ffn = bind_feed_forward(w, p, cfg);
  }
  w.check_all_used();
}

void TransformerModel::add_deepstack(const ForwardBatch& b, int il, float* x) const {
  // A text token's slices are llama.cpp's zero padding: adding them changes nothing.
  const int64_t E = config_.n_embd, W = config_.n_embd_input();
  for (size_t t = 0; t < b.embd_row.size(); ++t) {
    if (b.embd_row[t] < 0) continue;
    const float* ds = b.embd + b.embd_row[t] * W + (il + 1) * E;
    for (int64_t e = 0; e < E; ++e) x[t * E + e] += ds[e];
  }
}

void TransformerModel::dense_ffn(const Layer& l, const float* cur, int64_t rows, float* out, float* scratch,
                                 int64_t block_rows, ThreadPool& pool) const {
  const int64_t E = config_.n_embd, F = config_.n_ff;
  for (int64_t r0 = 0; r0 < rows;) {
    int64_t n = std::min(block_rows, rows - r0);
    if (rows - r0 - n == 1) ++n;  // a lone last row would take the single-row kernels' numerics
    float* gate = scratch;
    float* up = scratch + n * F;
    matmul(l.ffn.gate, cur + r0 * E, n, E, gate, F, pool);
    matmul(l.ffn.up, cur + r0 * E, n, E, up, F, pool);
    for (int64_t t = 0; t < n; ++t) swiglu(gate + t * F, up + t * F, gate + t * F, F);
    matmul(l.ffn.down, gate, n, F, out + r0 * E, E, pool);
    r0 += n;
  }
}

void TransformerModel::forward(const ForwardBatch& b, ModelMemory& mem, Workspace& ws, ThreadPool& pool) const {
  const auto& cfg = config_;
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  const int64_t E = cfg.n_embd, D = cfg.head_dim_k, F = cfg.n_expert > 0 ? 0 : cfg.n_ff;  // dense FFN width
  const int64_t nq = cfg.n_head * D, nkv = cfg.n_head_kv * D;
  AttentionShape shape;
  shape.n_head = cfg.n_head;
  shape.n_head_kv = cfg.n_head_kv;
  shape.head_dim = static_cast<int>(D);
  shape.scale = cfg.attention_scale();

  // Prefill scratch is sized by the attention half of a layer: q | k | v, with the attention
  // output written over k | v once they are in the cache, and the output projection over q once
  // attention has read it. The feed-forward half reuses the same region for gate | up, a block
  // of rows at a time (see ffn_rows), and writes its result into cur, which it has consumed.
  const int64_t attn_width = nq + std::max(2 * nkv, nq);
  float* x = ws.get(kX, T * E);
  float* cur = ws.get(kCur, T * E);
  const int64_t ffn_rows = ffn_block_rows(T, attn_width, F);
  float* scratch = ws.get(kScratch, std::max(T * attn_width, (ffn_rows + 1) * 2 * F));
  float* q = scratch;
  float* k = q + T * nq;
  float* v = k + T * nkv;
  float* attn = k;
  float* out = E <= nq ? q : ws.get(kOut, T * E);

  input_rows(b, head_.token_embd, E, cfg.n_embd_input(), x);

  int64_t rows = T;  // rows still carried; the last layer keeps only the output rows
  for (int il = 0; il < cfg.n_layer; ++il) {
    const Layer& l = layers_[il];
    for (int64_t t = 0; t < T; ++t) rms_norm(x + t * E, l.attn_norm, cur + t * E, E, cfg.rms_eps);
    matmul(l.attn.wq, cur, T, E, q, nq, pool);
    matmul(l.attn.wk, cur, T, E, k, nkv, pool);
    matmul(l.attn.wv, cur, T, E, v, nkv, pool);
    if (l.q_norm) {
      rms_norm_heads(q, T, nq, cfg.n_head, D, D, l.q_norm, cfg.rms_eps);
      rms_norm_heads(k, T, nkv, cfg.n_head_kv, D, D, l.k_norm, cfg.rms_eps);
    }
    rope_batch_rows(b, q, nq, cfg.n_head, D, D, rope_, cfg.rope_sections.data());  // Qwen3-VL's images: IMROPE
    rope_batch_rows(b, k, nkv, cfg.n_head_kv, D, D, rope_, cfg.rope_sections.data());
    cached_attention(b, *mem.kv, il, shape, q, nq, k, v, attn, ws, pool);
    // The output projection sees the whole batch, as in llama.cpp: q4_K rounding depends on a
    // row's place in the batch (kernels/matmul.cpp), so selecting rows first would change it.
    matmul(l.attn.wo, attn, T, nq, out, E, pool);

    if (il == cfg.n_layer - 1) {  // only the rows whose logits are wanted go further
      rows = keep_output_rows(b.output_rows, E, {x, out});
      if (rows == 0) return;
    }
    for (int64_t i = 0; i < rows * E; ++i) x[i] += out[i];

    for (int64_t t = 0; t < rows; ++t) rms_norm(x + t * E, l.ffn_norm, cur + t * E, E, cfg.rms_eps);
    float* ffn_out = cur;  // the dense blocks overwrite the rows they have read
    if (cfg.n_expert > 0) moe_ffn(l.ffn.moe, cur, rows, E, ffn_out = out, ws, pool);
    else dense_ffn(l, cur, rows, cur, scratch, ffn_rows, pool);
    for (int64_t i = 0; i < rows * E; ++i) x[i] += ffn_out[i];
    if (il < cfg.n_deepstack_layers) add_deepstack(b, il, x);  // il < n_layer - 1: every row is here
  }
  output_head(b, x, rows, E, head_.output_norm, cfg.rms_eps, head_.output, cfg.n_vocab, cur, pool);
}

}  // namespace agentkv
