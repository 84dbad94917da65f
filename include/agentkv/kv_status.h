// What a context's attention KV cache is and holds, for a server's logs, /props, /metrics and
// /slots: plain figures, so that no caller reads the cache itself (memory/kv_cache.h).
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "agentkv/ggml_type.h"
#include "agentkv/memory.h"

namespace agentkv {

struct KvStatus {
  bool present = false;  // false: the model has no attention layers (nothing below applies)
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  uint32_t n_cells = 0;
  uint64_t cells_used = 0;
  // Hadamard rotation of the rows (memory/kv_row_rotation.h): block widths and seed, and a
  // one-line description for logs.
  bool rotated = false;
  uint32_t rotation_k_block = 0, rotation_v_block = 0;
  uint64_t rotation_seed = 0;
  std::string rotation;
  uint64_t code_id = 0;  // the calibrated code tqc3 rows are written under (agentkv/kv_code.h); 0: none
  size_t storage_bytes = 0;  // the main cache's K/V storage (its layers: all, or the full-attention ones)
  // The window part (sliding-window layers keeping only each sequence's window; 0 without one).
  uint32_t window_cells = 0;
  size_t window_storage_bytes = 0;
  // Windowed residency (--kv-hot): hot rows per stream, the tail's types and folder ("": RAM).
  bool windowed = false;
  uint32_t hot_cells = 0;
  GgmlType tail_type_k = GgmlType::F16;
  GgmlType tail_type_v = GgmlType::F16;
  std::string tail_dir;
  uint64_t hot_used = 0, tail_used = 0, demotions = 0;
  size_t hot_bytes = 0;   // hot K/V storage reserved, all layers and streams
  size_t tail_bytes = 0;  // tail K/V storage reserved (pages touched only when written)
  size_t held_bytes = 0;  // K/V rows of the used cells, each in the type it is stored in
  // Retrieval heads (KvOptions::retrieval_heads): the KV heads of all attention layers whose
  // rows the tail keeps (kept == total without them) and which, as "layer.head" separated by commas.
  uint32_t tail_heads_kept = 0, tail_heads_total = 0;
  std::string tail_heads;
};

class Context;

// The context's KV cache now (present == false without attention layers).
KvStatus kv_status(const Context& ctx);
// Cells of seq whose K/V rows are hot / in the tail (--kv-hot; {0, 0} when not windowed).
std::pair<uint64_t, uint64_t> seq_residency(const Context& ctx, MemorySeqId seq);

// The K/V bytes one sequence's cells hold, in the caches' own types: the main cache's (its
// positions × the layers there) and the window part's (sliding-window layers, only their window;
// 0 without one). Cells shared with other sequences count for each of them. O(runs of positions).
struct SeqKvBytes {
  uint64_t main = 0;
  uint64_t window = 0;
  uint64_t total() const { return main + window; }
};
SeqKvBytes seq_kv_bytes(const Context& ctx, MemorySeqId seq);

}  // namespace agentkv
