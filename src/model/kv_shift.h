// Context shift for the attention KV cache: re-rotating stored keys after seq_add / seq_div.
// RoPE bakes a key's position into its stored row; rotating by the position delta δ brings it to
// the new position, since rotation by p then by δ equals rotation by p + δ (up to float rounding,
// and the requantization of quantized K types).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/threadpool.h"
#include "memory/kv_cache.h"
#include "model/rope_spec.h"

namespace agentkv {

struct KeyRotation : RopeSpec {
  int64_t head_dim = 0;  // K head width; K rows hold n_embd_k / head_dim heads
};

// For every stream and every used cell with a non-zero pending shift, rotates the first n_rot
// dims of each K head, in every KV layer, by that shift (the rope's style and frequencies). K types other than f32 are
// dequantized, rotated in f32 and requantized. Cells whose rows are known zero (fake prefix) are
// skipped: a zero key rotates to itself. Then clears the pending shifts (kv.reset_shift()).
// Returns the number of cells rotated. agentkv::Error if head_dim does not divide the K width or
// n_rot is odd or exceeds head_dim.
int64_t rotate_shifted_keys(memory::KvCache& kv, const KeyRotation& rope, ThreadPool& pool);
// The same with a rotation per layer: layer il's keys turn by ropes[rope_of_layer[il]] (Gemma 3's
// windowed layers have their own frequency base). Every rotation must have the same head_dim.
int64_t rotate_shifted_keys(memory::KvCache& kv, std::span<const KeyRotation> ropes,
                            std::span<const int> rope_of_layer, ThreadPool& pool);

}  // namespace agentkv
