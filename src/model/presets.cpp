#include "model/presets.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"
#include "model/preset_vocab.h"
#include "model/random_weights.h"

#include <nlohmann/json.hpp>

namespace agentkv::mkmodel {
namespace fs = std::filesystem;

namespace {

ModelShape qwen3_shape(std::string name, std::string description, int64_t n_embd, int64_t n_layer,
                       int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_ff) {
  ModelShape s;
  s.name = std::move(name);
  s.description = std::move(description);
  s.arch = "qwen3";
  s.n_embd = n_embd;
  s.n_layer = n_layer;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.head_dim = head_dim;
  s.n_ff = n_ff;
  return s;
}

// The hybrid fixtures: 3 Gated-DeltaNet layers per gated-attention layer, partial IMROPE.
ModelShape qwen35_micro_shape(bool moe) {
  ModelShape s;
  s.name = moe ? "qwen35moe-micro" : "qwen35-micro";
  s.description = moe ? "fixture qwen35moe-micro: hybrid, E=64, 4 layers, 4 experts / 2 used"
                      : "fixture qwen35-micro: dense hybrid, E=64, 4 layers, FFN 128";
  s.arch = moe ? "qwen35moe" : "qwen35";
  s.n_embd = 64;
  s.n_layer = 4;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.head_dim = 32;
  s.n_ff = moe ? 0 : 128;
  s.tied_output = false;
  s.rope_freq_base = 1e7f;
  s.context_length = 262144;
  s.full_attention_interval = 4;
  s.rope_dim = 16;
  s.rope_sections = {3, 3, 2, 0};
  s.ssm_conv_kernel = 4;
  s.ssm_state_size = 16;
  s.ssm_group_count = 2;
  s.ssm_time_step_rank = 4;
  s.ssm_inner_size = 64;
  if (moe) {
    s.n_expert = 4;
    s.n_expert_used = 2;
    s.n_ff_exp = 64;
    s.n_ff_shexp = 64;
  }
  return s;
}

// Holo3 / Qwen3.5-35B-A3B scaled down to ~860M parameters, keeping its ratios: head dim 256,
// rotary on a quarter of it (sections 11/11/10 as the real model), 2 V heads per K head.
ModelShape qwen35moe_bench_shape() {
  ModelShape s = qwen35_micro_shape(true);
  s.name = "qwen35moe-bench";
  s.description = "scaled-down Qwen3.5-35B-A3B: E=1024, 16 layers, 32 experts / 4 used, ~860M params";
  s.n_embd = 1024;
  s.n_layer = 16;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 256;
  s.rope_dim = 64;
  s.rope_sections = {11, 11, 10, 0};
  s.ssm_state_size = 128;
  s.ssm_group_count = 8;
  s.ssm_time_step_rank = 16;
  s.ssm_inner_size = 16 * 128;
  s.n_expert = 32;
  s.n_expert_used = 4;
  s.n_ff_exp = 256;
  s.n_ff_shexp = 256;
  return s;
}

// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen3 attention, routed experts without a
// shared one, untied head.
ModelShape qwen3moe_shape(std::string name, std::string description, int64_t n_embd, int64_t n_layer,
                          int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_expert,
                          int64_t n_expert_used, int64_t n_ff_exp) {
  ModelShape s = qwen3_shape(std::move(name), std::move(description), n_embd, n_layer, n_head, n_head_kv,
                             head_dim, 0);
  s.arch = "qwen3moe";
  s.tied_output = false;
  s.context_length = 262144;
  s.rope_freq_base = 1e7f;
  s.n_expert = n_expert;
  s.n_expert_used = n_expert_used;
  s.n_ff_exp = n_ff_exp;
  return s;
}

// Qwen3-VL (Qwen3-VL-2B/4B/8B's text model) and Qwen3-VL-MoE from a Qwen3 / Qwen3-MoE shape: IMROPE
// sections 24/20/20 of 64 pairs (scaled to the head size), theta 5e6, three deepstack layers in the
// real models.
ModelShape as_qwen3vl(ModelShape s, int32_t n_deepstack) {
  s.arch = s.is_moe() ? "qwen3vlmoe" : "qwen3vl";
  s.context_length = 262144;
  s.rope_freq_base = 5e6f;
  const auto pairs = static_cast<int32_t>(s.head_dim / 2);
  const int32_t hw = pairs * 20 / 64;
  s.rope_sections = {pairs - 2 * hw, hw, hw, 0};
  s.n_deepstack_layers = n_deepstack;
  return s;
}

// Llama 3.x: no Q/K norm, Llama 3.1 RoPE scaling, Llama 3's chat vocabulary and template.
ModelShape llama_shape(std::string name, std::string description, int64_t n_embd, int64_t n_layer,
                       int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_ff, bool tied) {
  ModelShape s = qwen3_shape(std::move(name), std::move(description), n_embd, n_layer, n_head, n_head_kv,
                             head_dim, n_ff);
  s.arch = "llama";
  s.tied_output = tied;
  s.rope_freq_base = 500000.f;
  s.rms_eps = 1e-5f;
  s.context_length = 131072;
  s.rope_llama3_factor = 32.f;  // Llama 3.2's (3.1 uses 8)
  s.chat_vocab = ModelShape::ChatVocab::Llama3;
  return s;
}

// Mistral Small 3.x / Devstral as the converter writes them (`llama`, no RoPE scaling, theta 1e9),
// with Mistral's chat vocabulary: [TOOL_CALLS] / [CALL_ID] / [ARGS] control tokens, tekken.
ModelShape mistral_shape(std::string name, std::string description, int64_t n_embd, int64_t n_layer,
                         int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_ff) {
  ModelShape s = llama_shape(std::move(name), std::move(description), n_embd, n_layer, n_head, n_head_kv, head_dim,
                             n_ff, false);
  s.rope_freq_base = 1e9f;
  s.rope_llama3_factor = 0.f;
  s.chat_vocab = ModelShape::ChatVocab::Mistral;
  return s;
}

// Gemma 3 as the converter writes it: Q/K norms, sandwich norms, GELU-gated FFN, tied head,
// sliding-window layers (five per global one), Gemma's chat vocabulary.
ModelShape gemma3_shape(std::string name, std::string description, int64_t n_embd, int64_t n_layer,
                        int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_ff, int32_t window) {
  ModelShape s = qwen3_shape(std::move(name), std::move(description), n_embd, n_layer, n_head, n_head_kv,
                             head_dim, n_ff);
  s.arch = "gemma3";
  s.context_length = 32768;
  s.rope_freq_base = 1e6f;
  s.sliding_window = window;
  s.chat_vocab = ModelShape::ChatVocab::Gemma3;
  return s;
}

// gpt-oss as the converter writes it: biased attention with sinks, YaRN (factor 32 over 4,096),
// every other layer a sliding window, biased experts (4 used), untied head, harmony chat vocabulary.
ModelShape gpt_oss_shape(std::string name, std::string description, int64_t n_embd, int64_t n_layer,
                         int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_expert,
                         int64_t n_expert_used, int64_t n_ff_exp, int32_t window) {
  ModelShape s = qwen3moe_shape(std::move(name), std::move(description), n_embd, n_layer, n_head, n_head_kv,
                                head_dim, n_expert, n_expert_used, n_ff_exp);
  s.arch = "gpt-oss";
  s.context_length = 131072;
  s.rope_freq_base = 150000.f;
  s.rms_eps = 1e-5f;
  s.rope_yarn_factor = 32.f;
  s.rope_yarn_original_context = 4096;
  s.sliding_window = window;
  s.chat_vocab = ModelShape::ChatVocab::Harmony;
  return s;
}

std::vector<ModelShape> make_presets() {
  std::vector<ModelShape> p;
  p.push_back(qwen3_shape("qwen3-0.6b", "Qwen3-0.6B: E=1024, 28 layers, 16/8 heads, FFN 3072",
                          1024, 28, 16, 8, 128, 3072));
  p.push_back(qwen3_shape("qwen3-micro", "fixture qwen3-micro: E=64, 2 layers, 2/1 heads, FFN 128",
                          64, 2, 2, 1, 32, 128));
  p.push_back(qwen3_shape("qwen3-tiny", "fixture qwen3-tiny: E=256, 4 layers, 4/2 heads, FFN 768",
                          256, 4, 4, 2, 64, 768));
  p.push_back(qwen3_shape("qwen3-test", "smallest dense model for smoke tests (= qwen3-micro shape)",
                          64, 2, 2, 1, 32, 128));
  p.push_back(qwen35_micro_shape(false));
  p.push_back(qwen35_micro_shape(true));
  p.push_back(qwen35moe_bench_shape());
  {
    ModelShape next = qwen35_micro_shape(true);  // Qwen3-Next-80B-A3B's layers at the fixture's size
    next.name = "qwen3next-micro";
    next.description = "fixture qwen3next-micro: hybrid (Qwen3-Next), E=64, 4 layers, 4 experts / 2 used + shared";
    next.arch = "qwen3next";
    next.rope_sections = {};
    p.push_back(next);
  }
  p.push_back(qwen3moe_shape("qwen3moe-micro", "fixture qwen3moe-micro: E=64, 2 layers, 2/1 heads, 4 experts / 2 used, expert FFN 64",
                             64, 2, 2, 1, 32, 4, 2, 64));
  p.push_back(qwen3moe_shape("qwen3moe-bench", "scaled-down Qwen3-30B-A3B: E=1024, 16 layers, 16/2 heads, 32 experts / 8 used, ~1B params",
                             1024, 16, 16, 2, 128, 32, 8, 384));
  p.push_back(as_qwen3vl(qwen3_shape("qwen3vl-micro", "fixture qwen3vl-micro: Qwen3-VL structure, E=64, 4 layers (2 take deepstack slices), 2/1 heads, FFN 128",
                                     64, 4, 2, 1, 32, 128), 2));
  p.push_back(as_qwen3vl(qwen3moe_shape("qwen3vlmoe-micro", "fixture qwen3vlmoe-micro: Qwen3-VL-MoE structure, E=64, 4 layers (2 take deepstack slices), 4 experts / 2 used",
                                        64, 4, 2, 1, 32, 4, 2, 64), 2));
  p.push_back(llama_shape("llama-micro", "fixture llama-micro: Llama 3 structure, E=64, 2 layers, 4/2 heads, FFN 128",
                          64, 2, 4, 2, 16, 128, false));
  p.push_back(mistral_shape("mistral-micro", "fixture mistral-micro: Mistral Small 3.2's chat vocabulary on llama-micro's structure",
                            64, 2, 4, 2, 16, 128));
  p.push_back(llama_shape("llama-1b", "Llama 3.2 1B's shape: E=2048, 16 layers, 32/8 heads, FFN 8192, tied",
                          2048, 16, 32, 8, 64, 8192, true));
  // A window of 16 so that the fixture prompts (up to ~60 tokens) reach past it.
  p.push_back(gemma3_shape("gemma3-micro", "fixture gemma3-micro: Gemma 3 structure, E=64, 6 layers (5 sliding-window of 16 + 1 global), 2/1 heads, FFN 128",
                           64, 6, 2, 1, 32, 128, 16));
  p.push_back(gpt_oss_shape("gpt-oss-micro", "fixture gpt-oss-micro: gpt-oss structure, E=64, 4 layers (window 16 every other), 2/1 heads, 4 experts / 2 used, expert FFN 64",
                            64, 4, 2, 1, 32, 4, 2, 64, 16));
  // For speed: gpt-oss-20b's layer structure (window 128 every other layer, sinks, biases, YaRN,
  // 32 experts / 4 used) at E=1024; its experts in MXFP4 with `--type mxfp4_moe`.
  p.push_back(gpt_oss_shape("gpt-oss-bench", "scaled-down gpt-oss-20b: E=1024, 8 layers (window 128 every other), 16/2 heads of 64, 32 experts / 4 used, expert FFN 1024, ~1.1B params",
                            1024, 8, 16, 2, 64, 32, 4, 1024, 128));
  {
    ModelShape g = gemma3_shape("gemma3-1b", "Gemma 3 1B's shape: E=1152, 26 layers (window 512, 5 local : 1 global), 4/1 heads of 256, FFN 6912, vocab 262144",
                                1152, 26, 4, 1, 256, 6912, 512);
    g.n_vocab = 262144;
    p.push_back(g);
  }
  return p;
}

// --- tensor list -----------------------------------------------------------------------------

struct TensorList {
  std::vector<PlannedTensor> tensors;

  void add(std::string name, std::vector<int64_t> ne, Init init, float a = 0.f, float b = 0.f) {
    PlannedTensor t;
    t.name = std::move(name);
    t.ne = std::move(ne);
    t.init = init;
    t.a = a;
    t.b = b;
    tensors.push_back(std::move(t));
  }
  void matrix(std::string name, std::vector<int64_t> ne) { add(std::move(name), std::move(ne), Init::Normal, 0.1f); }
  void norm(std::string name, int64_t n) { add(std::move(name), {n}, Init::Ones); }
};

constexpr float kEmbeddingStd = 0.4f;
constexpr float kRouterStd = 0.02f;
constexpr float kConvStd = 0.2f;
constexpr float kDtBiasStd = 0.1f;
constexpr float kBiasStd = 0.1f;  // gpt-oss's attention and expert biases
constexpr float kSinkStd = 1.0f;  // its sinks: logits of the order of the scores'

void add_attention(TensorList& l, const ModelShape& s, const std::string& p) {
  const bool qk_norm = s.has_qk_norm();
  const int64_t E = s.n_embd, D = s.head_dim;
  // Qwen3.5's gated attention projects Q and its output gate together (2x the query width).
  const int64_t q_width = (s.is_hybrid() ? 2 : 1) * s.n_head * D;
  l.matrix(p + "attn_q.weight", {E, q_width});
  l.matrix(p + "attn_k.weight", {E, s.n_head_kv * D});
  l.matrix(p + "attn_v.weight", {E, s.n_head_kv * D});
  l.matrix(p + "attn_output.weight", {s.n_head * D, E});
  if (s.has_attention_biases()) {
    l.add(p + "attn_q.bias", {q_width}, Init::Normal, kBiasStd);
    l.add(p + "attn_k.bias", {s.n_head_kv * D}, Init::Normal, kBiasStd);
    l.add(p + "attn_v.bias", {s.n_head_kv * D}, Init::Normal, kBiasStd);
    l.add(p + "attn_output.bias", {E}, Init::Normal, kBiasStd);
    l.add(p + "attn_sinks.weight", {s.n_head}, Init::Normal, kSinkStd);
  }
  if (!qk_norm) return;
  l.norm(p + "attn_q_norm.weight", D);
  l.norm(p + "attn_k_norm.weight", D);
}

void add_delta_net(TensorList& l, const ModelShape& s, const std::string& p) {
  const int64_t E = s.n_embd;
  const int64_t n_v_heads = s.ssm_time_step_rank;
  const int64_t qkv_width = 2 * s.ssm_group_count * s.ssm_state_size + s.ssm_inner_size;
  l.matrix(p + "attn_qkv.weight", {E, qkv_width});
  l.matrix(p + "attn_gate.weight", {E, s.ssm_inner_size});
  l.add(p + "ssm_conv1d.weight", {s.ssm_conv_kernel, qkv_width}, Init::Normal, kConvStd);
  l.add(p + "ssm_dt.bias", {n_v_heads}, Init::Normal, kDtBiasStd);
  // ssm_a = -A with A in [1, 16), the range of Qwen3-Next's A_log initialisation.
  l.add(p + "ssm_a", {n_v_heads}, Init::Uniform, -16.f, -1.f);
  if (s.arch == "qwen3next") {  // beta and alpha projected together, per K head
    l.matrix(p + "ssm_ba.weight", {E, 2 * n_v_heads});
  } else {
    l.matrix(p + "ssm_beta.weight", {E, n_v_heads});
    l.matrix(p + "ssm_alpha.weight", {E, n_v_heads});
  }
  l.norm(p + "ssm_norm.weight", s.ssm_inner_size / n_v_heads);
  l.matrix(p + "ssm_out.weight", {s.ssm_inner_size, E});
}

void add_ffn(TensorList& l, const ModelShape& s, const std::string& p) {
  const int64_t E = s.n_embd;
  if (!s.is_moe()) {
    l.matrix(p + "ffn_gate.weight", {E, s.n_ff});
    l.matrix(p + "ffn_up.weight", {E, s.n_ff});
    l.matrix(p + "ffn_down.weight", {s.n_ff, E});
    return;
  }
  l.add(p + "ffn_gate_inp.weight", {E, s.n_expert}, Init::Normal, kRouterStd);
  l.matrix(p + "ffn_gate_exps.weight", {E, s.n_ff_exp, s.n_expert});
  l.matrix(p + "ffn_up_exps.weight", {E, s.n_ff_exp, s.n_expert});
  l.matrix(p + "ffn_down_exps.weight", {s.n_ff_exp, E, s.n_expert});
  if (s.has_attention_biases()) {
    l.add(p + "ffn_gate_inp.bias", {s.n_expert}, Init::Normal, kBiasStd);
    l.add(p + "ffn_gate_exps.bias", {s.n_ff_exp, s.n_expert}, Init::Normal, kBiasStd);
    l.add(p + "ffn_up_exps.bias", {s.n_ff_exp, s.n_expert}, Init::Normal, kBiasStd);
    l.add(p + "ffn_down_exps.bias", {E, s.n_expert}, Init::Normal, kBiasStd);
  }
  if (s.n_ff_shexp == 0) return;
  l.add(p + "ffn_gate_inp_shexp.weight", {E}, Init::Normal, kRouterStd);
  l.matrix(p + "ffn_gate_shexp.weight", {E, s.n_ff_shexp});
  l.matrix(p + "ffn_up_shexp.weight", {E, s.n_ff_shexp});
  l.matrix(p + "ffn_down_shexp.weight", {s.n_ff_shexp, E});
}

// Converter order: embeddings, final norm, head, then each block.
std::vector<PlannedTensor> converter_tensors(const ModelShape& s) {
  TensorList l;
  if (s.rope_llama3_factor != 0.f) {  // the converter yields it before the model's own tensors
    l.add("rope_freqs.weight", {s.head_dim / 2}, Init::RopeFactors, s.rope_freq_base, s.rope_llama3_factor);
    l.tensors.back().c = static_cast<float>(s.rope_llama3_original_context);
  }
  l.add("token_embd.weight", {s.n_embd, s.n_vocab}, Init::Normal, kEmbeddingStd);
  l.norm("output_norm.weight", s.n_embd);
  if (!s.tied_output) l.add("output.weight", {s.n_embd, s.n_vocab}, Init::Normal, kEmbeddingStd);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    l.norm(p + "attn_norm.weight", s.n_embd);
    if (s.is_hybrid()) {
      l.norm(p + "post_attention_norm.weight", s.n_embd);
      if (s.is_full_attention_layer(il)) add_attention(l, s, p);
      else add_delta_net(l, s, p);
    } else {
      add_attention(l, s, p);
      if (s.has_post_norms() || s.has_attention_biases()) l.norm(p + "post_attention_norm.weight", s.n_embd);
      if (!s.has_attention_biases()) l.norm(p + "ffn_norm.weight", s.n_embd);  // gpt-oss's is the one above
    }
    add_ffn(l, s, p);
    if (s.has_post_norms()) l.norm(p + "post_ffw_norm.weight", s.n_embd);
  }
  return std::move(l.tensors);
}

void validate(const ModelShape& s) {
  auto positive = [&](int64_t v, const char* what) {
    if (v <= 0) throw Error("model shape " + s.name + ": " + what + " must be positive");
  };
  positive(s.n_embd, "n_embd");
  positive(s.n_layer, "n_layer");
  positive(s.n_head, "n_head");
  positive(s.n_head_kv, "n_head_kv");
  positive(s.head_dim, "head_dim");
  positive(s.n_vocab, "n_vocab");
  if (s.is_moe()) {
    positive(s.n_expert_used, "n_expert_used");
    positive(s.n_ff_exp, "n_ff_exp");
    if (s.n_ff_shexp < 0) throw Error("model shape " + s.name + ": n_ff_shexp must not be negative");
  } else {
    positive(s.n_ff, "n_ff");
  }
  if (s.is_hybrid()) {
    positive(s.ssm_time_step_rank, "ssm_time_step_rank");
    positive(s.ssm_group_count, "ssm_group_count");
    positive(s.ssm_state_size, "ssm_state_size");
    positive(s.ssm_conv_kernel, "ssm_conv_kernel");
    if (s.ssm_inner_size <= 0 || s.ssm_inner_size % s.ssm_time_step_rank != 0)
      throw Error("model shape " + s.name + ": ssm_inner_size must be a multiple of the V heads");
  }
}

// --- weights ----------------------------------------------------------------------------------

void encode_row(const PlannedTensor& t, float* values, int64_t n, uint8_t* dst) {
  // Quantized files are made from the converter's file: values pass through its type first.
  if (t.source_type == GgmlType::F16 && t.type != GgmlType::F16)
    for (int64_t i = 0; i < n; ++i) values[i] = fp16_to_fp32(fp32_to_fp16(values[i]));
  switch (t.type) {
    case GgmlType::F32:
      std::memcpy(dst, values, static_cast<size_t>(n) * sizeof(float));
      break;
    case GgmlType::F16: {
      auto* out = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(values[i]);
      break;
    }
    default:
      quantize_row(t.type, values, dst, n);
  }
}

// A trained tensor's values, whole (tools/train/export.py writes one raw f32 file per tensor).
std::vector<float> read_trained_values(const PlannedTensor& t, const std::string& weights_dir) {
  const fs::path path = fs::path(weights_dir) / (t.name + ".f32");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open (every tensor of the shape needs its weights file)");
  std::vector<float> values(static_cast<size_t>(t.n_elements()));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!in || in.peek() != std::char_traits<char>::eof())
    throw Error(path.string() + ": expected exactly " + std::to_string(values.size()) + " f32 values");
  return values;
}

}  // namespace

std::vector<uint8_t> make_tensor_data(const PlannedTensor& t, uint64_t seed, const std::string& weights_dir,
                                      ThreadPool& pool) {
  std::vector<float> trained;
  if (!weights_dir.empty()) trained = read_trained_values(t, weights_dir);
  const int64_t row_len = t.ne.at(0);
  const int64_t n_rows = t.n_elements() / row_len;
  const size_t row_bytes = ggml_row_size(t.type, row_len);
  std::vector<uint8_t> data(row_bytes * static_cast<size_t>(n_rows));
  const int64_t rows_per_grain = std::max<int64_t>(1, 65536 / row_len);
  pool.parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(row_len));
        for (int64_t r = begin; r < end; ++r) {
          if (trained.empty())
            generate_values(t, seed, r * row_len, row_len, row.data());
          else
            std::copy_n(trained.data() + r * row_len, row_len, row.data());
          encode_row(t, row.data(), row_len, data.data() + static_cast<size_t>(r) * row_bytes);
        }
      },
      rows_per_grain);
  return data;
}

namespace {

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A tokenizer.json given as a file or as the folder holding it.
std::string resolve_tokenizer(const std::string& path, const std::string& origin) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const char* name : {"tokenizer.json", "qwen3-tokenizer.json"})
      if (is_file(fs::path(path) / name)) return (fs::path(path) / name).string();
    throw Error(origin + " " + path + ": folder holds no tokenizer.json");
  }
  if (!is_file(path)) throw Error(origin + " " + path + ": no such file");
  return path;
}

}  // namespace

int64_t PlannedTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

const std::vector<ModelShape>& presets() {
  static const std::vector<ModelShape> all = make_presets();
  return all;
}

const ModelShape& find_preset(std::string_view name) {
  std::string known;
  for (const auto& p : presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw Error("unknown model preset '" + std::string(name) + "' (known: " + known + ")");
}

ModelShape shape_from_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("base")) throw Error(path + ": needs \"base\" (a preset name)");
  ModelShape s = find_preset(j.at("base").get<std::string>());
  if (s.arch != "qwen3") throw Error(path + ": only qwen3 shapes can be described by a file");
  for (const auto& [key, v] : j.items()) {
    if (key == "base") continue;
    else if (key == "name") s.name = v.get<std::string>();
    else if (key == "general_name") s.general_name = v.get<std::string>();
    else if (key == "description") s.description = v.get<std::string>();
    else if (key == "n_embd") s.n_embd = v.get<int64_t>();
    else if (key == "n_layer") s.n_layer = v.get<int64_t>();
    else if (key == "n_head") s.n_head = v.get<int64_t>();
    else if (key == "n_head_kv") s.n_head_kv = v.get<int64_t>();
    else if (key == "head_dim") s.head_dim = v.get<int64_t>();
    else if (key == "n_ff") s.n_ff = v.get<int64_t>();
    else if (key == "n_vocab") s.n_vocab = v.get<int64_t>();
    else if (key == "rope_freq_base") s.rope_freq_base = v.get<float>();
    else if (key == "rms_eps") s.rms_eps = v.get<float>();
    else if (key == "context_length") s.context_length = v.get<uint32_t>();
    else if (key == "bos_token_id") s.config_bos_token_id = v.get<int32_t>();
    else if (key == "eos_token_id") s.config_eos_token_id = v.get<int32_t>();
    else throw Error(path + ": unknown field \"" + key + "\"");
  }
  return s;
}

std::vector<PlannedTensor> plan_tensors(const ModelShape& shape, FileType type) {
  validate(shape);
  std::vector<PlannedTensor> tensors = converter_tensors(shape);
  const FileType converter_type = type == FileType::AllF32 ? FileType::AllF32 : FileType::MostlyF16;
  for (auto& t : tensors) {
    t.source_type = converter_tensor_type(t.name, t.ne, converter_type);
    t.type = t.source_type;
  }
  if (!is_quantized_file_type(type)) return tensors;

  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  std::vector<PlannedTensor> ordered;
  std::vector<MixTensor> mix;
  for (size_t i : quantize_order(names)) {
    ordered.push_back(tensors[i]);
    mix.push_back({tensors[i].name, tensors[i].ne, tensors[i].source_type});
  }
  const std::vector<GgmlType> types = choose_tensor_types(
      mix, type, static_cast<int>(shape.n_layer), static_cast<int>(shape.n_expert));
  for (size_t i = 0; i < ordered.size(); ++i) ordered[i].type = types[i];
  return ordered;
}

void write_metadata(gguf::Writer& w, const ModelShape& s, const VocabData& vocab, FileType type) {
  const std::string a = s.arch + ".";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", s.general_name.empty() ? "random-" + s.name : s.general_name);
  w.set_alignment(32);
  w.set_u32(a + "block_count", u32(s.n_layer));
  w.set_u32(a + "context_length", s.context_length);
  w.set_u32(a + "embedding_length", u32(s.n_embd));
  w.set_u32(a + "attention.head_count", u32(s.n_head));
  w.set_u32(a + "attention.head_count_kv", u32(s.n_head_kv));
  w.set_u32(a + "attention.key_length", u32(s.head_dim));
  w.set_u32(a + "attention.value_length", u32(s.head_dim));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_f32(a + "rope.freq_base", s.rope_freq_base);
  w.set_u32(a + "feed_forward_length", u32(s.is_moe() ? 0 : s.n_ff));
  if (s.is_hybrid()) w.set_u32(a + "rope.dimension_count", s.rope_dim);
  // IMROPE's sections (Qwen3.5, Qwen3-VL); Qwen3-Next rotates text positions only (NEOX).
  if ((s.is_hybrid() && s.arch != "qwen3next") || s.is_qwen3vl())
    w.set_array_i32(a + "rope.dimension_sections", std::vector<int32_t>(s.rope_sections.begin(), s.rope_sections.end()));
  if (s.arch == "llama") w.set_u32(a + "rope.dimension_count", u32(s.head_dim));
  if (s.is_qwen3vl()) w.set_u32(a + "n_deepstack_layers", u32(s.n_deepstack_layers));
  if (s.sliding_window > 0) {
    w.set_u32(a + "attention.sliding_window", u32(s.sliding_window));
    if (s.sliding_window_pattern > 0) w.set_u32(a + "attention.sliding_window_pattern", s.sliding_window_pattern);
  }
  if (s.rope_yarn_factor > 0.f) {
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", s.rope_yarn_factor);
    w.set_u32(a + "rope.scaling.original_context_length", s.rope_yarn_original_context);
  }
  if (s.rope_linear_factor > 0.f) {
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_f32(a + "rope.scaling.factor", s.rope_linear_factor);
  }
  if (s.is_moe()) {
    w.set_u32(a + "expert_count", u32(s.n_expert));
    w.set_u32(a + "expert_used_count", u32(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", u32(s.n_ff_exp));
    if (s.n_ff_shexp > 0) w.set_u32(a + "expert_shared_feed_forward_length", u32(s.n_ff_shexp));
  }
  if (s.is_hybrid()) {
    w.set_u32(a + "ssm.conv_kernel", u32(s.ssm_conv_kernel));
    w.set_u32(a + "ssm.state_size", u32(s.ssm_state_size));
    w.set_u32(a + "ssm.group_count", u32(s.ssm_group_count));
    w.set_u32(a + "ssm.time_step_rank", u32(s.ssm_time_step_rank));
    w.set_u32(a + "ssm.inner_size", u32(s.ssm_inner_size));
    w.set_u32(a + "full_attention_interval", s.full_attention_interval);
  }

  // The converter pads the vocabulary to the model's embedding rows with unused [PADn] tokens.
  if (vocab.tokens.size() != vocab.types.size())
    throw Error("tokenizer: " + std::to_string(vocab.tokens.size()) + " tokens but " +
                std::to_string(vocab.types.size()) + " token types");
  if (static_cast<int64_t>(vocab.tokens.size()) > s.n_vocab)
    throw Error("tokenizer has " + std::to_string(vocab.tokens.size()) + " tokens, more than preset " +
                s.name + "'s vocabulary of " + std::to_string(s.n_vocab));
  std::vector<std::string> tokens = vocab.tokens;
  std::vector<int32_t> types;
  types.reserve(static_cast<size_t>(s.n_vocab));
  for (TokenType t : vocab.types) types.push_back(static_cast<int32_t>(t));
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < s.n_vocab; ++i) {
    tokens.push_back("[PAD" + std::to_string(i) + "]");
    types.push_back(static_cast<int32_t>(TokenType::Unused));
  }
  w.set_string("tokenizer.ggml.model", vocab.model);
  w.set_string("tokenizer.ggml.pre", vocab.pre);
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  if (!vocab.merges.empty()) w.set_array_string("tokenizer.ggml.merges", vocab.merges);
  auto from_config = [&](Token id, int32_t config_id) {
    return id >= 0 ? id : (config_id >= 0 && config_id < s.n_vocab ? config_id : -1);
  };
  const Token eos = from_config(vocab.eos, s.config_eos_token_id);
  const Token bos = from_config(vocab.bos, s.config_bos_token_id);
  if (eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
  if (vocab.pad >= 0) w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(vocab.pad));
  if (bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
  w.set_bool("tokenizer.ggml.add_bos_token", vocab.add_bos);
  if (!vocab.chat_template.empty()) w.set_string("tokenizer.chat_template", vocab.chat_template);

  // llama-quantize appends these two; the converter writes general.file_type for every type.
  if (is_quantized_file_type(type)) w.set_u32("general.quantization_version", 2);
  w.set_u32("general.file_type", static_cast<uint32_t>(type));
}

void generate_values(const PlannedTensor& t, uint64_t seed, int64_t first, int64_t count, float* out) {
  const CounterRng rng(seed, t.name);
  switch (t.init) {
    case Init::Ones:
      std::fill(out, out + count, 1.0f);
      break;
    case Init::Normal: {
      // Whole Box-Muller pairs where possible; a range may start or end in the middle of one.
      int64_t i = 0;
      if (first % 2 != 0 && count > 0) {
        out[0] = static_cast<float>(t.a * rng.normal(static_cast<uint64_t>(first)));
        i = 1;
      }
      for (; i + 1 < count; i += 2) {
        double even, odd;
        rng.normal_pair(static_cast<uint64_t>(first + i) / 2, even, odd);
        out[i] = static_cast<float>(t.a * even);
        out[i + 1] = static_cast<float>(t.a * odd);
      }
      if (i < count) out[i] = static_cast<float>(t.a * rng.normal(static_cast<uint64_t>(first + i)));
      break;
    }
    case Init::Uniform:
      for (int64_t i = 0; i < count; ++i)
        out[i] = static_cast<float>(t.a + (t.b - t.a) * rng.uniform(static_cast<uint64_t>(first + i)));
      break;
    case Init::RopeFactors: {
      // The converter's Llama 3.1 recipe (low / high frequency factors 1 and 4): wavelengths
      // shorter than original_context / 4 keep their frequency, longer than original_context
      // are divided by the factor, and the band between is interpolated smoothly.
      const double base = t.a, factor = t.b, original = t.c;
      const double low_wavelen = original / 1.0, high_wavelen = original / 4.0;
      const int64_t dim = 2 * t.ne.at(0);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t pair = first + i;
        const float freq = 1.0f / static_cast<float>(std::pow(base, static_cast<double>(2 * pair) / dim));
        const double wavelen = 2 * M_PI / freq;
        double f;
        if (wavelen < high_wavelen) f = 1.0;
        else if (wavelen > low_wavelen) f = factor;
        else {
          const double smooth = (original / wavelen - 1.0) / (4.0 - 1.0);
          f = 1.0 / ((1 - smooth) / factor + smooth);
        }
        out[i] = static_cast<float>(f);
      }
      break;
    }
  }
}

BuildStats build_model(gguf::Writer& w, const ModelShape& shape, const VocabData& base_vocab,
                       const BuildOptions& options) {
  const std::vector<PlannedTensor> plan = plan_tensors(shape, options.type);
  write_metadata(w, shape, vocab_for_shape(shape, base_vocab), options.type);
  int n_threads = options.n_threads;
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  ThreadPool pool(n_threads);
  BuildStats stats;
  for (size_t i = 0; i < plan.size(); ++i) {
    const PlannedTensor& t = plan[i];
    if (options.progress) options.progress(i, plan.size(), t);
    std::vector<uint8_t> data = make_tensor_data(t, options.seed, options.weights_dir, pool);
    stats.n_params += static_cast<uint64_t>(t.n_elements());
    stats.tensor_bytes += data.size();
    w.add_tensor(t.name, t.type, t.ne, std::move(data));
  }
  stats.n_tensors = plan.size();
  return stats;
}

std::string find_tokenizer_json(const std::string& explicit_path) {
  if (!explicit_path.empty()) return resolve_tokenizer(explicit_path, "--tokenizer");
  if (const char* env = std::getenv("AGENTKV_TOKENIZER"); env && *env)
    return resolve_tokenizer(env, "AGENTKV_TOKENIZER");
  // A build from this source tree can use the fixture tokenizer next to it.
  const fs::path source_root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const fs::path fixture = source_root / ".." / "shared" / "fixtures" / "tokenizer" / "qwen3-tokenizer.json";
  if (source_root.is_absolute() && is_file(fixture)) return fixture.lexically_normal().string();
  throw Error("no tokenizer found: pass --tokenizer PATH/tokenizer.json (a Hugging Face tokenizer, "
              "e.g. Qwen3's) or set AGENTKV_TOKENIZER");
}

std::string sibling_tokenizer_config(const std::string& tokenizer_json) {
  const fs::path p(tokenizer_json);
  const std::string file = p.filename().string();
  const std::string suffix = "tokenizer.json";
  if (file.size() < suffix.size() || file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  const fs::path config = p.parent_path() / (file.substr(0, file.size() - suffix.size()) + "tokenizer_config.json");
  return is_file(config) ? config.string() : "";
}

VocabData load_vocab(const std::string& tokenizer_json, const std::string& tokenizer_config) {
  return Tokenizer::from_hf_files(tokenizer_json, tokenizer_config)->data();
}

}  // namespace agentkv::mkmodel
