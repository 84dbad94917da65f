#include "model/model.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "agentkv/error.h"
#include "gguf/gguf.h"
#include "model/gemma3.h"
#include "model/gpt_oss.h"
#include "model/qwen35.h"
#include "model/transformer.h"

namespace agentkv {

ArchModel::ArchModel(std::unique_ptr<gguf::Reader> gguf, ModelConfig config)
    : Model(std::move(config)), gguf_(std::move(gguf)) {
  tokenizer_ = Tokenizer::from_gguf(*gguf_);
  // The tokenizer holds its own vocabulary now; the reader's copies would only cost memory.
  gguf_->release_metadata({"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                           "tokenizer.ggml.scores"});
#if defined(__GLIBC__)
  malloc_trim(0);  // hand the freed vocabulary copies back to the OS
#endif
  if (tokenizer_->n_vocab() != config_.n_vocab)
    throw Error(gguf_->path() + ": tokenizer has " + std::to_string(tokenizer_->n_vocab()) +
                " tokens but token_embd.weight has " + std::to_string(config_.n_vocab) + " rows");
}

Model::~Model() = default;
ArchModel::~ArchModel() = default;

std::unique_ptr<Model> Model::load(const std::string& path) {
  auto reader = gguf::Reader::open(path);
  ModelConfig config = model_config_from_gguf(*reader);
  switch (config.arch) {
    case Arch::Qwen3:
    case Arch::Qwen3Moe:
    case Arch::Llama:
    case Arch::Qwen3VL:
    case Arch::Qwen3VLMoe:
      return std::make_unique<TransformerModel>(std::move(reader), std::move(config));
    case Arch::Qwen35:
    case Arch::Qwen35Moe:
    case Arch::Qwen3Next:
      return std::make_unique<Qwen35Model>(std::move(reader), std::move(config));
    case Arch::Gemma3:
      return std::make_unique<Gemma3Model>(std::move(reader), std::move(config));
    case Arch::GptOss:
      return std::make_unique<GptOssModel>(std::move(reader), std::move(config));
    default:
      throw Error(path + ": architecture '" + config.arch_key + "' is not supported yet");
  }
}

void ArchModel::replay_recurrent(memory::RecurrentMemory&, uint32_t, const memory::RecurrentTape&, int64_t,
                                 ThreadPool&) const {
  throw Error(std::string("the ") + arch_name(config_.arch) + " model has no recurrent layers to replay");
}

RopeSpec ArchModel::rope() const {
  RopeSpec r;
  r.n_rot = config_.n_rot;
  r.freq_base = config_.rope_freq_base;
  r.freq_scale = config_.rope_freq_scale;
  r.ext_factor = config_.rope_yarn_ext_factor;
  r.attn_factor = config_.rope_yarn_attn_factor;
  r.beta_fast = config_.rope_yarn_beta_fast;
  r.beta_slow = config_.rope_yarn_beta_slow;
  r.n_ctx_orig = config_.rope_n_ctx_orig;
  return r;
}

RopeSpec ArchModel::layer_rope(int il) const {
  RopeSpec r = rope();
  if (config_.is_swa(il)) {
    r.freq_base = config_.rope_freq_base_swa;
    r.freq_scale = config_.rope_freq_scale_swa;
  }
  return r;
}

memory::KvLayout ArchModel::kv_layout(uint32_t n_cells, uint32_t n_seq_max, bool unified,
                                  GgmlType type_k, GgmlType type_v, const memory::KvRotation& rotation) const {
  memory::KvLayout l;
  l.layer_has_kv.resize(config_.n_layer);
  for (int il = 0; il < config_.n_layer; ++il) l.layer_has_kv[il] = !config_.is_recurrent(il);
  l.n_embd_k = config_.n_head_kv * config_.head_dim_k;
  l.n_embd_v = config_.n_head_kv * config_.head_dim_v;
  l.type_k = type_k;
  l.type_v = type_v;
  l.rotation = rotation;
  l.n_cells = n_cells;
  l.n_seq_max = n_seq_max;
  l.unified = unified;
  return l;
}

memory::RecurrentLayout ArchModel::recurrent_layout(uint32_t n_seq_max) const {
  memory::RecurrentLayout l;
  l.layer_recurrent.resize(config_.n_layer);
  for (int il = 0; il < config_.n_layer; ++il) l.layer_recurrent[il] = config_.is_recurrent(il);
  if (config_.is_hybrid()) {
    const int64_t channels = 2 * config_.ssm_n_k_heads * config_.ssm_d_state + config_.ssm_d_inner;
    l.n_conv = (config_.ssm_d_conv - 1) * channels;
    l.n_ssm = config_.ssm_d_state * config_.ssm_d_inner;
  }
  l.n_seq_max = n_seq_max;
  return l;
}

}  // namespace agentkv
