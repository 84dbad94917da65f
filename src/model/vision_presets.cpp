#include "agentkv/vision_presets.h"

#include <algorithm>
#include <thread>

#include "agentkv/error.h"
#include "gguf/gguf.h"
#include "kernels/threadpool.h"
#include "model/presets.h"
#include "model/vision_presets_build.h"

namespace agentkv::mkmodel {
namespace {

constexpr float kBiasStd = 0.02f;
constexpr float kPositionStd = 0.2f;  // of the order of a patch embedding's entries

VisionShape micro_shape(std::string name, std::string language_model) {
  VisionShape s;
  s.name = std::move(name);
  s.language_model = std::move(language_model);
  s.description = "random vision tower for " + s.language_model + ": E=32, 2 layers, 2 heads of 16, FFN 64, patch 16";
  s.n_embd = 32;
  s.n_layer = 2;
  s.n_head = 2;
  s.n_ff = 64;
  s.out_dim = 64;
  return s;
}

std::vector<VisionShape> make_vision_presets() {
  std::vector<VisionShape> all;
  all.push_back(micro_shape("qwen35-micro-vision", "qwen35-micro"));
  all.push_back(micro_shape("qwen35moe-micro-vision", "qwen35moe-micro"));
  // Qwen3-VL's towers: deepstack mergers after some layers (8, 16 and 24 of 27 in the real ones).
  for (const char* lm : {"qwen3vl-micro", "qwen3vlmoe-micro"}) {
    VisionShape s = micro_shape(std::string(lm) + "-vision", lm);
    s.n_layer = 3;
    s.deepstack_layers = {0, 2};
    s.description = "random vision tower for " + s.language_model +
                    ": E=32, 3 layers (deepstack mergers after layers 0 and 2), 2 heads of 16, FFN 64, patch 16";
    all.push_back(s);
  }
  // Qwen3.5's vision tower (depth 27, hidden 1152, 16 heads, intermediate 4304, patch 16,
  // 48 x 48 position embeddings) projecting into qwen35moe-bench's width.
  VisionShape real;
  real.name = "qwen35moe-bench-vision";
  real.language_model = "qwen35moe-bench";
  real.description = "Qwen3.5's vision tower (E=1152, 27 layers, 16 heads, FFN 4304) into qwen35moe-bench's E=1024";
  real.n_embd = 1152;
  real.n_layer = 27;
  real.n_head = 16;
  real.n_ff = 4304;
  real.out_dim = 1024;
  real.matrix_std = 0.02f;  // keeps 27 random layers' activations in F16 range
  all.push_back(real);
  return all;
}

PlannedTensor planned(std::string name, std::vector<int64_t> ne, GgmlType type, Init init, float a = 0.f) {
  PlannedTensor t;
  t.name = std::move(name);
  t.ne = std::move(ne);
  t.type = type;
  t.source_type = type;
  t.init = init;
  t.a = a;
  return t;
}

}  // namespace

int64_t VisionShape::n_params() const {
  int64_t n = 0;
  for (const auto& t : plan_vision_tensors(*this)) n += t.n_elements();
  return n;
}

const std::vector<VisionShape>& vision_presets() {
  static const std::vector<VisionShape> all = make_vision_presets();
  return all;
}

const VisionShape* find_vision_preset(std::string_view name) {
  for (const auto& p : vision_presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<PlannedTensor> plan_vision_tensors(const VisionShape& s) {
  const int64_t E = s.n_embd, P = s.patch_size, M = s.merge * s.merge * E;
  const float w = s.matrix_std;
  std::vector<PlannedTensor> l;
  // The converter splits the Conv3D patch kernel by its two temporal frames; the second one's
  // name ends in ".1", not ".weight", so its rule keeps it F32.
  l.push_back(planned("v.patch_embd.weight", {P, P, 3, E}, GgmlType::F16, Init::Normal, w));
  l.push_back(planned("v.patch_embd.weight.1", {P, P, 3, E}, GgmlType::F32, Init::Normal, w));
  l.push_back(planned("v.patch_embd.bias", {E}, GgmlType::F32, Init::Normal, kBiasStd));
  l.push_back(planned("v.position_embd.weight", {E, s.n_pos_per_side * s.n_pos_per_side}, GgmlType::F32,
                      Init::Normal, kPositionStd));
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "v.blk." + std::to_string(il) + ".";
    l.push_back(planned(p + "ln1.weight", {E}, GgmlType::F32, Init::Ones));
    l.push_back(planned(p + "ln1.bias", {E}, GgmlType::F32, Init::Normal, kBiasStd));
    l.push_back(planned(p + "attn_qkv.weight", {E, 3 * E}, GgmlType::F16, Init::Normal, w));
    l.push_back(planned(p + "attn_qkv.bias", {3 * E}, GgmlType::F32, Init::Normal, kBiasStd));
    l.push_back(planned(p + "attn_out.weight", {E, E}, GgmlType::F16, Init::Normal, w));
    l.push_back(planned(p + "attn_out.bias", {E}, GgmlType::F32, Init::Normal, kBiasStd));
    l.push_back(planned(p + "ln2.weight", {E}, GgmlType::F32, Init::Ones));
    l.push_back(planned(p + "ln2.bias", {E}, GgmlType::F32, Init::Normal, kBiasStd));
    l.push_back(planned(p + "ffn_up.weight", {E, s.n_ff}, GgmlType::F16, Init::Normal, w));
    l.push_back(planned(p + "ffn_up.bias", {s.n_ff}, GgmlType::F32, Init::Normal, kBiasStd));
    l.push_back(planned(p + "ffn_down.weight", {s.n_ff, E}, GgmlType::F16, Init::Normal, w));
    l.push_back(planned(p + "ffn_down.bias", {E}, GgmlType::F32, Init::Normal, kBiasStd));
  }
  l.push_back(planned("v.post_ln.weight", {E}, GgmlType::F32, Init::Ones));
  l.push_back(planned("v.post_ln.bias", {E}, GgmlType::F32, Init::Normal, kBiasStd));
  l.push_back(planned("mm.0.weight", {M, M}, GgmlType::F16, Init::Normal, w));
  l.push_back(planned("mm.0.bias", {M}, GgmlType::F32, Init::Normal, kBiasStd));
  l.push_back(planned("mm.2.weight", {M, s.out_dim}, GgmlType::F16, Init::Normal, w));
  l.push_back(planned("mm.2.bias", {s.out_dim}, GgmlType::F32, Init::Normal, kBiasStd));
  for (int64_t il : s.deepstack_layers) {
    const std::string p = "v.deepstack." + std::to_string(il) + ".";
    l.push_back(planned(p + "norm.weight", {M}, GgmlType::F32, Init::Ones));
    l.push_back(planned(p + "norm.bias", {M}, GgmlType::F32, Init::Normal, kBiasStd));
    l.push_back(planned(p + "fc1.weight", {M, M}, GgmlType::F16, Init::Normal, w));
    l.push_back(planned(p + "fc1.bias", {M}, GgmlType::F32, Init::Normal, kBiasStd));
    l.push_back(planned(p + "fc2.weight", {M, s.out_dim}, GgmlType::F16, Init::Normal, w));
    l.push_back(planned(p + "fc2.bias", {s.out_dim}, GgmlType::F32, Init::Normal, kBiasStd));
  }
  return l;
}

BuildStats build_vision_projector(gguf::Writer& w, const VisionShape& s, uint64_t seed, int n_threads) {
  if (s.n_embd % s.n_head != 0 || (s.n_embd / s.n_head) % 4 != 0)
    throw Error("vision shape " + s.name + ": the head size must be a multiple of 4 (2-D rope sections)");
  w.set_string("general.architecture", "clip");
  w.set_string("general.type", "mmproj");
  w.set_string("general.name", "random-" + s.name);
  w.set_u32("general.file_type", static_cast<uint32_t>(FileType::MostlyF16));
  w.set_bool("clip.has_vision_encoder", true);
  w.set_u32("clip.vision.projection_dim", static_cast<uint32_t>(s.out_dim));
  w.set_u32("clip.vision.image_size", static_cast<uint32_t>(s.n_pos_per_side * s.patch_size));
  w.set_u32("clip.vision.patch_size", static_cast<uint32_t>(s.patch_size));
  w.set_u32("clip.vision.embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32("clip.vision.feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32("clip.vision.block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32("clip.vision.attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_array_f32("clip.vision.image_mean", {0.5f, 0.5f, 0.5f});
  w.set_array_f32("clip.vision.image_std", {0.5f, 0.5f, 0.5f});
  w.set_string("clip.projector_type", "qwen3vl_merger");
  w.set_bool("clip.use_gelu", true);
  w.set_u32("clip.vision.spatial_merge_size", static_cast<uint32_t>(s.merge));
  w.set_f32("clip.vision.attention.layer_norm_epsilon", s.eps);
  // The converter lists every layer (all false: Qwen3.5 has no deepstack mergers).
  std::vector<bool> deepstack(static_cast<size_t>(s.n_layer), false);
  for (int64_t il : s.deepstack_layers) deepstack.at(static_cast<size_t>(il)) = true;
  w.set_array_bool("clip.vision.is_deepstack_layers", deepstack);

  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  ThreadPool pool(n_threads);
  BuildStats stats;
  for (const auto& t : plan_vision_tensors(s)) {
    std::vector<uint8_t> data = make_tensor_data(t, seed, "", pool);
    stats.n_params += static_cast<uint64_t>(t.n_elements());
    stats.tensor_bytes += data.size();
    ++stats.n_tensors;
    w.add_tensor(t.name, t.type, t.ne, std::move(data));
  }
  return stats;
}

}  // namespace agentkv::mkmodel
