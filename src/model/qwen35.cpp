#include "model/qwen35.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <cstring>

#include "agentkv/error.h"
#include "agentkv/op_profile.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/attention_block.h"
#include "model/output_rows.h"
#include "model/weights.h"

namespace agentkv {

namespace {
// Workspace slots 0..15 (see attention_block.h / moe_ffn.h for the others).
enum Slot { kX, kCur, kOut, kQG, kQ, kK, kV, kAttn, kQKV, kZ, kBeta, kAlpha, kConv, kDnOut, kGate, kUp };
// Slots the fused projections of qwen3next use before splitting (free while they do).
constexpr int kFusedQkvz = kGate, kFusedBetaAlpha = kUp;
}  // namespace

Qwen35Model::Qwen35Model(std::unique_ptr<gguf::Reader> g, ModelConfig c) : ArchModel(std::move(g), std::move(c)) {
  const auto& cfg = config_;
  WeightBinder w(*gguf_);
  const int64_t E = cfg.n_embd, D = cfg.head_dim_k;
  const int64_t Kd = cfg.ssm_n_k_heads * cfg.ssm_d_state, Vd = cfg.ssm_d_inner, C = 2 * Kd + Vd;
  dn_shape_.n_k_heads = cfg.ssm_n_k_heads;
  dn_shape_.n_v_heads = cfg.ssm_n_v_heads;
  dn_shape_.head_k_dim = static_cast<int>(cfg.ssm_d_state);
  dn_shape_.head_v_dim = static_cast<int>(cfg.ssm_d_inner / cfg.ssm_n_v_heads);
  // Qwen3.5's converter reorders V heads into tiled order; Qwen3-Next's keeps them grouped.
  dn_shape_.head_map = cfg.arch == Arch::Qwen3Next ? DeltaNetHeadMap::Grouped : DeltaNetHeadMap::Tiled;
  if (cfg.head_dim_k != cfg.head_dim_v) throw Error(gguf_->path() + ": key_length != value_length is not supported");

  head_ = bind_embedding_and_head(w, cfg);
  layers_.resize(cfg.n_layer);
  for (int il = 0; il < cfg.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    Layer& l = layers_[il];
    l.attn_norm = w.vector(p + "attn_norm.weight", E);
    l.post_attention_norm = w.vector(p + "post_attention_norm.weight", E);
    if (cfg.is_recurrent(il)) {
      if (w.has(p + "ssm_in.weight")) {
        l.qkvz = w.matrix(p + "ssm_in.weight", E, C + Vd);
      } else {
        l.qkv = w.matrix(p + "attn_qkv.weight", E, C);
        l.z = w.matrix(p + "attn_gate.weight", E, Vd);
      }
      l.conv1d = w.f32_matrix(p + "ssm_conv1d.weight", cfg.ssm_d_conv, C);
      l.dt_bias = w.vector(p + "ssm_dt.bias", cfg.ssm_n_v_heads);
      l.ssm_a = w.vector(p + "ssm_a", cfg.ssm_n_v_heads);
      if (w.has(p + "ssm_ba.weight")) {
        l.beta_alpha = w.matrix(p + "ssm_ba.weight", E, 2 * cfg.ssm_n_v_heads);
      } else {
        l.beta = w.matrix(p + "ssm_beta.weight", E, cfg.ssm_n_v_heads);
        l.alpha = w.matrix(p + "ssm_alpha.weight", E, cfg.ssm_n_v_heads);
      }
      l.ssm_norm = w.vector(p + "ssm_norm.weight", dn_shape_.head_v_dim);
      l.ssm_out = w.matrix(p + "ssm_out.weight", Vd, E);
    } else {
      l.wq_gate = w.matrix(p + "attn_q.weight", E, 2 * cfg.n_head * D);
      l.wk = w.matrix(p + "attn_k.weight", E, cfg.n_head_kv * D);
      l.wv = w.matrix(p + "attn_v.weight", E, cfg.n_head_kv * D);
      l.wo = w.matrix(p + "attn_output.weight", cfg.n_head * D, E);
      l.q_norm = w.vector(p + "attn_q_norm.weight", D);
      l.k_norm = w.vector(p + "attn_k_norm.weight", D);
    }
    l.ffn = bind_feed_forward(w, p, cfg);
  }
  // MTP layers (index >= n_layer) are only used for speculative drafting: skipped.
  std::set<std::string> ignored;
  for (int il = cfg.n_layer; il < cfg.n_layer_file; ++il) ignored.insert("blk." + std::to_string(il) + ".");
  w.check_all_used(ignored);
}

void Qwen35Model::attention_layer(int il, const ForwardBatch& b, ModelMemory& mem, const float* cur,
                                  float* out, Workspace& ws, ThreadPool& pool) const {
  const auto& cfg = config_;
  const Layer& l = layers_[il];
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  const int64_t E = cfg.n_embd, D = cfg.head_dim_k, H = cfg.n_head;
  const int64_t nq = H * D, nkv = cfg.n_head_kv * D;
  float* qg = ws.get(kQG, T * 2 * nq);
  float* q = ws.get(kQ, T * nq);
  float* k = ws.get(kK, T * nkv);
  float* v = ws.get(kV, T * nkv);
  float* attn = ws.get(kAttn, T * nq);
  matmul(l.wq_gate, cur, T, E, qg, 2 * nq, pool);
  matmul(l.wk, cur, T, E, k, nkv, pool);
  matmul(l.wv, cur, T, E, v, nkv, pool);
  for (int64_t t = 0; t < T; ++t)  // de-interleave: per head [q | gate]
    for (int64_t h = 0; h < H; ++h) std::memcpy(q + t * nq + h * D, qg + t * 2 * nq + h * 2 * D, D * sizeof(float));
  rms_norm_heads(q, T, nq, cfg.n_head, D, D, l.q_norm, cfg.rms_eps);
  rms_norm_heads(k, T, nkv, cfg.n_head_kv, D, D, l.k_norm, cfg.rms_eps);
  const RopeSpec r = rope();
  rope_batch_rows(b, q, nq, cfg.n_head, D, D, r, cfg.rope_sections.data());
  rope_batch_rows(b, k, nkv, cfg.n_head_kv, D, D, r, cfg.rope_sections.data());
  AttentionShape shape;
  shape.n_head = cfg.n_head;
  shape.n_head_kv = cfg.n_head_kv;
  shape.head_dim = static_cast<int>(D);
  shape.scale = cfg.attention_scale();
  cached_attention(b, *mem.kv, il, shape, q, nq, k, v, attn, ws, pool);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* gate = qg + t * 2 * nq + h * 2 * D + D;
      float* o = attn + t * nq + h * D;
      for (int64_t i = 0; i < D; ++i) o[i] *= sigmoid(gate[i]);
    }
  matmul(l.wo, attn, T, nq, out, E, pool);
}

void Qwen35Model::delta_net_layer(int il, const ForwardBatch& b, ModelMemory& mem, const float* cur,
                                  float* out, Workspace& ws, ThreadPool& pool) const {
  op_profile::Scope profile(op_profile::Kind::kRecurrent);  // its matmuls count as matmuls
  const auto& cfg = config_;
  const Layer& l = layers_[il];
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  const int64_t E = cfg.n_embd, Hv = cfg.ssm_n_v_heads;
  const int64_t Kd = cfg.ssm_n_k_heads * cfg.ssm_d_state, Vd = cfg.ssm_d_inner, C = 2 * Kd + Vd;
  float* qkv = ws.get(kQKV, T * C);
  float* z = ws.get(kZ, T * Vd);
  float* beta = ws.get(kBeta, T * Hv * 2);
  float* alpha = ws.get(kAlpha, T * Hv * 2);
  float* conv = ws.get(kConv, T * C);
  float* o = ws.get(kDnOut, T * Vd);
  delta_net_projections(l, cur, T, qkv, z, beta, alpha, ws, pool);
  // Gates in place: beta <- sigmoid(beta), alpha <- g (log decay).
  for (int64_t t = 0; t < T; ++t)
    delta_net_gates(beta + t * Hv, alpha + t * Hv, l.dt_bias, l.ssm_a, static_cast<int>(Hv), beta + t * Hv, alpha + t * Hv);

  // Recurrence per sequence over its tokens (ubatch tokens of one sequence are consecutive in
  // position; they need not be adjacent rows, so rows are addressed through an index list).
  const auto& ub = *b.ub;
  std::vector<memory::SeqId> seqs;
  for (size_t t = 0; t < ub.size(); ++t)
    if (std::find(seqs.begin(), seqs.end(), ub.seq[t][0]) == seqs.end()) seqs.push_back(ub.seq[t][0]);
  float* gq = ws.get(kGate, T * C);      // gathered rows of one sequence
  float* go = ws.get(kUp, T * Vd);
  for (memory::SeqId s : seqs) {
    std::vector<int64_t> rows;
    for (size_t t = 0; t < ub.size(); ++t)
      if (ub.seq[t][0] == s) rows.push_back(static_cast<int64_t>(t));
    const bool contiguous = rows.back() - rows.front() + 1 == static_cast<int64_t>(rows.size());
    const int64_t n = static_cast<int64_t>(rows.size()), r0 = rows.front();
    const uint32_t cell = b.rec_placement->cell_of(s);
    float* conv_state = mem.rec->conv_state(il, cell);
    float* ssm_state = mem.rec->ssm_state(il, cell);
    const float* x_rows = qkv + r0 * C;
    float* c_rows = conv + r0 * C;
    if (!contiguous) {
      for (int64_t i = 0; i < n; ++i) std::memcpy(gq + i * C, qkv + rows[i] * C, C * sizeof(float));
      x_rows = gq;
      c_rows = conv;  // compact scratch for this sequence
    }
    // Conv + SiLU, then q and k L2-normalised in the same pass over each token's row.
    causal_conv1d_silu_normalize_qk(x_rows, C, n, C, l.conv1d, cfg.ssm_d_conv, conv_state, c_rows, C, cfg.ssm_n_k_heads, static_cast<int>(cfg.ssm_d_state), cfg.rms_eps, pool);
    // Gates and z rows of this sequence (compact when the rows were gathered).
    std::vector<float> g_rows, b_rows;
    const float* gp = alpha + r0 * Hv;
    const float* bp = beta + r0 * Hv;
    if (!contiguous) {
      g_rows.resize(n * Hv);
      b_rows.resize(n * Hv);
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(&g_rows[i * Hv], alpha + rows[i] * Hv, Hv * sizeof(float));
        std::memcpy(&b_rows[i * Hv], beta + rows[i] * Hv, Hv * sizeof(float));
      }
      gp = g_rows.data();
      bp = b_rows.data();
    }
    if (memory::RecurrentTape* tape = mem.tapes ? mem.tapes->find(s) : nullptr)
      tape->record(il, x_rows, C, gp, bp, Hv, n);  // a speculative pass: replay_recurrent
    DeltaNetIO io;
    io.n_tokens = n;
    io.q = c_rows; io.q_stride = C;
    io.k = c_rows + Kd; io.k_stride = C;
    io.v = c_rows + 2 * Kd; io.v_stride = C;
    io.g = gp; io.g_stride = Hv;
    io.beta = bp; io.beta_stride = Hv;
    io.out = contiguous ? o + r0 * Vd : go;
    io.out_stride = Vd;
    gated_delta_rule(dn_shape_, io, ssm_state, pool);
    if (contiguous) {
      gated_rms_norm_rows(o + r0 * Vd, Vd, z + r0 * Vd, Vd, l.ssm_norm, o + r0 * Vd, Vd, n, Hv, dn_shape_.head_v_dim, cfg.rms_eps, pool);
    } else {
      for (int64_t i = 0; i < n; ++i)
        gated_rms_norm(go + i * Vd, z + rows[i] * Vd, l.ssm_norm, o + rows[i] * Vd, Hv, dn_shape_.head_v_dim, cfg.rms_eps);
    }
  }
  matmul(l.ssm_out, o, T, Vd, out, E, pool);
}

void Qwen35Model::replay_recurrent(memory::RecurrentMemory& rec, uint32_t cell, const memory::RecurrentTape& tape,
                                   int64_t n, ThreadPool& pool) const {
  const auto& cfg = config_;
  const int64_t Hv = cfg.ssm_n_v_heads, Kd = cfg.ssm_n_k_heads * cfg.ssm_d_state, Vd = cfg.ssm_d_inner;
  const int64_t C = 2 * Kd + Vd;
  if (n <= 0) return;
  if (tape.recorded(cfg.layer_recurrent) < n) throw Error("recurrent replay: the tape holds fewer tokens than asked");
  // The step form, as the pass ran it at draft sizes (gated_delta_rule takes the chunked form from
  // kDeltaNetChunkedMinTokens tokens of a sequence on); refused before any state changes.
  for (int il = 0; il < cfg.n_layer; ++il)
    if (cfg.is_recurrent(il) && tape.layers[static_cast<size_t>(il)].n_tokens >= kDeltaNetChunkedMinTokens)
      throw Error("recurrent replay: a pass of chunked size");
  std::vector<float> conv(static_cast<size_t>(n * C)), out(static_cast<size_t>(n * Vd));
  for (int il = 0; il < cfg.n_layer; ++il) {
    if (!cfg.is_recurrent(il)) continue;
    const Layer& l = layers_[il];
    const memory::RecurrentTape::Layer& t = tape.layers[static_cast<size_t>(il)];
    causal_conv1d_silu_normalize_qk(t.x.data(), C, n, C, l.conv1d, cfg.ssm_d_conv, rec.conv_state(il, cell), conv.data(), C,
                                    cfg.ssm_n_k_heads, static_cast<int>(cfg.ssm_d_state), cfg.rms_eps, pool);
    DeltaNetIO io;
    io.n_tokens = n;
    io.q = conv.data(); io.q_stride = C;
    io.k = conv.data() + Kd; io.k_stride = C;
    io.v = conv.data() + 2 * Kd; io.v_stride = C;
    io.g = t.gate.data(); io.g_stride = Hv;
    io.beta = t.beta.data(); io.beta_stride = Hv;
    io.out = out.data();
    io.out_stride = Vd;
    gated_delta_rule_step(dn_shape_, io, rec.ssm_state(il, cell), pool);
  }
}

void Qwen35Model::delta_net_projections(const Layer& l, const float* cur, int64_t T, float* qkv, float* z,
                                        float* beta, float* alpha, Workspace& ws, ThreadPool& pool) const {
  const auto& cfg = config_;
  const int64_t E = cfg.n_embd, Hv = cfg.ssm_n_v_heads, Hk = cfg.ssm_n_k_heads, Dk = cfg.ssm_d_state;
  const int64_t Kd = Hk * Dk, Vd = cfg.ssm_d_inner, C = 2 * Kd + Vd;
  const int64_t r = Hv / Hk, Vk = r * dn_shape_.head_v_dim;  // V heads and V width per K head
  if (l.qkvz.data) {
    // Per K head [q | k | v | z] → all q | all k | all v, and z (the split llama.cpp's views make).
    const int64_t group = 2 * Dk + 2 * Vk;
    float* fused = ws.get(kFusedQkvz, T * (C + Vd));
    matmul(l.qkvz, cur, T, E, fused, C + Vd, pool);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hk; ++h) {
        const float* src = fused + t * (C + Vd) + h * group;
        float* row = qkv + t * C;
        std::memcpy(row + h * Dk, src, Dk * sizeof(float));
        std::memcpy(row + Kd + h * Dk, src + Dk, Dk * sizeof(float));
        std::memcpy(row + 2 * Kd + h * Vk, src + 2 * Dk, Vk * sizeof(float));
        std::memcpy(z + t * Vd + h * Vk, src + 2 * Dk + Vk, Vk * sizeof(float));
      }
  } else {
    matmul(l.qkv, cur, T, E, qkv, C, pool);
    matmul(l.z, cur, T, E, z, Vd, pool);
  }
  if (l.beta_alpha.data) {
    // Per K head [beta (r) | alpha (r)] → beta and alpha by V head (grouped: K head h owns V heads
    // h*r .. h*r + r - 1).
    float* fused = ws.get(kFusedBetaAlpha, T * 2 * Hv);
    matmul(l.beta_alpha, cur, T, E, fused, 2 * Hv, pool);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hk; ++h) {
        const float* src = fused + t * 2 * Hv + h * 2 * r;
        std::memcpy(beta + t * Hv + h * r, src, r * sizeof(float));
        std::memcpy(alpha + t * Hv + h * r, src + r, r * sizeof(float));
      }
  } else {
    matmul(l.beta, cur, T, E, beta, Hv, pool);
    matmul(l.alpha, cur, T, E, alpha, Hv, pool);
  }
}

void Qwen35Model::ffn(int il, const float* cur, int64_t rows, float* out, Workspace& ws, ThreadPool& pool) const {
  const auto& cfg = config_;
  const Layer& l = layers_[il];
  const int64_t E = cfg.n_embd;
  if (cfg.n_expert > 0) {
    moe_ffn(l.ffn.moe, cur, rows, E, out, ws, pool);
    return;
  }
  const int64_t F = cfg.n_ff;
  float* gate = ws.get(kGate, rows * F);
  float* up = ws.get(kUp, rows * F);
  matmul(l.ffn.gate, cur, rows, E, gate, F, pool);
  matmul(l.ffn.up, cur, rows, E, up, F, pool);
  for (int64_t t = 0; t < rows; ++t) swiglu(gate + t * F, up + t * F, gate + t * F, F);
  matmul(l.ffn.down, gate, rows, F, out, E, pool);
}

void Qwen35Model::forward(const ForwardBatch& b, ModelMemory& mem, Workspace& ws, ThreadPool& pool) const {
  const auto& cfg = config_;
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  const int64_t E = cfg.n_embd;
  float* x = ws.get(kX, T * E);
  float* cur = ws.get(kCur, T * E);
  float* out = ws.get(kOut, T * E);
  input_rows(b, head_.token_embd, E, cfg.n_embd_input(), x);

  int64_t rows = T;
  for (int il = 0; il < cfg.n_layer; ++il) {
    const Layer& l = layers_[il];
    for (int64_t t = 0; t < T; ++t) rms_norm(x + t * E, l.attn_norm, cur + t * E, E, cfg.rms_eps);
    if (cfg.is_recurrent(il)) delta_net_layer(il, b, mem, cur, out, ws, pool);
    else attention_layer(il, b, mem, cur, out, ws, pool);
    if (il == cfg.n_layer - 1) {  // only the rows whose logits are wanted go further
      rows = keep_output_rows(b.output_rows, E, {x, out});
      if (rows == 0) return;
    }
    for (int64_t i = 0; i < rows * E; ++i) x[i] += out[i];
    for (int64_t t = 0; t < rows; ++t) rms_norm(x + t * E, l.post_attention_norm, cur + t * E, E, cfg.rms_eps);
    ffn(il, cur, rows, out, ws, pool);
    for (int64_t i = 0; i < rows * E; ++i) x[i] += out[i];
  }
  output_head(b, x, rows, E, head_.output_norm, cfg.rms_eps, head_.output, cfg.n_vocab, cur, pool);
}

}  // namespace agentkv
