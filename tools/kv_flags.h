// The KV-cache options every command shares: -ctk / -ctv (element types), --kv-rotation and
// --kv-rotation-seed (agentkv/context.h), --kv-code (tqc3), --kv-hot, --kv-tail-type, --kv-tail-dir and --kv-retrieval-heads (windowed residency). One parser, so the commands agree on names and errors.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "agentkv/ggml_type.h"
#include "agentkv/context.h"
#include "agentkv/kv_code.h"
#include "tools/args.h"

namespace agentkv::tools {

struct KvFlags {
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  KvRotationMode rotation = KvRotationMode::Auto;
  uint64_t rotation_seed = 0;
  uint32_t hot_cells = 0;  // --kv-hot (ContextParams::kv_hot_cells)
  GgmlType tail_type_k = GgmlType::F16;
  GgmlType tail_type_v = GgmlType::F16;
  std::string tail_dir;  // --kv-tail-dir
  double retrieval_heads = 1.0;  // --kv-retrieval-heads (ContextParams::kv_retrieval_heads)
  KvCodePtr code;  // --kv-code (tqc3's calibrated code)

  void apply_to(ContextParams& cp) const {
    cp.kv_code = code;
    cp.type_k = type_k;
    cp.type_v = type_v;
    cp.kv_rotation = rotation;
    cp.kv_rotation_seed = rotation_seed;
    cp.kv_hot_cells = hot_cells;
    cp.tail_type_k = tail_type_k;
    cp.tail_type_v = tail_type_v;
    cp.kv_tail_dir = tail_dir;
    cp.kv_retrieval_heads = retrieval_heads;
  }
};

// Throws std::invalid_argument naming the option for a type the KV cache cannot store.
KvFlags read_kv_flags(Args& a);
GgmlType parse_kv_cache_type(const std::string& name, const char* option);

// Usage lines for the options above (two-space indent, 34-column option field).
extern const char* const kKvFlagsUsage;

}  // namespace agentkv::tools
