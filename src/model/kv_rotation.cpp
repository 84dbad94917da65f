#include "model/kv_rotation.h"

#include <stdexcept>

namespace agentkv {

KvRotationMode parse_kv_rotation_mode(const std::string& name) {
  if (name == "auto") return KvRotationMode::Auto;
  if (name == "on") return KvRotationMode::On;
  if (name == "off") return KvRotationMode::Off;
  throw std::invalid_argument("--kv-rotation must be auto, on or off (got '" + name + "')");
}

const char* kv_rotation_mode_name(KvRotationMode mode) {
  switch (mode) {
    case KvRotationMode::Auto: return "auto";
    case KvRotationMode::On: return "on";
    case KvRotationMode::Off: return "off";
  }
  return "?";
}

memory::KvRotation choose_kv_rotation(const ModelConfig& config, GgmlType type_k, GgmlType type_v,
                                      KvRotationMode mode, uint64_t seed) {
  memory::KvRotation r;
  if (mode == KvRotationMode::Off || config.n_attention_layers() == 0) return r;
  // A tqc3 side is never rotated: its calibrated code has its own basis (memory/kv_code.h).
  const bool rotate_k = type_k != GgmlType::TQC3 && (mode == KvRotationMode::On || ggml_type_info(type_k).quantized);
  const bool rotate_v = type_v != GgmlType::TQC3 && (mode == KvRotationMode::On || ggml_type_info(type_v).quantized);
  if (rotate_k && config.head_dim_k % 64 == 0) {
    uint32_t block = 64;
    while (config.head_dim_k % (2 * block) == 0) block *= 2;
    r.k_block = block;
  }
  if (rotate_v && config.head_dim_v % 64 == 0) r.v_block = 64;
  if (r.active()) r.seed = seed;
  return r;
}

KvRotators::KvRotators(const memory::KvRotation& rotation) {
  k.block = rotation.k_block;
  v.block = rotation.v_block;
  if (rotation.k_block) k.signs = hadamard_signs(rotation.seed, rotation.k_block);
  if (rotation.v_block) v.signs = hadamard_signs(rotation.seed, rotation.v_block);
}

}  // namespace agentkv
