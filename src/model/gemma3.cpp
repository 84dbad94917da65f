#include "model/gemma3.h"

#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/attention_block.h"
#include "model/output_rows.h"
#include "model/weights.h"

namespace agentkv {

namespace {
enum Slot { kX, kCur, kQ, kK, kV, kAttn, kGate, kUp };
}  // namespace

Gemma3Model::Gemma3Model(std::unique_ptr<gguf::Reader> g, ModelConfig c) : ArchModel(std::move(g), std::move(c)) {
  const auto& cfg = config_;
  WeightBinder w(*gguf_);
  const int64_t E = cfg.n_embd, D = cfg.head_dim_k, F = cfg.n_ff;
  // gemma_pytorch scales queries by head_dim^-0.5, except the 27B (62 layers): (E / n_head)^-0.5.
  query_scale_ = cfg.attn_scale != 0.f ? cfg.attn_scale
                 : cfg.n_layer == 62   ? 1.0f / std::sqrt(static_cast<float>(E / cfg.n_head))
                                       : 1.0f / std::sqrt(static_cast<float>(D));
  head_ = bind_embedding_and_head(w, cfg);
  layers_.resize(cfg.n_layer);
  for (int il = 0; il < cfg.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    Layer& l = layers_[il];
    l.attn_norm = w.vector(p + "attn_norm.weight", E);
    l.attn = bind_attention(w, p, cfg);
    l.q_norm = w.vector(p + "attn_q_norm.weight", D);
    l.k_norm = w.vector(p + "attn_k_norm.weight", D);
    l.attn_post_norm = w.vector(p + "post_attention_norm.weight", E);
    l.ffn_norm = w.vector(p + "ffn_norm.weight", E);
    l.gate = w.matrix(p + "ffn_gate.weight", E, F);
    l.up = w.matrix(p + "ffn_up.weight", E, F);
    l.down = w.matrix(p + "ffn_down.weight", F, E);
    l.ffn_post_norm = w.vector(p + "post_ffw_norm.weight", E);
  }
  w.check_all_used();
}

void Gemma3Model::forward(const ForwardBatch& b, ModelMemory& mem, Workspace& ws, ThreadPool& pool) const {
  const auto& cfg = config_;
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  const int64_t E = cfg.n_embd, D = cfg.head_dim_k, F = cfg.n_ff;
  const int64_t nq = cfg.n_head * D, nkv = cfg.n_head_kv * D;
  AttentionShape shape;
  shape.n_head = cfg.n_head;
  shape.n_head_kv = cfg.n_head_kv;
  shape.head_dim = static_cast<int>(D);
  shape.scale = 1.0f;  // the queries carry the scale (as llama.cpp's graph)

  float* x = ws.get(kX, T * E);
  float* cur = ws.get(kCur, T * std::max(E, nq));
  float* q = ws.get(kQ, T * nq);
  float* k = ws.get(kK, T * nkv);
  float* v = ws.get(kV, T * nkv);
  float* attn = ws.get(kAttn, T * nq);
  float* gate = ws.get(kGate, T * F);
  float* up = ws.get(kUp, T * F);

  const float embd_scale = std::sqrt(static_cast<float>(E));
  for (int64_t t = 0; t < T; ++t) {
    get_row(head_.token_embd, b.tokens[t], x + t * E);
    for (int64_t i = 0; i < E; ++i) x[t * E + i] *= embd_scale;
  }

  int64_t rows = T;  // rows still carried; the last layer keeps only the output rows
  for (int il = 0; il < cfg.n_layer; ++il) {
    const Layer& l = layers_[il];
    const RopeSpec rope = layer_rope(il);
    for (int64_t t = 0; t < T; ++t) rms_norm(x + t * E, l.attn_norm, cur + t * E, E, cfg.rms_eps);
    matmul(l.attn.wq, cur, T, E, q, nq, pool);
    matmul(l.attn.wk, cur, T, E, k, nkv, pool);
    matmul(l.attn.wv, cur, T, E, v, nkv, pool);
    rms_norm_heads(q, T, nq, cfg.n_head, D, D, l.q_norm, cfg.rms_eps);
    rope_rows(q, T, nq, cfg.n_head, D, D, rope, b.ub->pos.data());
    rms_norm_heads(k, T, nkv, cfg.n_head_kv, D, D, l.k_norm, cfg.rms_eps);
    rope_rows(k, T, nkv, cfg.n_head_kv, D, D, rope, b.ub->pos.data());
    for (int64_t i = 0; i < T * nq; ++i) q[i] *= query_scale_;
    cached_attention(b, mem, il, shape, q, nq, k, v, attn, ws, pool, cfg.attention_window(il));
    // The output projection sees the whole batch (its rounding can depend on a row's place in it).
    matmul(l.attn.wo, attn, T, nq, cur, E, pool);

    if (il == cfg.n_layer - 1) {  // only the rows whose logits are wanted go further
      rows = keep_output_rows(b.output_rows, E, {x, cur});
      if (rows == 0) return;
    }
    for (int64_t t = 0; t < rows; ++t) {
      rms_norm(cur + t * E, l.attn_post_norm, cur + t * E, E, cfg.rms_eps);
      for (int64_t i = 0; i < E; ++i) x[t * E + i] += cur[t * E + i];  // x is now the block's attention output
    }

    for (int64_t t = 0; t < rows; ++t) rms_norm(x + t * E, l.ffn_norm, cur + t * E, E, cfg.rms_eps);
    matmul(l.gate, cur, rows, E, gate, F, pool);
    matmul(l.up, cur, rows, E, up, F, pool);
    for (int64_t t = 0; t < rows; ++t) geglu(gate + t * F, up + t * F, gate + t * F, F);
    matmul(l.down, gate, rows, F, cur, E, pool);
    for (int64_t t = 0; t < rows; ++t) {
      rms_norm(cur + t * E, l.ffn_post_norm, cur + t * E, E, cfg.rms_eps);
      for (int64_t i = 0; i < E; ++i) x[t * E + i] += cur[t * E + i];
    }
  }
  output_head(b, x, rows, E, head_.output_norm, cfg.rms_eps, head_.output, cfg.n_vocab, cur, pool);
  if (b.logits && cfg.final_logit_softcap > 0.f) {  // Gemma 2's cap, when a file carries one
    const float c = cfg.final_logit_softcap, inv_c = 1.0f / c;  // ggml_scale by 1/c, tanh, scale by c
    for (int64_t i = 0; i < rows * cfg.n_vocab; ++i) b.logits[i] = std::tanh(b.logits[i] * inv_c) * c;
  }
}

}  // namespace agentkv
