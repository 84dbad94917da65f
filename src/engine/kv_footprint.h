// What a context's KV cache reserves, for a benchmark's memory report: hot rows and the tail of a
// windowed cache (--kv-hot) separately, since the tail may sit in mapped files.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/context.h"

namespace agentkv {

struct KvFootprint {
  bool windowed = false;
  uint32_t hot_cells = 0;  // hot rows per stream
  size_t hot_bytes = 0;    // hot K/V storage, all layers and streams
  size_t tail_bytes = 0;   // tail K/V storage reserved
};
// All zero when the model has no attention layers.
KvFootprint kv_footprint(const Context& ctx);

// Touches every page of the KV rows, so a fake depth (Context::seq_fake_prefix, rows zero) is
// backed by memory as a computed one is. Nothing without a KV cache.
void prefault_kv(Context& ctx);

}  // namespace agentkv
