// Reference quantizers and dequantizers of the 32-element block types (q4_0, q4_1, q5_0, q5_1,
// q8_0, q8_1, iq4_nl, mxfp4). The float arithmetic mirrors ggml's quantize_row_*_ref operation by
// operation (same order, same rounding helpers), because GGUF files and the test fixtures were
// produced by it; this file must stay free of SIMD target pragmas so no FMA contraction creeps in.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/quant_activation.h"
#include "kernels/quant_kernels.h"

namespace agentkv::quant_detail {
namespace {

// Largest-magnitude element of a block, keeping its sign (first one wins on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

// Packs 5-bit values: low nibbles as in q4_0, bit 4 of element j into bit j of qh.
void pack_5bit(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= ((q[j] & 0x10u) >> 4) << j;
    qh |= ((q[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

// Bit 4 of elements j and j+16 from qh, shifted into place.
inline int high_bit_lo(uint32_t qh, int j) { return ((qh >> j) << 4) & 0x10; }
inline int high_bit_hi(uint32_t qh, int j) { return (qh >> (j + 12)) & 0x10; }

int nearest_iq4nl_index(float x) { return nearest_level_index(kIQ4NLValues, 16, x); }

}  // namespace

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i, x += kQK4_0) {
    const float max = signed_absmax(x, kQK4_0);
    const float d = max / -8;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[j + kQK4_0 / 2] * id;
      const uint8_t q0 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x0 + 8.5f)));
      const uint8_t q1 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x1 + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i, x += kQK4_1) {
    float min, max;
    min_max(x, kQK4_1, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[j + kQK4_1 / 2] - min) * id;
      const uint8_t q0 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x0 + 0.5f)));
      const uint8_t q1 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x1 + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i, x += kQK5_0) {
    const float max = signed_absmax(x, kQK5_0);
    const float d = max / -16;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint8_t q[kQK5_0];
    for (int j = 0; j < kQK5_0; ++j)
      q[j] = static_cast<uint8_t>(std::min<int>(31, static_cast<int8_t>(x[j] * id + 16.5f)));
    pack_5bit(q, y[i].qs, y[i].qh);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i, x += kQK5_1) {
    float min, max;
    min_max(x, kQK5_1, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    uint8_t q[kQK5_1];
    for (int j = 0; j < kQK5_1; ++j) q[j] = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
    pack_5bit(q, y[i].qs, y[i].qh);
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i, x += kQK8_0) {
    float amax = 0.f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i, x += kQK8_1) {
    float amax = 0.f;
    for (int j = 0; j < kQK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

namespace {
// ggml-cpu's AVX activation quantizer for one 32-element block: returns the int8 quants and the
// unrounded scale d = amax / 127.
float quantize_block_q8_x86(const float* x, int8_t* qs) {
  float amax = 0.f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  for (int j = 0; j < 32; ++j) qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  return d;
}
}  // namespace

// The scalar loops below are the portable fallback and the reference the SIMD forms
// (quant_activation_x86.cpp) reproduce byte for byte.
void quantize_q8_0_activation(const float* x, BlockQ8_0* y, int64_t n) {
  if (const QuantizeQ8_0Fn simd = simd_activation_quantizers(active_cpu_level()).q8_0) return simd(x, y, n);
  for (int64_t i = 0; i < n / kQK8_0; ++i, x += kQK8_0) y[i].d = fp32_to_fp16(quantize_block_q8_x86(x, y[i].qs));
}

void quantize_q8_1_activation(const float* x, BlockQ8_1* y, int64_t n) {
  if (const QuantizeQ8_1Fn simd = simd_activation_quantizers(active_cpu_level()).q8_1) return simd(x, y, n);
  for (int64_t i = 0; i < n / kQK8_1; ++i, x += kQK8_1) {
    const float d = quantize_block_q8_x86(x, y[i].qs);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) sum += y[i].qs[j];
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

// ggml's iq4_nl quantizer (quantize_iq4_nl without importance weights, which is what
// quantize_row_iq4_nl_ref called when the fixtures were made): weights x^2, a weighted
// least-squares scale for the levels picked at each of 15 trial scales (itry - 127) / max, the best
// fit kept, and every element re-picked against the final fp32 scale.
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
  constexpr float kGroupMaxEps = 1e-15f;
  constexpr int kTrials = 7;
  for (int64_t i = 0; i < n / kQK4_NL; ++i, x += kQK4_NL) {
    uint8_t L[kQK4_NL];
    float weight[kQK4_NL];
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < kQK4_NL; ++j) {
      weight[j] = x[j] * x[j];
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    float d = 0.f;
    if (amax >= kGroupMaxEps) {
      // Weighted fit of the levels chosen with inverse scale id; returns false if degenerate.
      auto fit = [&](float id, float* sumqx, float* sumq2) {
        *sumqx = 0;
        *sumq2 = 0;
        for (int j = 0; j < kQK4_NL; ++j) {
          const float q = kIQ4NLValues[nearest_iq4nl_index(id * x[j])];
          *sumqx += weight[j] * q * x[j];
          *sumq2 += weight[j] * q * q;
        }
      };
      float sumqx, sumq2;
      fit(1 / (-max / kIQ4NLValues[0]), &sumqx, &sumq2);
      d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
      float best = d * sumqx;
      for (int itry = -kTrials; itry <= kTrials; ++itry) {
        fit(static_cast<float>(itry + kIQ4NLValues[0]) / max, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
    }
    y[i].d = fp32_to_fp16(d);
    const float id = d != 0.f ? 1 / d : 0.f;
    for (int j = 0; j < kQK4_NL; ++j) L[j] = static_cast<uint8_t>(nearest_iq4nl_index(id * x[j]));
    for (int j = 0; j < kQK4_NL / 2; ++j) y[i].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

// ggml's quantize_row_mxfp4_ref: the exponent from the block's largest magnitude, e =
// floor(log2(amax)) - 2 + 127 (so amax / half-scale lies in [8, 16): the top level 12 covers
// it), then each element to the code whose value lies nearest (the first on a tie, so 0 and the
// positive code win), the error |value * scale - x| measured in float as ggml does. log2f is the C
// library's, as in ggml: near a power of two its rounding decides the exponent.
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_MXFP4; ++i, x += kQK_MXFP4) {
    float amax = 0.f;
    for (int j = 0; j < kQK_MXFP4; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    uint8_t e = 0;
    if (amax > 0.f) {
      const float biased = std::floor(std::log2(amax)) - 2 + 127;
      // ggml converts the float to uint8_t directly; GCC on x86 truncates to int32 (cvttss2si:
      // INT32_MIN when out of range) and keeps the low byte, which matters only for amax < 2^-125.
      const int32_t t = biased > -2147483648.f && biased < 2147483648.f ? static_cast<int32_t>(biased) : INT32_MIN;
      e = static_cast<uint8_t>(static_cast<uint32_t>(t));
    }
    const float d = mxfp4_half_scale(e);
    // The 16 candidate values for every element at once (candidate-major, so the loop vectorises);
    // a later code replaces the best only when strictly nearer, as ggml's best_index_mxfp4.
    float best[kQK_MXFP4];
    uint8_t code[kQK_MXFP4];
    const float v0 = static_cast<float>(kMXFP4Values[0]) * d;
    for (int j = 0; j < kQK_MXFP4; ++j) {
      best[j] = std::fabs(v0 - x[j]);
      code[j] = 0;
    }
    for (int c = 1; c < 16; ++c) {
      const float v = static_cast<float>(kMXFP4Values[c]) * d;
      for (int j = 0; j < kQK_MXFP4; ++j) {
        const float err = std::fabs(v - x[j]);
        const bool nearer = err < best[j];
        best[j] = nearer ? err : best[j];
        code[j] = nearer ? static_cast<uint8_t>(c) : code[j];
      }
    }
    y[i].e = e;
    for (int j = 0; j < kQK_MXFP4 / 2; ++j) y[i].qs[j] = static_cast<uint8_t>(code[j] | (code[j + 16] << 4));
  }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i, y += kQK4_0) {
    const float d = f16(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i, y += kQK4_1) {
    const float d = f16(x[i].d), m = f16(x[i].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i, y += kQK5_0) {
    const float d = f16(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | high_bit_lo(qh, j)) - 16) * d;
      y[j + 16] = static_cast<float>(((x[i].qs[j] >> 4) | high_bit_hi(qh, j)) - 16) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i, y += kQK5_1) {
    const float d = f16(x[i].d), m = f16(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) | high_bit_lo(qh, j)) * d + m;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) | high_bit_hi(qh, j)) * d + m;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i, y += kQK8_0) {
    const float d = f16(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i, y += kQK8_1) {
    const float d = f16(x[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_NL; ++i, y += kQK4_NL) {
    const float d = f16(x[i].d);
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[j] = d * static_cast<float>(kIQ4NLValues[x[i].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kIQ4NLValues[x[i].qs[j] >> 4]);
    }
  }
}

void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_MXFP4; ++i, y += kQK_MXFP4) {
    const float d = mxfp4_half_scale(x[i].e);
    for (int j = 0; j < kQK_MXFP4 / 2; ++j) {
      y[j] = static_cast<float>(kMXFP4Values[x[i].qs[j] & 0xF]) * d;
      y[j + 16] = static_cast<float>(kMXFP4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

}  // namespace agentkv::quant_detail
