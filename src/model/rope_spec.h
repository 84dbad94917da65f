// How an architecture rotates its queries and keys: the layout of the rotated pairs, the rotated
// dims and the frequencies (RoPE; the math is kernels/ops.h's rope_cache / rope_apply).
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace agentkv {

struct RopeSpec {
  RopeStyle style = RopeStyle::Neox;
  int64_t n_rot = 0;  // rotated dims per head (partial rotary when < head_dim)
  float freq_base = 10000.f;
  float freq_scale = 1.f;
  const float* freq_factors = nullptr;  // n_rot/2 divisors of the frequencies (Llama 3's rope_freqs)
};

}  // namespace agentkv
