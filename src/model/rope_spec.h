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
  // YaRN (ModelConfig::rope_yarn_*): ext_factor 0 and attn_factor 1 rotate plainly.
  float ext_factor = 0.f;
  float attn_factor = 1.f;
  float beta_fast = 32.f;
  float beta_slow = 1.f;
  int64_t n_ctx_orig = 0;

  // Every field, YaRN's included: two layers rotate alike exactly when their specs are equal.
  bool operator==(const RopeSpec&) const = default;

  // The kernel's YaRN parameters for this base (the correction dims depend on it).
  RopeYarn yarn() const {
    RopeYarn y;
    y.ext_factor = ext_factor;
    y.attn_factor = attn_factor;
    if (ext_factor != 0.f) rope_yarn_corr_dims(n_rot, n_ctx_orig, freq_base, beta_fast, beta_slow, y.corr_dims);
    return y;
  }
};

}  // namespace agentkv
