// Qwen3.5 hybrid decoder (qwen35 dense FFN, qwen35moe mixture of experts) and its predecessor
// Qwen3-Next (qwen3next: the same layers, with beta and alpha projected together per K head, V heads
// in grouped order, and in older files q, k, v and z projected together per K head): Gated
// DeltaNet layers with gated full-attention layers every few layers. Math: ../shared/reference/llama.cpp-anatomy.md §6.
#pragma once
#include <vector>

#include "kernels/delta_net.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "model/output_rows.h"
#include "model/moe_ffn.h"

namespace agentkv {

class Qwen35Model final : public ArchModel {
 public:
  Qwen35Model(std::unique_ptr<gguf::Reader> gguf, ModelConfig config);
  void forward(const ForwardBatch& batch, ModelMemory& mem, Workspace& ws,
               ThreadPool& pool) const override;
  // IMROPE (multi-section RoPE): llama.cpp refuses context shift for it, and the recurrent
  // layers could not follow a shift anyway.
  bool can_shift() const override { return false; }
  // Qwen3.5 (dense and MoE) reads images through its vision projector; Qwen3-Next has none.
  bool takes_images() const override { return config_.arch != Arch::Qwen3Next; }
  void replay_recurrent(memory::RecurrentMemory& rec, uint32_t cell, const memory::RecurrentTape& tape, int64_t n,
                        ThreadPool& pool) const override;

 private:
  struct Layer {
    const float* attn_norm = nullptr;
    const float* post_attention_norm = nullptr;
    // gated attention
    WeightMatrix wq_gate, wk, wv, wo;  // wq_gate rows: per head [q (D) | gate (D)]
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    // Gated DeltaNet
    WeightMatrix qkv, z, beta, alpha, ssm_out;
    WeightMatrix beta_alpha;  // qwen3next: ssm_ba, per K head [beta (r) | alpha (r)], r = H_v / H_k
    WeightMatrix qkvz;        // older qwen3next files: ssm_in, per K head [q | k | v (r heads) | z (r heads)]
    const float* conv1d = nullptr;  // {d_conv, C}
    const float* dt_bias = nullptr;
    const float* ssm_a = nullptr;
    const float* ssm_norm = nullptr;
    FeedForwardWeights ffn;  // dense or MoE
  };
  void attention_layer(int il, const ForwardBatch& b, ModelMemory& mem, const float* cur, float* out,
                       Workspace& ws, ThreadPool& pool) const;
  void delta_net_layer(int il, const ForwardBatch& b, ModelMemory& mem, const float* cur, float* out,
                       Workspace& ws, ThreadPool& pool) const;
  // The projections of a DeltaNet layer: qkv (T x C, all q | all k | all v), z (T x Vd), beta
  // and alpha (T x H_v each), from whichever tensors the file has.
  void delta_net_projections(const Layer& l, const float* cur, int64_t T, float* qkv, float* z, float* beta,
                             float* alpha, Workspace& ws, ThreadPool& pool) const;
  void ffn(int il, const float* cur, int64_t rows, float* out, Workspace& ws, ThreadPool& pool) const;

  DeltaNetShape dn_shape_;
  EmbeddingAndHead head_;
  std::vector<Layer> layers_;
};

}  // namespace agentkv
