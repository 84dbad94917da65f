// Per-tensor type choice for a whole-file type ("q4_k_m", ...), as llama.cpp writes them: the
// converter (convert_hf_to_gguf.py) for f32/f16, llama-quantize for q8_0/q4_k_m/q5_k_m. Knowing the
// mix lets mkmodel write files whose tensor types are exactly what users get from llama.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/ggml_type.h"
#include "agentkv/model_presets.h"

namespace agentkv::mkmodel {


// A tensor as the converter writes it: name, ggml shape (ne[0] = row length) and the converter's
// type (F32 for 1-D tensors and the few 2-D tensors it keeps in F32, F16 otherwise).
struct MixTensor {
  std::string name;
  std::vector<int64_t> ne;
  GgmlType source_type = GgmlType::F16;
};

// The converter's type for a tensor in a file of type `t` (F32 or F16 files only).
GgmlType converter_tensor_type(std::string_view name, std::span<const int64_t> ne, FileType t);

// llama-quantize's tensor order: non-block tensors first, then by block number, and by name
// within each group (llama_model_loader's weights_map ordering). Returns indices into `names`.
std::vector<size_t> quantize_order(std::span<const std::string> names);

// The type llama-quantize gives each tensor when producing `ftype` from a converter file.
// `tensors` must be in quantize_order (the per-layer counters depend on that order); n_layer is
// the block count and n_expert the MoE expert count (0 for dense). For F32/F16 files the
// converter types are returned unchanged. Throws agentkv::Error for a row length no type fits.
std::vector<GgmlType> choose_tensor_types(std::span<const MixTensor> tensors, FileType ftype,
                                          int n_layer, int n_expert);

}  // namespace agentkv::mkmodel
