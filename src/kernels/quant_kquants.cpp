// Reference quantizers and dequantizers of the K-quants (q2_K .. q6_K, q8_K): 256-element
// super-blocks whose sub-block scales are themselves quantized. The scale searches
// (make_qx_quants, make_q3_quants, make_qkx2_quants in ggml-quants.c) are reproduced operation by
// operation, since their float comparisons decide which bytes come out; keep this file free of SIMD
// target pragmas so the compiler cannot fuse multiply-adds.
#include <algorithm>
#include <cmath>

#include "kernels/quant_activation.h"
#include "kernels/quant_kernels.h"

namespace agentkv::quant_detail {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Symmetric fit of n values to integers in [-nmax, nmax-1] with weights w = x^2, searching 19
// candidate scales around nmax / max. L receives the integers offset by nmax. Returns the scale.
float fit_symmetric_weighted(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  auto clamp_level = [nmax](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_level(nearest_int(iscale * x[i]));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(nearest_int(iscale * x[i]));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + clamp_level(nearest_int(iscale * x[i])));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// q3_K's sub-block fit (ggml's make_q3_quants with do_rmse): start from nmax / max, then up to 5
// rounds of moving single values to the level that improves the weighted (x^2) fit.
float fit_q3_subblock(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  auto clamp_level = [nmax](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_level(nearest_int(iscale * x[i]));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * static_cast<float>(L[i]) * static_cast<float>(L[i]);
        const int new_l = clamp_level(nearest_int(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric fit x ~ scale * L + min (L in [0, nmax], min <= 0) minimising the weighted error
// (absolute if use_mad, else squared), trying nstep+1 scales (rmin + rdelta*is + nmax) / (max - min)
// and solving the least-squares scale and min for each (ggml's make_qkx2_quants). Returns the
// scale; *neg_min receives -min.
float fit_affine_weighted(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                          float* neg_min, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -min;
    return 0.f;
  }
  auto error_of = [use_mad](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += weights[i] * error_of(diff);
  }
  uint8_t Laux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * static_cast<float>(l);
      sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w * static_cast<float>(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        cur_error += weights[i] * error_of(diff);
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

// Packs 4 planes of 2-bit values (elements j, j+32, j+64, j+96 of each 128) into bytes.
void pack_2bit_planes(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
    }
  }
}

// Stores the eight 6-bit scales and mins of q4_K / q5_K in their 12-byte packing.
void pack_k4_scales(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Shared by q4_K (nmax 15) and q5_K (nmax 31): fits the 8 sub-blocks, quantizes their scales and
// mins to 6 bits against the super-block d / dmin, then re-derives every quant from the final
// scales. Returns d and dmin through the block's fields; L gets the quants (0..nmax).
template <class Block>
void quantize_k4_superblock(const float* x, Block* y, int nmax, float rmin, float rdelta, int nstep,
                            uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = fit_affine_weighted(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], rmin,
                                    rdelta, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  pack_k4_scales(ls, lm, y->scales);
  y->d = fp32_to_fp16(max_scale / 63.f);
  y->dmin = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, y->scales, &sc, &m);
    const float d = f16(y->d) * static_cast<float>(sc);
    if (d == 0.f) continue;
    const float dm = f16(y->dmin) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

void quantize_q2_K(const float* x, BlockQ2_K* y, int64_t n) {
  constexpr float kQ4Scale = 15.f;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t L[kQK_K];
    float weights[16], mins[16], scales[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_affine_weighted(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    if (max_scale > 0) {
      const float iscale = kQ4Scale / max_scale;
      for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = fp32_to_fp16(max_scale / kQ4Scale);
    } else {
      for (int j = 0; j < 16; ++j) y[i].scales[j] = 0;
      y[i].d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = kQ4Scale / max_min;
      for (int j = 0; j < 16; ++j) y[i].scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = fp32_to_fp16(max_min / kQ4Scale);
    } else {
      y[i].dmin = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = f16(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.f) continue;
      const float dm = f16(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit_planes(L, y[i].qs);
  }
}

void quantize_q3_K(const float* x, BlockQ3_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_q3_subblock(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    if (max_scale != 0.f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        }
        l = static_cast<int8_t>(l >> 4);
        y[i].scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
      }
      y[i].d = fp32_to_fp16(1 / iscale);
    } else {
      y[i].d = fp32_to_fp16(0.f);
    }
    int8_t sc[16];
    q3k_scales(y[i].scales, sc);
    for (int j = 0; j < 16; ++j) {
      const float d = f16(y[i].d) * static_cast<float>(sc[j] - 32);
      if (d == 0.f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    // High bit of element j goes to bit (j / 32) of hmask[j % 32]; the 2 low bits to qs.
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    uint8_t low[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) y[i].hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
      low[j] = static_cast<uint8_t>(L[j] > 3 ? L[j] - 4 : L[j]);
    }
    pack_2bit_planes(low, y[i].qs);
  }
}

void quantize_q4_K(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t L[kQK_K];
    quantize_k4_superblock(x, &y[i], 15, -1.f, 0.1f, 20, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quantize_q5_K(const float* x, BlockQ5_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t L[kQK_K];
    quantize_k4_superblock(x, &y[i], 31, -0.5f, 0.1f, 15, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int j0 = 0; j0 < kQK_K; j0 += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[j0 + j], l2 = L[j0 + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void quantize_q6_K(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = fit_symmetric_weighted(16, 32, x + 16 * ib, L + 16 * ib);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < 16; ++ib) {
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < 16; ++j) {
      const float d = f16(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
        const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

// Also the activation quantizer of the K-quant matmuls: dispatches to the SIMD form
// (quant_activation_x86.cpp), which reproduces this loop byte for byte.
void quantize_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  if (const QuantizeQ8_KFn simd = simd_activation_quantizers(active_cpu_level()).q8_K) return simd(x, y, n);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void dequantize_q2_K(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16(x[i].d), min = f16(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int n0 = 0; n0 < kQK_K; n0 += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * half + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_q3_K(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = f16(x[i].d);
    int8_t scales[16];
    q3k_scales(x[i].scales, scales);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int n0 = 0; n0 < kQK_K; n0 += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * static_cast<float>(scales[is++] - 32);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequantize_q4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16(x[i].d), min = f16(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      k4_scale_min(is, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      k4_scale_min(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16(x[i].d), min = f16(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      uint8_t sc, m;
      k4_scale_min(is, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      k4_scale_min(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequantize_q6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n0 = 0; n0 < kQK_K; n0 += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_q8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

}  // namespace agentkv::quant_detail
