// The random-weight GGUF builder behind `agentkv mkmodel` (shapes, plans and options:
// agentkv/model_presets.h). The files carry exactly the metadata keys, tensor names, shapes, order
// and types that llama.cpp's converter (and llama-quantize, for quantized types) write, so they load
// in llama.cpp and in agentkv. Tests and benchmarks call build_model() to get models in-process.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/ggml_type.h"
#include "agentkv/model_presets.h"
#include "model/quant_mix.h"
#include "agentkv/tokenizer.h"

namespace agentkv { class ThreadPool; }
namespace agentkv::gguf { class Writer; }

namespace agentkv::mkmodel {

// Writes general.*, <arch>.* and tokenizer.* keys. The vocabulary is padded to shape.n_vocab.
void write_metadata(gguf::Writer& w, const ModelShape& shape, const VocabData& vocab, FileType type);

// Adds metadata and all tensors to `w` (which must be empty).
BuildStats build_model(gguf::Writer& w, const ModelShape& shape, const VocabData& vocab,
                       const BuildOptions& options);

// The values of one tensor before any type conversion (element i of the flattened tensor).
// Exposed so tests can check the recipe; build_model uses the same function.
void generate_values(const PlannedTensor& t, uint64_t seed, int64_t first, int64_t count, float* out);

// One tensor's bytes in its file type: values from generate_values (or, with weights_dir, the trained
// ones), rounded through the converter's type as the written files are.
std::vector<uint8_t> make_tensor_data(const PlannedTensor& t, uint64_t seed, const std::string& weights_dir,
                                      ThreadPool& pool);

}  // namespace agentkv::mkmodel
