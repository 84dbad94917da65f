// Qwen3 dense decoder: RMSNorm, GQA attention with per-head Q/K RMSNorm and NEOX RoPE, SwiGLU FFN.
#pragma once
#include <vector>

#include "kernels/matmul.h"
#include "model/model.h"

namespace agentkv {

class Qwen3Model final : public ArchModel {
 public:
  Qwen3Model(std::unique_ptr<gguf::Reader> gguf, ModelConfig config);
  void forward(const ForwardBatch& batch, ModelMemory& mem, Workspace& ws,
               ThreadPool& pool) const override;
  // NEOX RoPE on text positions: stored keys can be re-rotated (context shift).
  bool can_shift() const override { return true; }

 private:
  struct Layer {
    const float* attn_norm;
    WeightMatrix wq, wk, wv, wo;
    const float* q_norm;
    const float* k_norm;
    const float* ffn_norm;
    WeightMatrix ffn_gate, ffn_up, ffn_down;
  };
  WeightMatrix token_embd_;
  const float* output_norm_ = nullptr;
  WeightMatrix output_;
  std::vector<Layer> layers_;
};

}  // namespace agentkv
