#include "engine/key_scoring.h"

#include <algorithm>
#include <string>

#include "agentkv/error.h"
#include "kernels/quant.h"
#include "memory/cell_positions.h"

namespace agentkv {

std::vector<uint32_t> cells_by_position(const memory::KvCache& kv, memory::SeqId seq, int n_past) {
  try {
    return memory::cells_by_position(kv, seq, n_past);
  } catch (const Error& e) {
    throw Error(std::string("eviction: ") + e.what());
  }
}

void load_keys(const memory::KvCache& kv, int layer, uint32_t stream, const std::vector<uint32_t>& cells, int p0, int p1,
               std::vector<float>& out) {
  const int64_t n = kv.layout().n_embd_k;
  out.resize(static_cast<size_t>(p1 - p0) * static_cast<size_t>(n));
  const memory::KvRows& rows = kv.rows();
  for (int p = p0; p < p1; ++p)
    rows.dequantize_k(layer, stream, cells[static_cast<size_t>(p)], out.data() + static_cast<size_t>(p - p0) * static_cast<size_t>(n));
}

float dot(const float* a, const float* b, int64_t n) {
  static const VecDotFn f32_dot = vec_dot_fn(GgmlType::F32);
  return f32_dot(n, a, b);
}

}  // namespace agentkv
