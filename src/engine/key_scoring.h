// What scoring stored keys against queries reads (the eviction policies, agentkv/retention.h; the
// retrieval-head probe, agentkv/retrieval_heads.h): a sequence's cells by position, a layer's K rows
// as floats, and the kernels' f32 dot product.
#pragma once
#include <cstdint>
#include <vector>

#include "memory/kv_cache.h"

namespace agentkv {

// The cell of every position of seq, which must hold exactly [0, n_past) (agentkv::Error naming
// the eviction otherwise: its callers' sequences are whole by construction).
std::vector<uint32_t> cells_by_position(const memory::KvCache& kv, memory::SeqId seq, int n_past);

// The K rows of positions [p0, p1) of one layer, as floats (as stored: rotated when the cache is).
void load_keys(const memory::KvCache& kv, int layer, uint32_t stream, const std::vector<uint32_t>& cells, int p0, int p1,
               std::vector<float>& out);

// The kernels' f32 dot product (SIMD at the CPU's level): scoring reads every key once per query.
float dot(const float* a, const float* b, int64_t n);

}  // namespace agentkv
