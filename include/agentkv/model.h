// A loaded model as its users see it: its hyperparameters and its tokenizer. What runs it (mapped
// weights, memory layouts, the forward pass) is the architecture's (src/model/model.h, ArchModel);
// a Context takes a Model and runs it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "agentkv/model_config.h"
#include "agentkv/tokenizer.h"

namespace agentkv {

class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Maps the GGUF, reads the config, binds and checks every tensor. Throws agentkv::Error.
  static std::unique_ptr<Model> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t n_vocab() const { return config_.n_vocab; }
  int64_t n_embd() const { return config_.n_embd; }
  // Floats per input row of a batch (Batch::embd): n_embd, wider with Qwen3-VL's deepstack.
  int64_t n_embd_input() const { return config_.n_embd_input(); }

 protected:
  explicit Model(ModelConfig config) : config_(std::move(config)) {}
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

}  // namespace agentkv
