// Hyperparameters of a model, as read from its GGUF metadata (under the architecture's key prefix;
// src/model/config.h reads them).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace agentkv {

// Plain decoders (Qwen3, Qwen3-MoE, Llama / Mistral incl. Mixtral-style experts, Qwen3-VL and
// Qwen3-VL-MoE: Qwen3's layers with image input and deepstack), the hybrids and the
// sliding-window decoders (Gemma 3, gpt-oss).
enum class Arch { Qwen3, Qwen3Moe, Llama, Qwen35, Qwen35Moe, Qwen3Next, Gemma3, GptOss, Qwen3VL, Qwen3VLMoe };
const char* arch_name(Arch a);

struct ModelConfig {
  Arch arch = Arch::Qwen3;
  std::string arch_key;  // GGUF spelling: "qwen3", "qwen3moe", "llama", "qwen35", ...
  std::string name;      // general.name if present
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int n_layer = 0;       // trunk layers (block_count minus MTP layers)
  int n_layer_file = 0;  // block_count as stored (includes MTP layers)
  int n_head = 0;
  int n_head_kv = 0;
  int64_t head_dim_k = 0;  // attention.key_length
  int64_t head_dim_v = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-6f;
  float rope_freq_base = 10000.f;
  float rope_freq_scale = 1.f;
  // YaRN (rope.scaling.type = yarn), as llama.cpp sets it up: ext_factor 1 (0 otherwise),
  // beta_fast 32 and beta_slow 1, the original context rope.scaling.original_context_length (else
  // context_length), attn_factor get_mscale(factor) / (1 + 0.1 ln factor) times
  // rope.scaling.attn_factor (that key alone for the other scalings).
  float rope_yarn_ext_factor = 0.f;
  float rope_yarn_attn_factor = 1.f;
  float rope_yarn_beta_fast = 32.f;
  float rope_yarn_beta_slow = 1.f;
  int64_t rope_n_ctx_orig = 0;
  int64_t n_rot = 0;  // rotary dims per head (partial rotary when < head_dim)
  std::array<int32_t, 4> rope_sections{0, 0, 0, 0};
  float attn_scale = 0.f;  // 0 → 1/sqrt(head_dim_k)
  bool tied_output = false;
  float final_logit_softcap = 0.f;  // 0: none; else logits = c * tanh(logits / c) (Gemma)
  // Qwen3-VL's deepstack: an image token's input row carries, after its n_embd floats, one more
  // n_embd slice per deepstack layer, added to the output of trunk layers 0 .. n - 1.
  int n_deepstack_layers = 0;

  // Sliding-window attention: layer il attends only to keys at positions > its query's - n_swa
  // (llama.cpp's LLAMA_SWA_TYPE_STANDARD) when layer_swa[il]; empty / 0 without windows. The
  // windowed layers rotate with their own base and scale (Gemma 3: 10000 locally, 1e6 globally;
  // gpt-oss: the main ones unless rope.freq_base_swa says otherwise).
  int32_t n_swa = 0;
  std::vector<bool> layer_swa;
  float rope_freq_base_swa = 10000.f;
  float rope_freq_scale_swa = 1.f;

  // Hybrid (Gated DeltaNet) parameters; empty / zero for dense models.
  std::vector<bool> layer_recurrent;  // per trunk layer
  int ssm_d_conv = 0;
  int64_t ssm_d_state = 0;   // D_k = D_v
  int ssm_n_v_heads = 0;     // time_step_rank = H_v
  int ssm_n_k_heads = 0;     // group_count = H_k
  int64_t ssm_d_inner = 0;   // H_v * D_v

  // Mixture of experts.
  int n_expert = 0;
  int n_expert_used = 0;
  int64_t n_ff_expert = 0;
  int64_t n_ff_shared = 0;  // the shared expert's width; 0: none (qwen3moe, Mixtral)
  // llama.cpp's build_moe_ffn options. Defaults: softmax over every expert, top-k, weights
  // renormalised, SwiGLU (qwen3moe, qwen35moe, Mixtral). gpt-oss: LLAMA_EXPERT_GATING_FUNC_TYPE_
  // SOFTMAX_WEIGHT (top-k of the raw logits, softmax over the k), no renormalisation, swiglu_oai.
  bool expert_gating_softmax_weight = false;
  bool expert_weights_norm = true;
  bool expert_swiglu_oai = false;

  bool is_hybrid() const;
  // Every layer attention + FFN (qwen3, qwen3moe, llama, qwen3vl, qwen3vlmoe): model/transformer.cpp.
  bool is_plain_decoder() const {
    return arch == Arch::Qwen3 || arch == Arch::Qwen3Moe || arch == Arch::Llama || is_qwen3vl();
  }
  // Qwen3-VL (dense or MoE): Qwen3's layers, interleaved multi-axis rope, image input.
  bool is_qwen3vl() const { return arch == Arch::Qwen3VL || arch == Arch::Qwen3VLMoe; }
  // Floats per input row (llama.cpp's n_embd_inp): n_embd, times 1 + n_deepstack_layers.
  int64_t n_embd_input() const { return n_embd * (1 + n_deepstack_layers); }
  bool is_recurrent(int il) const { return !layer_recurrent.empty() && layer_recurrent[il]; }
  bool is_swa(int il) const { return !layer_swa.empty() && layer_swa[il]; }
  // The window layer il attends over (0: every earlier key).
  int32_t attention_window(int il) const { return is_swa(il) ? n_swa : 0; }
  int n_attention_layers() const;
  // The scale of attention scores: attn_scale, or 1/sqrt(head_dim_k) when the model names none.
  float attention_scale() const;
};

}  // namespace agentkv
