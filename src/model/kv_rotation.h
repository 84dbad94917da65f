// Which KV rows are stored rotated (kernels/hadamard.h), chosen as llama.cpp chooses: by default
// K is rotated when its type is quantized and V when its type is, each only for head widths that
// are multiples of 64 (K: the largest power of two dividing the head width; V: blocks of 64).
// docs/quant-types.md, "KV rotation".
#pragma once
#include <cstdint>
#include <string>

#include "agentkv/ggml_type.h"
#include "agentkv/kv_rotation_mode.h"
#include "kernels/hadamard.h"
#include "memory/kv_cache.h"
#include "model/config.h"

namespace agentkv {

memory::KvRotation choose_kv_rotation(const ModelConfig& config, GgmlType type_k, GgmlType type_v,
                                      KvRotationMode mode, uint64_t seed);

// The transforms a KvRotation names, built once per cache.
struct KvRotators {
  HadamardRotation k, v;
  explicit KvRotators(const memory::KvRotation& rotation);
};

}  // namespace agentkv
