#include "model/kv_shift.h"

#include <algorithm>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/kv_rotation.h"
#include "model/model.h"

namespace agentkv {

int64_t rotate_shifted_keys(memory::KvCache& kv, const KeyRotation& rope, ThreadPool& pool) {
  const std::vector<int> rope_of_layer(kv.layout().layer_has_kv.size(), 0);
  return rotate_shifted_keys(kv, std::span<const KeyRotation>(&rope, 1), rope_of_layer, pool);
}

int64_t rotate_shifted_keys(memory::KvCache& kv, std::span<const KeyRotation> ropes,
                            std::span<const int> rope_of_layer, ThreadPool& pool) {
  const auto& layout = kv.layout();
  const int64_t n_embd = layout.n_embd_k;
  for (const KeyRotation& rope : ropes) {
    if (rope.head_dim <= 0 || n_embd % rope.head_dim != 0 || rope.head_dim != ropes[0].head_dim)
      throw Error("context shift: head width " + std::to_string(rope.head_dim) + " does not divide the K width " +
                  std::to_string(n_embd));
    if (rope.n_rot < 0 || rope.n_rot > rope.head_dim || rope.n_rot % 2 != 0)
      throw Error("context shift: rotary dims " + std::to_string(rope.n_rot) + " must be even and at most " +
                  std::to_string(rope.head_dim));
  }
  if (rope_of_layer.size() < layout.layer_has_kv.size())
    throw Error("context shift: no rotation given for every layer");
  if (!kv.has_shift()) return 0;
  const int64_t head_dim = ropes[0].head_dim;
  const int64_t n_heads = n_embd / head_dim;
  const GgmlType type = layout.type_k;
  // Rotated keys (model/kv_rotation.h) are turned back before RoPE and rotated again after, as
  // llama.cpp's shift does: the Hadamard rotation does not commute with RoPE.
  const KvRotators rotators(layout.rotation);
  const HadamardRotation& k_rot = rotators.k;
  std::vector<int> kv_layers;
  for (size_t il = 0; il < layout.layer_has_kv.size(); ++il)
    if (layout.layer_has_kv[il]) kv_layers.push_back(static_cast<int>(il));

  memory::KvRows& rows = kv.rows();
  // YaRN rotations (gpt-oss) turn by the delta's YaRN table, magnitude factor included, as
  // llama.cpp's build_rope_shift passes the context's YaRN parameters to ggml_rope_ext.
  std::vector<RopeYarn> yarns;
  for (const KeyRotation& rope : ropes) yarns.push_back(rope.yarn());
  int64_t rotated = 0;
  for (uint32_t s = 0; s < layout.n_streams(); ++s) {
    const std::vector<std::pair<uint32_t, memory::Pos>> todo = memory::pending_shifts(kv.cells(s));
    rotated += static_cast<int64_t>(todo.size());
    if (todo.empty()) continue;

    pool.parallel_for(static_cast<int64_t>(todo.size()), [&](int64_t begin, int64_t end) {
      // One cos/sin table per cell and rotation serves every head of every layer that uses it.
      std::vector<std::vector<float>> cos_sin(ropes.size());
      std::vector<float> row(static_cast<size_t>(n_embd));
      for (int64_t t = begin; t < end; ++t) {
        const auto [cell, delta] = todo[static_cast<size_t>(t)];
        for (size_t r = 0; r < ropes.size(); ++r) {
          cos_sin[r].resize(static_cast<size_t>(ropes[r].n_rot));
          rope_cache(static_cast<float>(delta), ropes[r].n_rot, ropes[r].freq_base, ropes[r].freq_scale,
                     ropes[r].freq_factors, yarns[r], cos_sin[r].data());
        }
        for (int il : kv_layers) {
          const size_t r = static_cast<size_t>(rope_of_layer[static_cast<size_t>(il)]);
          const KeyRotation& rope = ropes[r];
          if (rope.n_rot == 0) continue;
          // A hot F32 row turns in place; any other row (or one in a windowed cache's tail, in
          // the tail's type) through floats.
          const bool in_place = type == GgmlType::F32 && kv.window().is_hot(s, cell);
          float* x = in_place ? reinterpret_cast<float*>(rows.k_row(il, s, cell)) : row.data();
          if (!in_place) rows.dequantize_k(il, s, cell, x);
          k_rot.apply_inverse(x, n_embd);
          for (int64_t h = 0; h < n_heads; ++h) rope_apply(rope.style, x + h * head_dim, rope.n_rot, cos_sin[r].data());
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
  // The distinct rotations of the layers (one, or Gemma 3's local and global pair).
  std::vector<KeyRotation> ropes;
  std::vector<int> rope_of_layer(static_cast<size_t>(config_.n_layer), 0);
  for (int il = 0; il < config_.n_layer; ++il) {
    KeyRotation rope;
    static_cast<RopeSpec&>(rope) = layer_rope(il);
    rope.head_dim = config_.head_dim_k;
    auto same = [&](const KeyRotation& r) {
      return static_cast<const RopeSpec&>(r) == static_cast<const RopeSpec&>(rope) && r.head_dim == rope.head_dim;
    };
    auto it = std::find_if(ropes.begin(), ropes.end(), same);
    if (it == ropes.end()) it = ropes.insert(ropes.end(), rope);
    rope_of_layer[static_cast<size_t>(il)] = static_cast<int>(it - ropes.begin());
  }
  return rotate_shifted_keys(kv, ropes, rope_of_layer, pool);
}

}  // namespace agentkv
