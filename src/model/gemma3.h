// Gemma 3: a pre- and post-normed decoder (four RMSNorms per block), per-head Q/K norms, NEOX
// RoPE with a base per layer kind, GELU-gated FFN, embeddings scaled by sqrt(n_embd), and five
// sliding-window layers (attention over the last n_swa positions) per global one.
#pragma once
#include <vector>

#include "kernels/matmul.h"
#include "model/attention_block.h"
#include "model/model.h"
#include "model/output_rows.h"

namespace agentkv {

class Gemma3Model final : public ArchModel {
 public:
  Gemma3Model(std::unique_ptr<gguf::Reader> gguf, ModelConfig config);
  void forward(const ForwardBatch& batch, ModelMemory& mem, Workspace& ws,
               ThreadPool& pool) const override;
  bool can_shift() const override { return true; }

 private:
  struct Layer {
    const float* attn_norm;
    AttentionWeights attn;  // Q/K/V/O
    const float* q_norm;
    const float* k_norm;
    const float* attn_post_norm;
    const float* ffn_norm;
    WeightMatrix gate, up, down;
    const float* ffn_post_norm;
  };

  EmbeddingAndHead head_;
  std::vector<Layer> layers_;
  // Scale applied to the queries before attention (llama.cpp's f_attention_scale; the attention
  // itself then scales by 1).
  float query_scale_ = 1.f;
};

}  // namespace agentkv
