// Named model shapes, their tensor plans and the options of the random-weight GGUF builder behind
// `agentkv mkmodel` (src/model/presets.h builds the files: exactly the metadata keys, tensor
// names, shapes, order and types that llama.cpp's converter and llama-quantize write).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/ggml_type.h"
#include "agentkv/tokenizer.h"

namespace agentkv::mkmodel {

// llama_ftype ids (general.file_type).
enum class FileType : uint32_t {
  AllF32 = 0,
  MostlyF16 = 1,
  MostlyQ8_0 = 7,
  MostlyQ4_K_M = 15,
  MostlyQ5_K_M = 17,
  // The i-quants: every quantized matrix in the named type but the output head (q6_K); rows
  // that are not whole 256-blocks in iq4_nl (docs/quant-types.md, "i-quants").
  MostlyIQ2_XXS = 19,
  MostlyIQ2_XS = 20,
  MostlyIQ3_XXS = 23,
  MostlyIQ3_S = 26,
  MostlyIQ2_S = 28,
  MostlyIQ4_XS = 30,
  // llama-quantize's MXFP4_MOE (gpt-oss): expert matrices (3-D) in mxfp4, every other quantized
  // matrix and the output head in q8_0.
  MostlyMXFP4_MOE = 38,
};

// "f32", "f16", "q8_0", "q4_k_m", "q5_k_m", "iq4_xs", "iq3_s", "iq3_xxs", "iq2_xxs", "iq2_xs",
// "iq2_s", "mxfp4_moe" (case-insensitive); nullopt for anything else.
std::optional<FileType> file_type_from_name(std::string_view name);
std::string_view file_type_name(FileType t);
// True for the types llama-quantize produces (they carry general.quantization_version).
bool is_quantized_file_type(FileType t);

struct ModelShape {
  std::string name;          // preset name; general.name is "random-<name>" (or general_name)
  std::string general_name;  // general.name when set: a trained model is not "random-"
  std::string description;   // one line for --list
  std::string arch;          // general.architecture: "qwen3", "qwen3moe", "llama", "qwen35", "qwen35moe", "gemma3", "gpt-oss", "qwen3vl", "qwen3vlmoe"
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;      // attention.key_length = value_length
  int64_t n_ff = 0;          // dense FFN width; written as 0 for MoE models
  int64_t n_vocab = 151936;  // tokenizer is padded with [PADn] tokens up to this
  bool tied_output = true;   // no output.weight: the head reuses token_embd
  // bos/eos ids from the model's config.json; the converter uses them when the tokenizer config
  // names no such token (Qwen3's has no bos_token, its config.json says 151643).
  int32_t config_bos_token_id = 151643;
  int32_t config_eos_token_id = 151645;
  float rope_freq_base = 1e6f;
  float rms_eps = 1e-6f;
  uint32_t context_length = 40960;

  // Hybrid Qwen3.5 (Gated DeltaNet + gated attention); 0 = plain transformer.
  uint32_t full_attention_interval = 0;  // layer il is full attention iff (il + 1) % interval == 0
  uint32_t rope_dim = 0;                 // partial rotary dims (rope.dimension_count)
  std::array<int32_t, 4> rope_sections{};
  int64_t ssm_conv_kernel = 0;
  int64_t ssm_state_size = 0;   // head_k_dim
  int64_t ssm_group_count = 0;  // K heads
  int64_t ssm_time_step_rank = 0;  // V heads
  int64_t ssm_inner_size = 0;   // V heads * head_v_dim

  // Mixture of experts (qwen3moe, qwen35moe); 0 = dense FFN.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;  // the shared expert (qwen35moe); 0 = none (qwen3moe)

  // Sliding-window attention (gemma3): the window in tokens (0 = none) and
  // attention.sliding_window_pattern (0: not written, llama.cpp's default period 6 applies).
  int32_t sliding_window = 0;
  uint32_t sliding_window_pattern = 0;
  // Linear RoPE scaling of the global layers (rope.scaling.type = linear); 0 = none.
  float rope_linear_factor = 0.f;
  // YaRN RoPE scaling (rope.scaling.type = yarn, gpt-oss); 0 = none.
  float rope_yarn_factor = 0.f;
  uint32_t rope_yarn_original_context = 4096;

  // Qwen3-VL: layers whose outputs take a deepstack slice of an image token's input row
  // (`n_deepstack_layers`; its rope_sections are written too).
  int32_t n_deepstack_layers = 0;

  // Llama 3.1's RoPE frequency scaling (the converter's rope_freqs tensor); 0 = none.
  float rope_llama3_factor = 0.f;
  uint32_t rope_llama3_original_context = 8192;
  // The family's chat vocabulary over the base tokenizer (Qwen3's): its special tokens,
  // pre-tokenizer, BOS and chat template (model/preset_vocab.h).
  enum class ChatVocab { Base, Llama3, Mistral, Gemma3, Harmony };
  ChatVocab chat_vocab = ChatVocab::Base;

  bool is_hybrid() const { return full_attention_interval > 0; }
  bool is_qwen3vl() const { return arch == "qwen3vl" || arch == "qwen3vlmoe"; }
  bool is_moe() const { return n_expert > 0; }
  bool has_qk_norm() const { return arch != "llama" && arch != "gpt-oss"; }
  // gpt-oss: Q/K/V/O biases and per-head attention sinks; experts with biases.
  bool has_attention_biases() const { return arch == "gpt-oss"; }
  // Gemma's norms after the attention and the FFN as well as before them.
  bool has_post_norms() const { return arch == "gemma3"; }
  bool is_full_attention_layer(int64_t il) const {
    return !is_hybrid() || (il + 1) % full_attention_interval == 0;
  }
};

const std::vector<ModelShape>& presets();
// Throws agentkv::Error listing the known names.
const ModelShape& find_preset(std::string_view name);
// A qwen3 shape from a JSON file (tools/train writes one beside the weights): the preset named by
// "base" with the fields given overriding it. Throws agentkv::Error on an unknown field.
ModelShape shape_from_json(const std::string& path);

// How a tensor's values are drawn (the fixture recipe: matrices N(0, 0.1^2), embeddings and head
// N(0, 0.4^2), norms 1, ssm_a uniform in [-16, -1), dt bias N(0, 0.1^2), routers N(0, 0.02^2)).
// RopeFactors: Llama 3.1's frequency divisors (a = rope base, b = factor; the original context
// is the tensor's c).
enum class Init { Normal, Ones, Uniform, RopeFactors };

struct PlannedTensor {
  std::string name;
  std::vector<int64_t> ne;  // ggml order
  GgmlType type = GgmlType::F32;  // type in the written file
  GgmlType source_type = GgmlType::F32;  // the converter's type (values are rounded through it)
  Init init = Init::Normal;
  float a = 0.f, b = 0.f;  // Normal: stddev; Uniform: [a, b)
  float c = 0.f;
  int64_t n_elements() const;
};

// Every tensor of the model with its final type, in file order (converter order for f32/f16,
// llama-quantize order for quantized types).
std::vector<PlannedTensor> plan_tensors(const ModelShape& shape, FileType type);

struct BuildOptions {
  FileType type = FileType::MostlyF16;
  uint64_t seed = 42;
  int n_threads = 0;  // 0: all hardware threads; the output does not depend on it
  // Trained weights instead of random ones: tensor NAME's values are read from
  // weights_dir/NAME.f32 (little-endian f32, ggml element order, as tools/train/export.py writes).
  std::string weights_dir;
  // Called before each tensor is generated (index, count, tensor).
  std::function<void(size_t, size_t, const PlannedTensor&)> progress;
};

struct BuildStats {
  uint64_t n_params = 0;
  uint64_t tensor_bytes = 0;
  size_t n_tensors = 0;
};

// Tokenizer lookup for mkmodel: `explicit_path` if given, else $AGENTKV_TOKENIZER (a tokenizer.json
// or a folder holding one), else the fixture tokenizer of this source tree. Throws Error if none.
std::string find_tokenizer_json(const std::string& explicit_path = "");
// The tokenizer_config.json that belongs next to a tokenizer.json ("" when there is none).
std::string sibling_tokenizer_config(const std::string& tokenizer_json);
// Loads a Hugging Face tokenizer the way the converter reads it.
VocabData load_vocab(const std::string& tokenizer_json, const std::string& tokenizer_config = "");

}  // namespace agentkv::mkmodel
