#include "model/gpt_oss.h"

#include <algorithm>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/attention_block.h"
#include "model/output_rows.h"
#include "model/weights.h"

namespace agentkv {

namespace {
enum Slot { kX, kCur, kQ, kK, kV, kAttn, kOut };
}  // namespace

GptOssModel::GptOssModel(std::unique_ptr<gguf::Reader> g, ModelConfig c) : ArchModel(std::move(g), std::move(c)) {
  const auto& cfg = config_;
  WeightBinder w(*gguf_);
  const int64_t E = cfg.n_embd, D = cfg.head_dim_k;
  const int64_t nq = cfg.n_head * D, nkv = cfg.n_head_kv * D;
  head_ = bind_embedding_and_head(w, cfg);
  layers_.resize(cfg.n_layer);
  for (int il = 0; il < cfg.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    Layer& l = layers_[il];
    l.attn_norm = w.vector(p + "attn_norm.weight", E);
    l.attn = bind_attention(w, p, cfg);
    l.bq = w.vector(p + "attn_q.bias", nq);
    l.bk = w.vector(p + "attn_k.bias", nkv);
    l.bv = w.vector(p + "attn_v.bias", nkv);
    l.bo = w.vector(p + "attn_output.bias", E);
    l.sinks = w.vector(p + "attn_sinks.weight", cfg.n_head);
    l.ffn_norm = w.vector(p + "post_attention_norm.weight", E);
    l.ffn = bind_feed_forward(w, p, cfg);
  }
  w.check_all_used();
}

void GptOssModel::forward(const ForwardBatch& b, ModelMemory& mem, Workspace& ws, ThreadPool& pool) const {
  const auto& cfg = config_;
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  const int64_t E = cfg.n_embd, D = cfg.head_dim_k;
  const int64_t nq = cfg.n_head * D, nkv = cfg.n_head_kv * D;
  AttentionShape shape;
  shape.n_head = cfg.n_head;
  shape.n_head_kv = cfg.n_head_kv;
  shape.head_dim = static_cast<int>(D);
  shape.scale = cfg.attention_scale();  // 1 / sqrt(n_rot): n_rot is the head width here

  float* x = ws.get(kX, T * E);
  float* cur = ws.get(kCur, T * E);
  float* q = ws.get(kQ, T * nq);
  float* k = ws.get(kK, T * nkv);
  float* v = ws.get(kV, T * nkv);
  float* attn = ws.get(kAttn, T * nq);
  float* out = ws.get(kOut, T * E);

  for (int64_t t = 0; t < T; ++t) get_row(head_.token_embd, b.tokens[t], x + t * E);

  // Every row goes through every layer (llama.cpp's graph picks the output rows after the last
  // layer here): the experts' batch is then the same as llama.cpp's.
  for (int il = 0; il < cfg.n_layer; ++il) {
    const Layer& l = layers_[il];
    const RopeSpec rope = layer_rope(il);
    for (int64_t t = 0; t < T; ++t) rms_norm(x + t * E, l.attn_norm, cur + t * E, E, cfg.rms_eps);
    matmul(l.attn.wq, cur, T, E, q, nq, pool);
    add_row_bias(q, T, nq, l.bq);
    matmul(l.attn.wk, cur, T, E, k, nkv, pool);
    add_row_bias(k, T, nkv, l.bk);
    matmul(l.attn.wv, cur, T, E, v, nkv, pool);
    add_row_bias(v, T, nkv, l.bv);
    rope_rows(q, T, nq, cfg.n_head, D, D, rope, b.ub->pos.data());
    rope_rows(k, T, nkv, cfg.n_head_kv, D, D, rope, b.ub->pos.data());
    cached_attention(b, mem, il, shape, q, nq, k, v, attn, ws, pool, cfg.attention_window(il), l.sinks);
    matmul(l.attn.wo, attn, T, nq, out, E, pool);
    add_row_bias(out, T, E, l.bo);
    for (int64_t i = 0; i < T * E; ++i) x[i] += out[i];

    for (int64_t t = 0; t < T; ++t) rms_norm(x + t * E, l.ffn_norm, cur + t * E, E, cfg.rms_eps);
    moe_ffn(l.ffn.moe, cur, T, E, out, ws, pool);
    for (int64_t i = 0; i < T * E; ++i) x[i] += out[i];
  }
  const int64_t rows = keep_output_rows(b.output_rows, E, {x});
  if (rows == 0) return;
  output_head(b, x, rows, E, head_.output_norm, cfg.rms_eps, head_.output, cfg.n_vocab, cur, pool);
}

}  // namespace agentkv
