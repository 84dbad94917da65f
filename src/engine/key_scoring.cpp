#include "engine/key_scoring.h"

#include <algorithm>
#include <string>

#include "agentkv/error.h"
#include "kernels/quant.h"

namespace agentkv {

std::vector<uint32_t> cells_by_position(const memory::KvCache& kv, memory::SeqId seq, int n_past) {
  const uint32_t stream = kv.stream_of(seq);
  const memory::KvCells& c = kv.cells(stream);
  std::vector<uint32_t> out(static_cast<size_t>(n_past), UINT32_MAX);
  for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
    if (c.is_empty(i) || !c.has_seq(i, seq)) continue;
    const memory::Pos p = c.pos(i);
    if (p < 0 || p >= n_past || out[static_cast<size_t>(p)] != UINT32_MAX)
      throw Error("eviction: sequence " + std::to_string(seq) + " does not hold exactly positions [0, " + std::to_string(n_past) + ")");
    out[static_cast<size_t>(p)] = i;
  }
  if (std::find(out.begin(), out.end(), UINT32_MAX) != out.end())
    throw Error("eviction: sequence " + std::to_string(seq) + " misses positions below " + std::to_string(n_past));
  return out;
}

void load_keys(const memory::KvCache& kv, int layer, uint32_t stream, const std::vector<uint32_t>& cells, int p0, int p1,
               std::vector<float>& out) {
  const int64_t n = kv.layout().n_embd_k;
  out.resize(static_cast<size_t>(p1 - p0) * static_cast<size_t>(n));
  for (int p = p0; p < p1; ++p)
    kv.dequantize_k(layer, stream, cells[static_cast<size_t>(p)], out.data() + static_cast<size_t>(p - p0) * static_cast<size_t>(n));
}

float dot(const float* a, const float* b, int64_t n) {
  static const VecDotFn f32_dot = vec_dot_fn(GgmlType::F32);
  return f32_dot(n, a, b);
}

}  // namespace agentkv
