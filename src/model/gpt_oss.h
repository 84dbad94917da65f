// gpt-oss: a pre-norm decoder whose attention has Q/K/V/O biases, learned per-head sinks and
// YaRN RoPE, every other layer a sliding window (window from the file), and whose FFN is a
// mixture of experts with biases, top-k of the raw router logits softmaxed over the k chosen,
// and the clamped SwiGLU (llama.cpp's openai-moe graph).
#pragma once
#include <vector>

#include "kernels/matmul.h"
#include "model/attention_block.h"
#include "model/model.h"
#include "model/output_rows.h"
#include "model/moe_ffn.h"

namespace agentkv {

class GptOssModel final : public ArchModel {
 public:
  GptOssModel(std::unique_ptr<gguf::Reader> gguf, ModelConfig config);
  void forward(const ForwardBatch& batch, ModelMemory& mem, Workspace& ws,
               ThreadPool& pool) const override;
  bool can_shift() const override { return true; }

 private:
  struct Layer {
    const float* attn_norm;
    AttentionWeights attn;  // Q/K/V/O
    const float *bq, *bk, *bv, *bo;
    const float* sinks;      // attn_sinks {n_head}
    const float* ffn_norm;   // post_attention_norm: the norm before the experts
    FeedForwardWeights ffn;  // experts
  };

  EmbeddingAndHead head_;
  std::vector<Layer> layers_;
};

}  // namespace agentkv
