#include "model/kv_shift.h"

#include <string>
#include <vector>

#include "agentkv/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/kv_rotation.h"
#include "model/model.h"

namespace agentkv {

int64_t rotate_shifted_keys(memory::KvCache& kv, const KeyRotation& rope, ThreadPool& pool) {
  const auto& layout = kv.layout();
  const int64_t n_embd = layout.n_embd_k;
  if (rope.head_dim <= 0 || n_embd % rope.head_dim != 0)
    throw Error("context shift: head width " + std::to_string(rope.head_dim) + " does not divide the K width " +
                std::to_string(n_embd));
  if (rope.n_rot < 0 || rope.n_rot > rope.head_dim || rope.n_rot % 2 != 0)
    throw Error("context shift: rotary dims " + std::to_string(rope.n_rot) + " must be even and at most " +
                std::to_string(rope.head_dim));
  if (!kv.has_shift()) return 0;
  const int64_t n_heads = n_embd / rope.head_dim;
  const GgmlType type = layout.type_k;
  // Rotated keys (model/kv_rotation.h) are turned back before RoPE and rotated again after, as
  // llama.cpp's shift does: the Hadamard rotation does not commute with RoPE.
  const KvRotators rotators(layout.rotation);
  const HadamardRotation& k_rot = rotators.k;
  std::vector<int> kv_layers;
  for (size_t il = 0; il < layout.layer_has_kv.size(); ++il)
    if (layout.layer_has_kv[il]) kv_layers.push_back(static_cast<int>(il));

  memory::KvRows& rows = kv.rows();
  int64_t rotated = 0;
  for (uint32_t s = 0; s < layout.n_streams(); ++s) {
    const std::vector<std::pair<uint32_t, memory::Pos>> todo = memory::pending_shifts(kv.cells(s));
    rotated += static_cast<int64_t>(todo.size());
    if (todo.empty() || rope.n_rot == 0) continue;

    pool.parallel_for(static_cast<int64_t>(todo.size()), [&](int64_t begin, int64_t end) {
      std::vector<float> cos_sin(static_cast<size_t>(rope.n_rot));
      std::vector<float> row(static_cast<size_t>(n_embd));
      for (int64_t t = begin; t < end; ++t) {
        const auto [cell, delta] = todo[static_cast<size_t>(t)];
        // One cos/sin table per cell serves every head of every layer.
        rope_cache(static_cast<float>(delta), rope.n_rot, rope.freq_base, rope.freq_scale, rope.freq_factors,
                   cos_sin.data());
        for (int il : kv_layers) {
          // A hot F32 row turns in place; any other row (or one in a windowed cache's tail, in
          // the tail's type) through floats.
          const bool in_place = type == GgmlType::F32 && kv.window().is_hot(s, cell);
          float* x = in_place ? reinterpret_cast<float*>(rows.k_row(il, s, cell)) : row.data();
          if (!in_place) rows.dequantize_k(il, s, cell, x);
          k_rot.apply_inverse(x, n_embd);
          for (int64_t h = 0; h < n_heads; ++h) rope_apply(rope.style, x + h * rope.head_dim, rope.n_rot, cos_sin.data());
          k_rot.apply(x, n_embd);
          if (!in_place) rows.quantize_k(il, s, cell, x);
        }
      }
    }, 16);
  }
  kv.reset_shift();
  return rotated;
}

int64_t ArchModel::apply_kv_shift(memory::KvCache& kv, ThreadPool& pool) const {
  KeyRotation rope;
  static_cast<RopeSpec&>(rope) = this->rope();
  rope.head_dim = config_.head_dim_k;
  return rotate_shifted_keys(kv, rope, pool);
}

}  // namespace agentkv
