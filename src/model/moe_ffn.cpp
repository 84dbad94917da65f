#include "model/moe_ffn.h"

#include <algorithm>
#include <cstring>

#include "kernels/moe_router.h"
#include "kernels/ops.h"
#include "model/weights.h"

namespace agentkv {

FeedForwardWeights bind_feed_forward(WeightBinder& w, const std::string& p, const ModelConfig& cfg) {
  FeedForwardWeights f;
  if (cfg.n_expert > 0) {
    f.moe = bind_moe_weights(w, p, cfg);
  } else {
    f.gate = w.matrix(p + "ffn_gate.weight", cfg.n_embd, cfg.n_ff);
    f.up = w.matrix(p + "ffn_up.weight", cfg.n_embd, cfg.n_ff);
    f.down = w.matrix(p + "ffn_down.weight", cfg.n_ff, cfg.n_embd);
  }
  return f;
}

MoeWeights bind_moe_weights(WeightBinder& w, const std::string& p, const ModelConfig& cfg) {
  MoeWeights m;
  const int64_t E = cfg.n_embd, Fe = cfg.n_ff_expert, Fs = cfg.n_ff_shared;
  m.n_expert = cfg.n_expert;
  m.n_used = cfg.n_expert_used;
  m.router = w.matrix(p + "ffn_gate_inp.weight", E, cfg.n_expert);
  const bool merged = w.has(p + "ffn_gate_up_exps.weight");
  for (int e = 0; e < cfg.n_expert; ++e) {
    if (merged) {
      WeightMatrix gu = w.matrix3d(p + "ffn_gate_up_exps.weight", E, 2 * Fe, cfg.n_expert, e);
      WeightMatrix g = gu, u = gu;  // gate = first half of the rows, up = second half
      g.n_out = u.n_out = Fe;
      u.data = gu.data + Fe * gu.row_bytes;
      m.gate.push_back(g);
      m.up.push_back(u);
    } else {
      m.gate.push_back(w.matrix3d(p + "ffn_gate_exps.weight", E, Fe, cfg.n_expert, e));
      m.up.push_back(w.matrix3d(p + "ffn_up_exps.weight", E, Fe, cfg.n_expert, e));
    }
    m.down.push_back(w.matrix3d(p + "ffn_down_exps.weight", Fe, E, cfg.n_expert, e));
  }
  if (w.has(p + "ffn_gate_inp.bias")) m.router_bias = w.vector(p + "ffn_gate_inp.bias", cfg.n_expert);
  const auto expert_rows = [&](const std::string& name, int64_t width, std::vector<const float*>& rows) {
    if (!w.has(name)) return;
    const float* b = w.f32_matrix(name, width, cfg.n_expert);
    for (int e = 0; e < cfg.n_expert; ++e) rows.push_back(b + static_cast<int64_t>(e) * width);
  };
  expert_rows(p + "ffn_gate_exps.bias", Fe, m.gate_bias);
  expert_rows(p + "ffn_up_exps.bias", Fe, m.up_bias);
  expert_rows(p + "ffn_down_exps.bias", E, m.down_bias);
  m.softmax_weight = cfg.expert_gating_softmax_weight;
  m.normalize_weights = cfg.expert_weights_norm;
  m.swiglu_oai = cfg.expert_swiglu_oai;
  if (Fs > 0) {
    m.shared_gate_inp = w.matrix(p + "ffn_gate_inp_shexp.weight", E, 1);
    m.shared_gate = w.matrix(p + "ffn_gate_shexp.weight", E, Fs);
    m.shared_up = w.matrix(p + "ffn_up_shexp.weight", E, Fs);
    m.shared_down = w.matrix(p + "ffn_down_shexp.weight", Fs, E);
  }
  return m;
}

void moe_ffn(const MoeWeights& w, const float* x, int64_t n, int64_t E, float* out, Workspace& ws,
             ThreadPool& pool) {
  const int64_t Fe = w.gate.front().n_out;
  const int64_t Fs = w.has_shared_expert() ? w.shared_gate.n_out : 0;
  float* router_logits = ws.get(kMoeWorkspaceSlot, n * w.n_expert);
  matmul(w.router, x, n, E, router_logits, w.n_expert, pool);
  if (w.router_bias) add_row_bias(router_logits, n, w.n_expert, w.router_bias);
  MoeRouteParams rp;
  rp.n_expert = w.n_expert;
  rp.n_used = w.n_used;
  rp.softmax_weight = w.softmax_weight;
  rp.normalize = w.normalize_weights;
  const MoeRouting routing = moe_route(router_logits, w.n_expert, n, rp);
  const ExpertGroups groups = group_tokens_by_expert(routing);

  // Each (token, slot) output is kept apart and summed in slot order, as llama.cpp does.
  float* slot_out = ws.get(kMoeWorkspaceSlot + 1, n * w.n_used * E);
  float* xe = ws.get(kMoeWorkspaceSlot + 2, n * E);
  float* gate = ws.get(kMoeWorkspaceSlot + 3, n * std::max(Fe, Fs));
  float* up = ws.get(kMoeWorkspaceSlot + 4, n * std::max(Fe, Fs));
  float* down = ws.get(kMoeWorkspaceSlot + 5, n * E);
  for (int e : groups.active_experts) {
    const int32_t b = groups.begin[e], cnt = groups.count(e);
    for (int32_t r = 0; r < cnt; ++r) std::memcpy(xe + r * E, x + groups.token[b + r] * E, E * sizeof(float));
    // llama.cpp's MUL_MAT_ID runs every expert row through the single-row (GEMV) kernel order.
    matmul(w.gate[e], xe, cnt, E, gate, Fe, pool, RowGrouping::kEachRowAlone);
    matmul(w.up[e], xe, cnt, E, up, Fe, pool, RowGrouping::kEachRowAlone);
    const auto add_bias = [&](const std::vector<const float*>& bias, float* rows, int64_t width) {
      if (!bias.empty()) add_row_bias(rows, cnt, width, bias[static_cast<size_t>(e)]);
    };
    add_bias(w.gate_bias, gate, Fe);
    add_bias(w.up_bias, up, Fe);
    for (int32_t r = 0; r < cnt; ++r) {
      if (w.swiglu_oai) swiglu_oai(gate + r * Fe, up + r * Fe, gate + r * Fe, Fe);
      else swiglu(gate + r * Fe, up + r * Fe, gate + r * Fe, Fe);
    }
    matmul(w.down[e], gate, cnt, Fe, down, E, pool, RowGrouping::kEachRowAlone);
    add_bias(w.down_bias, down, E);
    for (int32_t r = 0; r < cnt; ++r) {
      const int32_t t = groups.token[b + r], s = groups.slot[b + r];
      const float wt = routing.weights[t * w.n_used + s];
      float* dst = slot_out + (static_cast<int64_t>(t) * w.n_used + s) * E;
      for (int64_t i = 0; i < E; ++i) dst[i] = down[r * E + i] * wt;
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * E;
    std::memcpy(o, slot_out + t * w.n_used * E, E * sizeof(float));
    for (int s = 1; s < w.n_used; ++s) {
      const float* src = slot_out + (t * w.n_used + s) * E;
      for (int64_t i = 0; i < E; ++i) o[i] += src[i];
    }
  }

  if (!w.has_shared_expert()) return;
  // Shared expert, scaled by sigmoid of its scalar gate.
  float* sgate = ws.get(kMoeWorkspaceSlot + 6, n);
  matmul(w.shared_gate_inp, x, n, E, sgate, 1, pool);
  matmul(w.shared_gate, x, n, E, gate, Fs, pool);
  matmul(w.shared_up, x, n, E, up, Fs, pool);
  for (int64_t t = 0; t < n; ++t) swiglu(gate + t * Fs, up + t * Fs, gate + t * Fs, Fs);
  matmul(w.shared_down, gate, n, Fs, down, E, pool);
  for (int64_t t = 0; t < n; ++t) {
    const float s = sigmoid(sgate[t]);
    for (int64_t i = 0; i < E; ++i) out[t * E + i] += down[t * E + i] * s;
  }
}

}  // namespace agentkv
