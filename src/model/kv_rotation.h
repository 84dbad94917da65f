// Which KV rows are stored rotated (kernels/hadamard.h), chosen as llama.cpp chooses: by default
// K is rotated when its type is quantized and V when its type is, each only for head widths that
// are multiples of 64 (K: the largest power of two dividing the head width; V: blocks of 64).
// docs/quant-types.md, "KV rotation".
#pragma once
#include <cstdint>
#include <string>

#include "core/ggml_type.h"
#include "kernels/hadamard.h"
#include "memory/kv_cache.h"
#include "model/config.h"

namespace agentkv {

enum class KvRotationMode {
  Auto,  // rotate the quantized ones (llama.cpp's default)
  On,    // rotate K and V whatever their type (to measure the rotation alone)
  Off,   // never (llama.cpp's LLAMA_ATTN_ROT_DISABLE=1)
};

// "auto" | "on" | "off"; throws std::invalid_argument otherwise.
KvRotationMode parse_kv_rotation_mode(const std::string& name);
const char* kv_rotation_mode_name(KvRotationMode mode);

memory::KvRotation choose_kv_rotation(const ModelConfig& config, GgmlType type_k, GgmlType type_v,
                                      KvRotationMode mode, uint64_t seed);

// The transforms a KvRotation names, built once per cache.
struct KvRotators {
  HadamardRotation k, v;
  explicit KvRotators(const memory::KvRotation& rotation);
};

}  // namespace agentkv
