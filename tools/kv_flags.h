// The KV-cache options every command shares: -ctk / -ctv (element types), --kv-rotation and
// --kv-rotation-seed, --kv-code (tqc3), --kv-hot, --kv-tail-type, --kv-tail-dir and
// --kv-retrieval-heads (windowed residency), --swa-full. One parser, so the commands agree on names and
// errors; it fills the KvOptions a context is made with (ContextParams::kv, ServerConfig::kv).
#pragma once
#include <string>

#include "agentkv/ggml_type.h"
#include "agentkv/kv_options.h"
#include "tools/args.h"

namespace agentkv::tools {

// The options the flags name; the others (unified, tail_heads, query_window) keep their defaults.
// Throws std::invalid_argument naming the option for a type the KV cache cannot store.
KvOptions read_kv_flags(Args& a);
GgmlType parse_kv_cache_type(const std::string& name, const char* option);

// Usage lines for the options above (two-space indent, 34-column option field).
extern const char* const kKvFlagsUsage;

}  // namespace agentkv::tools
