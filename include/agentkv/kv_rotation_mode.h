// Whether a context stores its KV rows Hadamard-rotated (src/model/kv_rotation.h chooses which
// rows, as llama.cpp does; docs/quant-types.md, "KV rotation").
#pragma once
#include <string>

namespace agentkv {

enum class KvRotationMode {
  Auto,  // rotate the quantized ones (llama.cpp's default)
  On,    // rotate K and V whatever their type (to measure the rotation alone)
  Off,   // never (llama.cpp's LLAMA_ATTN_ROT_DISABLE=1)
};

// "auto" | "on" | "off"; throws std::invalid_argument otherwise.
KvRotationMode parse_kv_rotation_mode(const std::string& name);
const char* kv_rotation_mode_name(KvRotationMode mode);

}  // namespace agentkv
