// The i-quant superblocks unpacked (IqSuperblock), ggml's dequantizers (bit for bit: the float
// products in dequantize_row_iq*'s order) and the portable dot products in the float order of
// llama.cpp's x86 kernels (quant_iq.h).
#include "kernels/quant_iq.h"

#include <cmath>
#include <cstring>

#include "kernels/iq_grids.h"
#include "kernels/quant_kernels.h"

namespace agentkv::quant_detail {
namespace {

// Writes the n magnitudes of a grid entry (byte j = element j) with the signs of sign_bits.
template <class Entry>
void put_grid(Entry entry, uint8_t sign_bits, int n, int8_t* q) {
  for (int j = 0; j < n; ++j) {
    const int magnitude = static_cast<int>((entry >> (8 * j)) & 0xFF);
    q[j] = static_cast<int8_t>(sign_bits & kIQ2KMask[j] ? -magnitude : magnitude);
  }
}

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void unpack_iq2_xxs(const BlockIQ2_XXS& b, IqSuperblock* out) {
  for (int ib32 = 0; ib32 < 8; ++ib32) {
    const uint32_t grids = load_u32(b.qs + 4 * ib32);
    const uint32_t signs_scale = load_u32(b.qs + 4 * ib32 + 2);
    for (int l = 0; l < 4; ++l)
      put_grid(kIQ2XXSGrid[(grids >> (8 * l)) & 0xFF], kIQ2KSigns[(signs_scale >> (7 * l)) & 127], 8, out->q + 32 * ib32 + 8 * l);
    out->ls[2 * ib32] = out->ls[2 * ib32 + 1] = static_cast<uint8_t>(signs_scale >> 28);
  }
}

void unpack_iq2_xs(const BlockIQ2_XS& b, IqSuperblock* out) {
  for (int ib32 = 0; ib32 < 8; ++ib32) {
    for (int l = 0; l < 4; ++l) {
      const uint16_t code = b.qs[4 * ib32 + l];
      put_grid(kIQ2XSGrid[code & 511], kIQ2KSigns[code >> 9], 8, out->q + 32 * ib32 + 8 * l);
    }
    out->ls[2 * ib32] = b.scales[ib32] & 0xF;
    out->ls[2 * ib32 + 1] = b.scales[ib32] >> 4;
  }
}

void unpack_iq2_s(const BlockIQ2_S& b, IqSuperblock* out) {
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int ib32 = 0; ib32 < 8; ++ib32) {
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * ib32 + l] | ((b.qh[ib32] << (8 - 2 * l)) & 0x300);
      put_grid(kIQ2SGrid[index], signs[4 * ib32 + l], 8, out->q + 32 * ib32 + 8 * l);
    }
    out->ls[2 * ib32] = b.scales[ib32] & 0xF;
    out->ls[2 * ib32 + 1] = b.scales[ib32] >> 4;
  }
}

void unpack_iq3_xxs(const BlockIQ3_XXS& b, IqSuperblock* out) {
  const uint8_t* scales_and_signs = b.qs + kQK_K / 4;
  for (int ib32 = 0; ib32 < 8; ++ib32) {
    const uint32_t aux = load_u32(scales_and_signs + 4 * ib32);
    const uint8_t* qs = b.qs + 8 * ib32;
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = kIQ2KSigns[(aux >> (7 * l)) & 127];
      int8_t* q = out->q + 32 * ib32 + 8 * l;
      put_grid(kIQ3XXSGrid[qs[2 * l]], signs, 4, q);
      put_grid(kIQ3XXSGrid[qs[2 * l + 1]], static_cast<uint8_t>(signs >> 4), 4, q + 4);
    }
    out->ls[2 * ib32] = out->ls[2 * ib32 + 1] = static_cast<uint8_t>(aux >> 28);
  }
}

void unpack_iq3_s(const BlockIQ3_S& b, IqSuperblock* out) {
  for (int ib32 = 0; ib32 < 8; ++ib32) {
    const uint8_t* qs = b.qs + 8 * ib32;
    for (int k = 0; k < 8; ++k) {  // grid entry k of the group: elements 4k..4k+3
      const int index = qs[k] | (((b.qh[ib32] >> k) & 1) << 8);
      const uint8_t signs = static_cast<uint8_t>(b.signs[4 * ib32 + k / 2] >> (4 * (k % 2)));
      put_grid(kIQ3SGrid[index], signs, 4, out->q + 32 * ib32 + 4 * k);
    }
    const uint8_t ls = (b.scales[ib32 / 2] >> (4 * (ib32 % 2))) & 0xF;
    out->ls[2 * ib32] = out->ls[2 * ib32 + 1] = ls;
  }
}

void unpack_iq4_xs(const BlockIQ4_XS& b, IqSuperblock* out) {
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    out->ls[2 * ib] = out->ls[2 * ib + 1] = static_cast<uint8_t>(ls);
    for (int j = 0; j < 16; ++j) {
      out->q[32 * ib + j] = kIQ4NLValues[b.qs[16 * ib + j] & 0xF];
      out->q[32 * ib + j + 16] = kIQ4NLValues[b.qs[16 * ib + j] >> 4];
    }
  }
}

// ggml's float scale of 16 elements, in dequantize_row_iq*'s operation order.
float dequant_scale(GgmlType type, float d, int ls) {
  switch (type) {
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: return d * (0.5f + static_cast<float>(ls)) * 0.25f;
    case GgmlType::IQ3_XXS: return d * (0.5f + static_cast<float>(ls)) * 0.5f;
    case GgmlType::IQ3_S: return d * static_cast<float>(1 + 2 * ls);
    default: return d * static_cast<float>(ls - 32);  // iq4_xs
  }
}

// ggml's hsum_float_8: lane l + lane l+4, then (0 + 2) + (1 + 3).
float hsum_float_8(const float v[8]) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// The scalar kernel every type shares: 8 exact integer lanes per superblock, one fused
// multiply-add each by d_w * d_q8, ggml's lane reduction, the type's power of two.
template <GgmlType kType>
float dot_iq(int64_t n, const void* w, const void* a) {
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  IqSuperblock sb;
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    iq_unpack(kType, w, ib, &sb);
    int lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int e = 0; e < kQK_K; e += 4) {
      int sum = 0;
      for (int k = e; k < e + 4; ++k) sum += sb.q[k] * y[ib].qs[k];
      lanes[(e % 32) / 4] += iq_integer_scale(kType, sb.ls[e / 16]) * sum;
    }
    const float d = sb.d * y[ib].d;
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(lanes[l]), acc[l]);
  }
  return iq_dot_factor(kType) * hsum_float_8(acc);
}

}  // namespace

bool is_iq_type(GgmlType type) {
  switch (type) {
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

void iq_unpack(GgmlType type, const void* row, int64_t ib, IqSuperblock* out) {
  switch (type) {
    case GgmlType::IQ2_XXS: {
      const auto& b = static_cast<const BlockIQ2_XXS*>(row)[ib];
      out->d = f16(b.d);
      return unpack_iq2_xxs(b, out);
    }
    case GgmlType::IQ2_XS: {
      const auto& b = static_cast<const BlockIQ2_XS*>(row)[ib];
      out->d = f16(b.d);
      return unpack_iq2_xs(b, out);
    }
    case GgmlType::IQ2_S: {
      const auto& b = static_cast<const BlockIQ2_S*>(row)[ib];
      out->d = f16(b.d);
      return unpack_iq2_s(b, out);
    }
    case GgmlType::IQ3_XXS: {
      const auto& b = static_cast<const BlockIQ3_XXS*>(row)[ib];
      out->d = f16(b.d);
      return unpack_iq3_xxs(b, out);
    }
    case GgmlType::IQ3_S: {
      const auto& b = static_cast<const BlockIQ3_S*>(row)[ib];
      out->d = f16(b.d);
      return unpack_iq3_s(b, out);
    }
    case GgmlType::IQ4_XS: {
      const auto& b = static_cast<const BlockIQ4_XS*>(row)[ib];
      out->d = f16(b.d);
      return unpack_iq4_xs(b, out);
    }
    default: return;
  }
}

int iq_integer_scale(GgmlType type, int ls) { return type == GgmlType::IQ4_XS ? ls - 32 : 2 * ls + 1; }

float iq_dot_factor(GgmlType type) {
  switch (type) {
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: return 0.125f;
    case GgmlType::IQ3_XXS: return 0.25f;
    default: return 1.f;
  }
}

// y = db * (±magnitude): ggml computes (db * magnitude) * ±1, the same bits (negation is exact).
void dequantize_iq(GgmlType type, const void* src, float* dst, int64_t n) {
  IqSuperblock sb;
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    iq_unpack(type, src, ib, &sb);
    float* y = dst + ib * kQK_K;
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float db = dequant_scale(type, sb.d, sb.ls[g]);
      for (int j = 16 * g; j < 16 * g + 16; ++j) y[j] = db * static_cast<float>(sb.q[j]);
    }
  }
}

VecDotFn scalar_iq_vec_dot(GgmlType type) {
  switch (type) {
    case GgmlType::IQ2_XXS: return dot_iq<GgmlType::IQ2_XXS>;
    case GgmlType::IQ2_XS: return dot_iq<GgmlType::IQ2_XS>;
    case GgmlType::IQ2_S: return dot_iq<GgmlType::IQ2_S>;
    case GgmlType::IQ3_XXS: return dot_iq<GgmlType::IQ3_XXS>;
    case GgmlType::IQ3_S: return dot_iq<GgmlType::IQ3_S>;
    case GgmlType::IQ4_XS: return dot_iq<GgmlType::IQ4_XS>;
    default: return nullptr;
  }
}

}  // namespace agentkv::quant_detail
