// Mixture-of-experts FFN (qwen3moe, Mixtral-style llama; with a gated shared expert: qwen35moe /
// qwen3next): tokens are grouped by expert so each selected expert's weights are read once per
// micro-batch, not once per token.
#pragma once
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "model/model.h"

namespace agentkv {

struct MoeWeights {
  int n_expert = 0;
  int n_used = 0;
  WeightMatrix router;                       // ffn_gate_inp {E, n_expert}
  std::vector<WeightMatrix> gate, up, down;  // per expert slices of the *_exps tensors
  // Optional biases (gpt-oss), F32: ffn_gate_inp.bias {n_expert} added to the router logits;
  // per expert rows of ffn_{gate,up}_exps.bias {n_ff_exp, n_expert} / ffn_down_exps.bias
  // {E, n_expert} added to that expert's matmul outputs (llama.cpp's ggml_add_id). Empty: none.
  const float* router_bias = nullptr;
  std::vector<const float*> gate_bias, up_bias, down_bias;
  // ModelConfig's gating and activation (expert_gating_softmax_weight, expert_weights_norm,
  // expert_swiglu_oai).
  bool softmax_weight = false;
  bool normalize_weights = true;
  bool swiglu_oai = false;
  // The gated shared expert (absent: data null).
  WeightMatrix shared_gate_inp;              // ffn_gate_inp_shexp {E} as a 1-row matrix
  WeightMatrix shared_gate, shared_up, shared_down;
  bool has_shared_expert() const { return shared_gate.data != nullptr; }
};

class WeightBinder;
struct ModelConfig;
// Binds block `prefix`'s expert tensors as llama.cpp's converter names them (ffn_gate_inp,
// ffn_{gate,up,down}_exps or the merged ffn_gate_up_exps, their .bias tensors when present) and,
// when the config has a shared expert width, the *_shexp ones.
MoeWeights bind_moe_weights(WeightBinder& w, const std::string& prefix, const ModelConfig& cfg);

// A block's feed-forward weights: the dense SwiGLU matrices (ffn_{gate,up,down}), or the experts
// when the config has them (n_expert > 0).
struct FeedForwardWeights {
  WeightMatrix gate, up, down;
  MoeWeights moe;
};
FeedForwardWeights bind_feed_forward(WeightBinder& w, const std::string& prefix, const ModelConfig& cfg);

// Workspace slots 24..31 belong to this block.
constexpr int kMoeWorkspaceSlot = 24;

// out[t] = sum_slot w * expert(x[t]) [+ sigmoid(shared_gate_inp . x[t]) * shared(x[t])] for n
// rows of E floats; expert(x) = down(act(gate(x) [+ b], up(x) [+ b])) [+ b], act SwiGLU or
// swiglu_oai.
void moe_ffn(const MoeWeights& w, const float* x, int64_t n, int64_t E, float* out, Workspace& ws,
             ThreadPool& pool);

}  // namespace agentkv
