#include "model/config.h"

#include <cmath>

#include "agentkv/error.h"
#include "gguf/gguf.h"

namespace agentkv {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Qwen3: return "qwen3";
    case Arch::Qwen3Moe: return "qwen3moe";
    case Arch::Llama: return "llama";
    case Arch::Qwen35: return "qwen35";
    case Arch::Qwen35Moe: return "qwen35moe";
    case Arch::Qwen3Next: return "qwen3next";
    case Arch::Gemma3: return "gemma3";
    case Arch::GptOss: return "gpt-oss";
    case Arch::Qwen3VL: return "qwen3vl";
    case Arch::Qwen3VLMoe: return "qwen3vlmoe";
  }
  return "?";
}

bool ModelConfig::is_hybrid() const {
  for (bool r : layer_recurrent)
    if (r) return true;
  return false;
}

float ModelConfig::attention_scale() const {
  return attn_scale != 0.f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim_k));
}

int ModelConfig::n_attention_layers() const {
  int n = 0;
  for (int il = 0; il < n_layer; ++il) n += is_recurrent(il) ? 0 : 1;
  return n;
}

namespace {

[[noreturn]] void fail(const gguf::Reader& g, const std::string& msg) {
  throw Error(g.path() + ": " + msg);
}

// Scalar or per-layer array key; the engine needs one value for every layer.
int64_t uniform_layer_value(const gguf::Reader& g, const std::string& key, int64_t fallback) {
  const gguf::Metadata& md = g.metadata();
  const gguf::Value* v = md.find(key);
  if (!v) return fallback;
  if (v->type != gguf::ValueType::ARRAY) return *md.get_int(key);
  if (auto arr = md.get_int_array(key)) {
    if (arr->empty()) fail(g, "key '" + key + "' is an empty array");
    for (int64_t v : *arr)
      if (v != arr->front()) fail(g, "key '" + key + "': per-layer values that differ are not supported");
    return arr->front();
  }
  if (auto v = md.get_int(key)) return *v;
  return fallback;
}

// The windows as llama.cpp reads them: `attention.sliding_window` (Gemma 3: absent or 0 makes
// every layer global; gpt-oss: required), `attention.sliding_window_pattern` (a period: every
// period-th layer global, default 6 for Gemma 3 and 2 for gpt-oss; or one flag per layer), and
// `rope.freq_base_swa` for the windowed layers (default 10000 for Gemma 3; gpt-oss's windowed
// layers rotate as its global ones unless the key is there).
void read_sliding_window(const gguf::Reader& g, ModelConfig& c) {
  const gguf::Metadata& md = g.metadata();
  const std::string p = c.arch_key + ".";
  if (c.arch != Arch::Gemma3 && c.arch != Arch::GptOss) {
    if (md.find(p + "attention.sliding_window"))
      fail(g, c.arch_key + " with attention.sliding_window is not supported (sliding windows: gemma3, gpt-oss)");
    return;
  }
  const bool gpt_oss = c.arch == Arch::GptOss;
  c.n_swa = static_cast<int32_t>(gpt_oss ? md.require_uint(p + "attention.sliding_window")
                                         : md.get_uint(p + "attention.sliding_window").value_or(0));
  if (c.n_swa <= 0) return;
  const int64_t default_period = gpt_oss ? 2 : 6;
  c.layer_swa.assign(static_cast<size_t>(c.n_layer), false);
  const std::string pattern_key = p + "attention.sliding_window_pattern";
  const gguf::Value* pattern = md.find(pattern_key);
  if (pattern && pattern->type == gguf::ValueType::ARRAY) {
    const auto flags = md.get_int_array(pattern_key);
    if (!flags || static_cast<int>(flags->size()) < c.n_layer) fail(g, pattern_key + " is shorter than block_count");
    for (int il = 0; il < c.n_layer; ++il) c.layer_swa[il] = (*flags)[il] != 0;
  } else {
    const int64_t period = pattern ? md.get_int(pattern_key).value_or(default_period) : default_period;
    if (period < 0) fail(g, pattern_key + " must not be negative");
    for (int il = 0; il < c.n_layer; ++il) c.layer_swa[il] = period == 0 || il % period < period - 1;
  }
  if (gpt_oss) {
    c.rope_freq_base_swa = c.rope_freq_base;
    c.rope_freq_scale_swa = c.rope_freq_scale;
  }
  c.rope_freq_base_swa = static_cast<float>(md.get_float(p + "rope.freq_base_swa").value_or(c.rope_freq_base_swa));
}

// The multi-axis rope's sections (IMROPE: Qwen3.5, Qwen3-VL), a required key.
void read_rope_sections(const gguf::Reader& g, ModelConfig& c) {
  const std::string key = c.arch_key + ".rope.dimension_sections";
  auto sec = g.metadata().get_int_array(key);
  if (!sec) fail(g, "missing required key '" + key + "'");
  for (size_t i = 0; i < 4 && i < sec->size(); ++i) c.rope_sections[i] = static_cast<int32_t>((*sec)[i]);
}

// Qwen3-VL: its rope sections (llama.cpp's IMROPE over the whole head) and deepstack layers.
void read_qwen3vl(const gguf::Reader& g, ModelConfig& c) {
  const std::string p = c.arch_key + ".";
  read_rope_sections(g, c);
  if (c.n_rot != c.head_dim_k) fail(g, c.arch_key + " requires rope.dimension_count == attention.key_length");
  c.n_deepstack_layers = static_cast<int>(g.metadata().get_uint(p + "n_deepstack_layers").value_or(0));
  // The last layer keeps only its output rows before its FFN; a deepstack slice added after it
  // would need the same selection (llama.cpp's graph has none either).
  if (c.n_deepstack_layers < 0 || c.n_deepstack_layers >= c.n_layer)
    fail(g, "n_deepstack_layers must be below block_count");
}

}  // namespace

ModelConfig model_config_from_gguf(const gguf::Reader& g) {
  const gguf::Metadata& md = g.metadata();
  ModelConfig c;
  c.arch_key = md.require_string("general.architecture");
  if (c.arch_key == "qwen3") c.arch = Arch::Qwen3;
  else if (c.arch_key == "qwen3moe") c.arch = Arch::Qwen3Moe;
  else if (c.arch_key == "llama") c.arch = Arch::Llama;
  else if (c.arch_key == "qwen35") c.arch = Arch::Qwen35;
  else if (c.arch_key == "qwen35moe") c.arch = Arch::Qwen35Moe;
  else if (c.arch_key == "qwen3next") c.arch = Arch::Qwen3Next;
  else if (c.arch_key == "gemma3") c.arch = Arch::Gemma3;
  else if (c.arch_key == "gpt-oss") c.arch = Arch::GptOss;
  else if (c.arch_key == "qwen3vl") c.arch = Arch::Qwen3VL;
  else if (c.arch_key == "qwen3vlmoe") c.arch = Arch::Qwen3VLMoe;
  else fail(g, "unsupported architecture '" + c.arch_key + "' (supported: qwen3, qwen3moe, llama, qwen35, qwen35moe, qwen3next, gemma3, gpt-oss, qwen3vl, qwen3vlmoe)");
  const std::string p = c.arch_key + ".";
  c.name = md.get_string("general.name").value_or("");

  c.n_embd = static_cast<int64_t>(md.require_uint(p + "embedding_length"));
  c.n_layer_file = static_cast<int>(md.require_uint(p + "block_count"));
  c.n_ctx_train = static_cast<int64_t>(md.require_uint(p + "context_length"));
  c.rms_eps = static_cast<float>(md.require_float(p + "attention.layer_norm_rms_epsilon"));
  const int64_t nextn = static_cast<int64_t>(md.get_uint(p + "nextn_predict_layers").value_or(0));
  c.n_layer = static_cast<int>(c.n_layer_file - nextn);
  if (c.n_embd <= 0 || c.n_layer <= 0) fail(g, "embedding_length and block_count must be positive");

  c.n_head = static_cast<int>(uniform_layer_value(g, p + "attention.head_count", 0));
  if (c.n_head <= 0) fail(g, "missing or zero key '" + p + "attention.head_count'");
  c.n_head_kv = static_cast<int>(uniform_layer_value(g, p + "attention.head_count_kv", c.n_head));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    fail(g, "attention.head_count_kv must divide attention.head_count");
  c.head_dim_k = static_cast<int64_t>(md.get_uint(p + "attention.key_length").value_or(c.n_embd / c.n_head));
  c.head_dim_v = static_cast<int64_t>(md.get_uint(p + "attention.value_length").value_or(c.n_embd / c.n_head));
  c.n_ff = uniform_layer_value(g, p + "feed_forward_length", 0);
  c.rope_freq_base = static_cast<float>(md.get_float(p + "rope.freq_base").value_or(10000.0));
  // Linear scaling divides the frequencies; YaRN also mixes in the unscaled angles of the fast
  // pairs and scales the magnitude (kernels/ops.h RopeYarn); LongRoPE would need its own math.
  const std::string scaling = md.get_string(p + "rope.scaling.type").value_or("");
  if (!scaling.empty() && scaling != "none" && scaling != "linear" && scaling != "yarn")
    fail(g, "rope scaling '" + scaling + "' is not supported yet (supported: none, linear, yarn)");
  if (auto s = md.get_float(p + "rope.scaling.factor"); s && *s != 0.0 && scaling != "none")
    c.rope_freq_scale = static_cast<float>(1.0 / *s);
  c.rope_n_ctx_orig = static_cast<int64_t>(md.get_uint(p + "rope.scaling.original_context_length").value_or(c.n_ctx_train));
  if (scaling == "yarn") {
    // llama_context's set-up, in float as it is built (no fused operations).
    c.rope_yarn_ext_factor = 1.0f;
    const float factor = 1.0f / c.rope_freq_scale;
    const auto get_mscale = [](float scale, float mscale) { return scale <= 1.0f ? 1.0f : 0.1f * mscale * std::log(scale) + 1.0f; };
    c.rope_yarn_attn_factor = get_mscale(factor, 1.0f);
    c.rope_yarn_attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
    if (c.rope_n_ctx_orig <= 0) fail(g, "yarn rope scaling needs rope.scaling.original_context_length or context_length");
  }
  c.rope_yarn_attn_factor *= static_cast<float>(md.get_float(p + "rope.scaling.attn_factor").value_or(1.0));
  c.n_rot = static_cast<int64_t>(md.get_uint(p + "rope.dimension_count").value_or(c.head_dim_k));
  c.attn_scale = static_cast<float>(md.get_float(p + "attention.scale").value_or(0.0));
  c.final_logit_softcap = static_cast<float>(md.get_float(p + "final_logit_softcapping").value_or(0.0));
  read_sliding_window(g, c);

  const bool has_experts = md.get_uint(p + "expert_count").value_or(0) > 0;
  if (c.is_plain_decoder() || c.arch == Arch::Gemma3 || c.arch == Arch::GptOss) {
    if (c.head_dim_k != c.head_dim_v)
      fail(g, c.arch_key + " requires attention.key_length == attention.value_length");
    if (c.arch == Arch::Qwen3 && c.n_rot != c.head_dim_k)
      fail(g, "qwen3 requires rope.dimension_count == attention.key_length");
    if (c.n_ff <= 0 && !has_experts) fail(g, "missing required key '" + p + "feed_forward_length'");
    if ((c.arch == Arch::Qwen3Moe || c.arch == Arch::Qwen3VLMoe) && !has_experts)
      fail(g, c.arch_key + " requires expert_count > 0");
    if (c.is_qwen3vl()) read_qwen3vl(g, c);
  } else {
    c.ssm_d_conv = static_cast<int>(md.require_uint(p + "ssm.conv_kernel"));
    c.ssm_d_inner = static_cast<int64_t>(md.require_uint(p + "ssm.inner_size"));
    c.ssm_d_state = static_cast<int64_t>(md.require_uint(p + "ssm.state_size"));
    c.ssm_n_v_heads = static_cast<int>(md.require_uint(p + "ssm.time_step_rank"));
    c.ssm_n_k_heads = static_cast<int>(md.require_uint(p + "ssm.group_count"));
    if (c.ssm_n_k_heads <= 0 || c.ssm_n_v_heads % c.ssm_n_k_heads != 0)
      fail(g, "ssm.group_count must divide ssm.time_step_rank");
    if (c.ssm_d_inner != c.ssm_n_v_heads * c.ssm_d_state)
      fail(g, "ssm.inner_size must equal ssm.time_step_rank * ssm.state_size");
    if (c.arch != Arch::Qwen3Next) read_rope_sections(g, c);
    c.layer_recurrent.assign(c.n_layer, false);
    if (auto rl = md.get_int_array(p + "attention.recurrent_layers")) {
      if (static_cast<int>(rl->size()) < c.n_layer) fail(g, "attention.recurrent_layers is shorter than block_count");
      for (int il = 0; il < c.n_layer; ++il) c.layer_recurrent[il] = (*rl)[il] != 0;
    } else {
      const int64_t interval = static_cast<int64_t>(md.get_uint(p + "full_attention_interval").value_or(4));
      if (interval <= 0) fail(g, "full_attention_interval must be positive");
      for (int il = 0; il < c.n_layer; ++il) c.layer_recurrent[il] = ((il + 1) % interval) != 0;
    }
  }
  if (c.arch == Arch::GptOss && !has_experts) fail(g, "gpt-oss requires expert_count > 0");
  if (c.arch == Arch::Qwen35Moe || c.arch == Arch::Qwen3Next || c.arch == Arch::GptOss ||
      (c.is_plain_decoder() && has_experts)) {
    c.n_expert = static_cast<int>(md.require_uint(p + "expert_count"));
    c.n_expert_used = static_cast<int>(md.require_uint(p + "expert_used_count"));
    if (c.n_expert <= 0 || c.n_expert_used <= 0 || c.n_expert_used > c.n_expert)
      fail(g, "expert_used_count must be in [1, expert_count]");
    // Mixtral (llama with experts) records the expert width as feed_forward_length.
    c.n_ff_expert = static_cast<int64_t>(md.get_uint(p + "expert_feed_forward_length")
                                             .value_or(c.is_plain_decoder() ? c.n_ff : c.n_ff / c.n_expert_used));
    if (c.n_ff_expert <= 0) fail(g, "expert_feed_forward_length must be positive");
    // The plain decoders' experts have no shared expert (feed_forward_length is then the dense
    // width a converter records, not a shared expert's).
    c.n_ff_shared = c.is_plain_decoder() || c.arch == Arch::GptOss
        ? 0 : static_cast<int64_t>(md.get_uint(p + "expert_shared_feed_forward_length").value_or(c.n_ff));
    if (c.arch == Arch::GptOss) {  // llama.cpp's build_moe_ffn call for it
      c.expert_gating_softmax_weight = true;
      c.expert_weights_norm = false;
      c.expert_swiglu_oai = true;
    }
  } else if (c.arch == Arch::Qwen35 && c.n_ff <= 0) {
    fail(g, "missing required key '" + p + "feed_forward_length'");
  }
  if (c.n_rot <= 0 || c.n_rot > c.head_dim_k || c.n_rot % 2) fail(g, "invalid rope.dimension_count");

  const gguf::TensorInfo* emb = g.find_tensor("token_embd.weight");
  if (!emb) fail(g, "missing tensor 'token_embd.weight'");
  c.n_vocab = emb->ne[1];
  c.tied_output = g.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace agentkv
