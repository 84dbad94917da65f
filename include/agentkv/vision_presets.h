// Named shapes of vision projectors (mmproj GGUFs) and the random-weight files `agentkv mkmodel`
// writes for them: the metadata keys, tensor names, shapes and types llama.cpp's converter writes
// for a Qwen3.5 / Qwen3-VL vision tower (clip.projector_type "qwen3vl_merger"), so the files load
// in llama.cpp's mtmd and in agentkv alike.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/model_presets.h"

namespace agentkv::mkmodel {

struct VisionShape {
  std::string name;
  std::string description;
  std::string language_model;  // the preset whose width the output matches (one line of --list)
  int64_t n_embd = 0;          // the ViT's width
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_ff = 0;
  int64_t patch_size = 16;
  int64_t merge = 2;            // spatial_merge_size: merge x merge patches become one token
  int64_t n_pos_per_side = 48;  // learned position embeddings: a side x side grid
  int64_t out_dim = 0;          // the language model's n_embd
  float eps = 1e-6f;            // the converter writes the text model's rms_norm_eps here
  float matrix_std = 0.1f;      // random weights: matrices N(0, std^2)
  // ViT layers with a deepstack merger (Qwen3-VL's deepstack_visual_indexes); none in Qwen3.5.
  std::vector<int64_t> deepstack_layers;
  int64_t n_params() const;
};

const std::vector<VisionShape>& vision_presets();
// nullptr when `name` is no vision preset.
const VisionShape* find_vision_preset(std::string_view name);
// Every tensor of the projector in file order with its type (F16 matrices and first patch kernel,
// F32 norms, biases, position embeddings and the second temporal patch kernel, as the converter).
std::vector<PlannedTensor> plan_vision_tensors(const VisionShape& shape);

}  // namespace agentkv::mkmodel
