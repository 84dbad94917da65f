// The plain pre-norm decoder, every layer attention then feed-forward: Qwen3 (per-head Q/K RMSNorm,
// NEOX RoPE), Qwen3-MoE (the same with routed experts, no shared expert) and Llama / Mistral
// (no Q/K norm, adjacent-pair RoPE with Llama 3's rope_freqs; Mixtral-style experts when the
// file has them), Qwen3-VL / Qwen3-VL-MoE (Qwen3's layers with image rows, interleaved multi-axis
// rope and deepstack slices added to the first layers' outputs). What differs per architecture is
// in TransformerModel's constructor.
#pragma once
#include <vector>

#include "kernels/matmul.h"
#include "model/attention_block.h"
#include "model/model.h"
#include "model/output_rows.h"
#include "model/moe_ffn.h"

namespace agentkv {

class TransformerModel final : public ArchModel {
 public:
  TransformerModel(std::unique_ptr<gguf::Reader> gguf, ModelConfig config);
  void forward(const ForwardBatch& batch, ModelMemory& mem, Workspace& ws,
               ThreadPool& pool) const override;
  RopeSpec rope() const override { return rope_; }
  // RoPE on text positions: stored keys can be re-rotated (context shift); not Qwen3-VL's
  // multi-axis positions (llama.cpp refuses IMROPE too).
  bool can_shift() const override { return !config_.is_qwen3vl(); }
  bool takes_images() const override { return config_.is_qwen3vl(); }

 private:
  struct Layer {
    const float* attn_norm;
    AttentionWeights attn;  // Q/K/V/O
    const float* q_norm = nullptr;  // Qwen3 families only
    const float* k_norm = nullptr;
    const float* ffn_norm;
    FeedForwardWeights ffn;  // dense FFN or experts
  };
  // Qwen3-VL: adds the deepstack slice of layer il to the image tokens' rows of x.
  void add_deepstack(const ForwardBatch& b, int il, float* x) const;
  void dense_ffn(const Layer& l, const float* cur, int64_t rows, float* out, float* scratch,
                 int64_t block_rows, ThreadPool& pool) const;

  RopeSpec rope_;
  EmbeddingAndHead head_;
  std::vector<Layer> layers_;
};

}  // namespace agentkv
