// Reads a model's hyperparameters (agentkv/model_config.h) from its GGUF metadata.
#pragma once
#include "agentkv/model_config.h"

namespace agentkv::gguf { class Reader; }

namespace agentkv {

// Reads and checks the hyperparameters; throws agentkv::Error naming file and key.
ModelConfig model_config_from_gguf(const gguf::Reader& gguf);

}  // namespace agentkv
