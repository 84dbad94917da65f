// Writes a model of a named shape (agentkv/model_presets.h: llama.cpp's metadata, tensor names, shapes and
// types) to a GGUF file, with random weights from a seed or trained ones (`agentkv mkmodel`).
#pragma once
#include <string>

#include "agentkv/model_presets.h"
#include "agentkv/vision_presets.h"

namespace agentkv {

// Throws agentkv::Error when the weights cannot be made or the file cannot be written.
mkmodel::BuildStats write_model_file(const std::string& path, const mkmodel::ModelShape& shape, const VocabData& vocab,
                                     const mkmodel::BuildOptions& options);

// A vision projector (mmproj) of a named shape with random weights from `seed`.
mkmodel::BuildStats write_vision_file(const std::string& path, const mkmodel::VisionShape& shape, uint64_t seed,
                                      int n_threads);

}  // namespace agentkv
