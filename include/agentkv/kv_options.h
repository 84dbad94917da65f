// How a context keeps its attention KV rows: element types, rotation, tqc3's code, streams,
// windowed residency, retrieval heads and recorded queries. One struct travels from the command
// line (tools/kv_flags.h fills it) through the server's config (ServerConfig::kv) to the context
// (ContextParams::kv), so that no layer copies the options field by field.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/ggml_type.h"
#include "agentkv/kv_rotation_mode.h"

namespace agentkv {

namespace memory {
class KvCode;
}

struct KvOptions {
  GgmlType type_k = GgmlType::F16;  // -ctk
  GgmlType type_v = GgmlType::F16;  // -ctv
  KvRotationMode rotation = KvRotationMode::Auto;  // --kv-rotation (agentkv/kv_rotation_mode.h)
  uint64_t rotation_seed = 0;                      // --kv-rotation-seed; 0: llama.cpp's plain Hadamard
  // --kv-code: the calibrated code tqc3 rows are written under (agentkv/kv_code.h: load_kv_code);
  // required when type_k or type_v is tqc3, unused otherwise.
  std::shared_ptr<const memory::KvCode> code;
  // One stream of n_ctx cells every sequence shares; false: one stream of n_ctx cells per sequence.
  bool unified = true;
  // --kv-hot: windowed residency (memory/kv_cache.h KvLayout::hot_cells). 0 = every cell's rows
  // hot; otherwise at most this many cells per stream keep type_k / type_v rows and the older ones
  // move to the tail, stored as tail_type_k / tail_type_v (--kv-tail-type). Must be >= n_ubatch.
  uint32_t hot_cells = 0;
  GgmlType tail_type_k = GgmlType::F16;
  GgmlType tail_type_v = GgmlType::F16;
  std::string tail_dir;  // --kv-tail-dir; "": the tail in RAM; a folder: in files mapped from it (KvLayout::tail_dir)
  // --kv-retrieval-heads (agentkv/retrieval_heads.h; memory/kv_cache.h KvLayout::tail_heads): with
  // a window, the tail keeps the rows of only this fraction of the KV heads — the best scored by
  // the retrieval probe, run once at creation — and every other head attends over the window
  // alone. 1: every head's rows (no probe). tail_heads, when not empty, names the heads instead (a
  // mask per model layer, bit h = KV head h).
  double retrieval_heads = 1.0;
  std::vector<uint64_t> tail_heads;
  // > 0: the last this-many tokens' attention queries are kept per sequence (what the snapkv
  // eviction policy scores keys with, agentkv/retention.h); 0: none kept.
  uint32_t query_window = 0;
  // --swa-full (llama.cpp's flag): a model's sliding-window layers keep every row in the main
  // cache, as its full-attention layers do. Off (the default): they keep only each sequence's
  // window in a cache of their own, and resume where a snapshot is (docs/memory-semantics.md §10).
  bool swa_full = false;
  // --swa-cache MiB: without --swa-full, RAM for the window rows of cached pages (beyond each
  // sequence's own window), so that a prompt leaving a cached chain resumes exactly where it
  // leaves while those rows are held, not at the latest snapshot (memory/window_pages.h). At most
  // a whole context's rows; the least recently used pages give theirs up first. 0: none.
  size_t swa_cache_bytes = size_t{256} << 20;
};

}  // namespace agentkv
