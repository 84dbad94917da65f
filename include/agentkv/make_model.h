// Writes a model of a named shape (agentkv/model_presets.h: llama.cpp's metadata, tensor names, shapes and
// types) to a GGUF file, with random weights from a seed or trained ones (`agentkv mkmodel`).
#pragma once
#include <string>

#include "agentkv/model_presets.h"

namespace agentkv {

// Throws agentkv::Error when the weights cannot be made or the file cannot be written.
mkmodel::BuildStats write_model_file(const std::string& path, const mkmodel::ModelShape& shape, const VocabData& vocab,
                                     const mkmodel::BuildOptions& options);

}  // namespace agentkv
