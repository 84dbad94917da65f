// AVX2 dot products of the i-quant weight types with q8_K activations. Per 32-element group: the
// weights' magnitudes as unsigned bytes (grid entries, or |level| for iq4_xs), their signs moved
// onto the q8 bytes, maddubs into int16 pairs, madd by the group's integer scale into 8 int32
// lanes (lane l = elements 4l..4l+3) — the lanes of llama.cpp's x86 kernels, summed exactly over
// the superblock, then one fused multiply-add per superblock into 8 float lanes (quant_iq.h).
// The same bits as the scalar kernels (quant_iq.cpp).
#include <cstring>

#include "kernels/iq_grids.h"
#include "kernels/quant_iq.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"

namespace agentkv::quant_detail {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace x86;

// 4 sign bytes (bit j of byte g: element 8g + j negative) -> 32 bytes, 0xFF where negative.
AGENTKV_AVX2_INLINE __m256i sign_mask_32(uint32_t sign_bytes) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(sign_bytes)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit_of_byte = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_of_byte), bit_of_byte);
}

// q8 with the weights' signs applied: negated where the mask is set (q8 >= -127, so no overflow).
AGENTKV_AVX2_INLINE __m256i apply_signs(__m256i q8, __m256i negative) {
  return _mm256_sub_epi8(_mm256_xor_si256(q8, negative), negative);
}

// The 4 sign bytes of a group of parity-coded types: 4 x 7 bits from bit 0 of `packed`.
inline uint32_t parity_sign_bytes(uint32_t packed) {
  return static_cast<uint32_t>(kIQ2KSigns[packed & 127]) | (static_cast<uint32_t>(kIQ2KSigns[(packed >> 7) & 127]) << 8) |
         (static_cast<uint32_t>(kIQ2KSigns[(packed >> 14) & 127]) << 16) |
         (static_cast<uint32_t>(kIQ2KSigns[(packed >> 21) & 127]) << 24);
}

// Integer lanes of one group: maddubs(magnitudes, signed q8) then madd by the int16 scales.
AGENTKV_AVX2_INLINE __m256i group_lanes(__m256i magnitudes, __m256i signed_q8, __m256i scales16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, signed_q8), scales16);
}

// One scale for the 32 elements, or one per 16 (low 128 bits: elements 0..15).
AGENTKV_AVX2_INLINE __m256i scale_32(int s) { return _mm256_set1_epi16(static_cast<int16_t>(s)); }
AGENTKV_AVX2_INLINE __m256i scale_16_16(int s0, int s1) {
  return _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(s0)), _mm_set1_epi16(static_cast<int16_t>(s1)));
}

AGENTKV_AVX2_INLINE __m256i load_q8(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The superblock loop every type shares; lanes_of(block, q8) gives its 8 int32 lanes.
template <class Block, __m256i (*lanes_of)(const Block&, const int8_t*)>
AGENTKV_AVX2_INLINE float superblock_sum(int64_t n, const void* w, const void* a, float factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    const __m256i lanes = lanes_of(x[ib], y[ib].qs);
    const float d = half_to_float(x[ib].d) * y[ib].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
  }
  return factor * hsum_ps(acc);
}

AGENTKV_AVX2_INLINE __m256i lanes_iq2_xxs(const BlockIQ2_XXS& b, const int8_t* q8) {
  __m256i sum = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const uint32_t grids = load_u32(b.qs + 4 * g), signs_scale = load_u32(b.qs + 4 * g + 2);
    const __m256i mag = _mm256_setr_epi64x(
        static_cast<long long>(kIQ2XXSGrid[grids & 0xFF]), static_cast<long long>(kIQ2XXSGrid[(grids >> 8) & 0xFF]),
        static_cast<long long>(kIQ2XXSGrid[(grids >> 16) & 0xFF]), static_cast<long long>(kIQ2XXSGrid[grids >> 24]));
    const __m256i q8s = apply_signs(load_q8(q8 + 32 * g), sign_mask_32(parity_sign_bytes(signs_scale)));
    sum = _mm256_add_epi32(sum, group_lanes(mag, q8s, scale_32(2 * static_cast<int>(signs_scale >> 28) + 1)));
  }
  return sum;
}
AGENTKV_AVX2 float dot_iq2_xxs(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ2_XXS, lanes_iq2_xxs>(n, w, a, 0.125f);
}

AGENTKV_AVX2_INLINE __m256i lanes_iq2_xs(const BlockIQ2_XS& b, const int8_t* q8) {
  __m256i sum = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const uint16_t* c = b.qs + 4 * g;
    const __m256i mag = _mm256_setr_epi64x(
        static_cast<long long>(kIQ2XSGrid[c[0] & 511]), static_cast<long long>(kIQ2XSGrid[c[1] & 511]),
        static_cast<long long>(kIQ2XSGrid[c[2] & 511]), static_cast<long long>(kIQ2XSGrid[c[3] & 511]));
    const uint32_t packed = static_cast<uint32_t>(c[0] >> 9) | (static_cast<uint32_t>(c[1] >> 9) << 7) |
                            (static_cast<uint32_t>(c[2] >> 9) << 14) | (static_cast<uint32_t>(c[3] >> 9) << 21);
    const __m256i q8s = apply_signs(load_q8(q8 + 32 * g), sign_mask_32(parity_sign_bytes(packed)));
    const int s0 = 2 * (b.scales[g] & 0xF) + 1, s1 = 2 * (b.scales[g] >> 4) + 1;
    sum = _mm256_add_epi32(sum, group_lanes(mag, q8s, scale_16_16(s0, s1)));
  }
  return sum;
}
AGENTKV_AVX2 float dot_iq2_xs(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ2_XS, lanes_iq2_xs>(n, w, a, 0.125f);
}

AGENTKV_AVX2_INLINE __m256i lanes_iq2_s(const BlockIQ2_S& b, const int8_t* q8) {
  __m256i sum = _mm256_setzero_si256();
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int g = 0; g < 8; ++g) {
    const uint8_t* qs = b.qs + 4 * g;
    const int qh = b.qh[g];
    const __m256i mag = _mm256_setr_epi64x(static_cast<long long>(kIQ2SGrid[qs[0] | ((qh << 8) & 0x300)]),
                                           static_cast<long long>(kIQ2SGrid[qs[1] | ((qh << 6) & 0x300)]),
                                           static_cast<long long>(kIQ2SGrid[qs[2] | ((qh << 4) & 0x300)]),
                                           static_cast<long long>(kIQ2SGrid[qs[3] | ((qh << 2) & 0x300)]));
    const __m256i q8s = apply_signs(load_q8(q8 + 32 * g), sign_mask_32(load_u32(signs + 4 * g)));
    const int s0 = 2 * (b.scales[g] & 0xF) + 1, s1 = 2 * (b.scales[g] >> 4) + 1;
    sum = _mm256_add_epi32(sum, group_lanes(mag, q8s, scale_16_16(s0, s1)));
  }
  return sum;
}
AGENTKV_AVX2 float dot_iq2_s(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ2_S, lanes_iq2_s>(n, w, a, 0.125f);
}

AGENTKV_AVX2_INLINE __m256i lanes_iq3_xxs(const BlockIQ3_XXS& b, const int8_t* q8) {
  __m256i sum = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const uint8_t* qs = b.qs + 8 * g;
    const uint32_t signs_scale = load_u32(b.qs + kQK_K / 4 + 4 * g);
    const __m256i mag = _mm256_setr_epi32(
        static_cast<int>(kIQ3XXSGrid[qs[0]]), static_cast<int>(kIQ3XXSGrid[qs[1]]), static_cast<int>(kIQ3XXSGrid[qs[2]]),
        static_cast<int>(kIQ3XXSGrid[qs[3]]), static_cast<int>(kIQ3XXSGrid[qs[4]]), static_cast<int>(kIQ3XXSGrid[qs[5]]),
        static_cast<int>(kIQ3XXSGrid[qs[6]]), static_cast<int>(kIQ3XXSGrid[qs[7]]));
    const __m256i q8s = apply_signs(load_q8(q8 + 32 * g), sign_mask_32(parity_sign_bytes(signs_scale)));
    sum = _mm256_add_epi32(sum, group_lanes(mag, q8s, scale_32(2 * static_cast<int>(signs_scale >> 28) + 1)));
  }
  return sum;
}
AGENTKV_AVX2 float dot_iq3_xxs(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ3_XXS, lanes_iq3_xxs>(n, w, a, 0.25f);
}

AGENTKV_AVX2_INLINE __m256i lanes_iq3_s(const BlockIQ3_S& b, const int8_t* q8) {
  __m256i sum = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const uint8_t* qs = b.qs + 8 * g;
    const int qh = b.qh[g];
    // Built from general registers: an array stored and loaded as one vector stalls on store forwarding.
    const __m256i mag = _mm256_setr_epi32(
        static_cast<int>(kIQ3SGrid[qs[0] | ((qh << 8) & 256)]), static_cast<int>(kIQ3SGrid[qs[1] | ((qh << 7) & 256)]),
        static_cast<int>(kIQ3SGrid[qs[2] | ((qh << 6) & 256)]), static_cast<int>(kIQ3SGrid[qs[3] | ((qh << 5) & 256)]),
        static_cast<int>(kIQ3SGrid[qs[4] | ((qh << 4) & 256)]), static_cast<int>(kIQ3SGrid[qs[5] | ((qh << 3) & 256)]),
        static_cast<int>(kIQ3SGrid[qs[6] | ((qh << 2) & 256)]), static_cast<int>(kIQ3SGrid[qs[7] | ((qh << 1) & 256)]));
    const __m256i q8s = apply_signs(load_q8(q8 + 32 * g), sign_mask_32(load_u32(b.signs + 4 * g)));
    const int ls = (b.scales[g / 2] >> (4 * (g % 2))) & 0xF;
    sum = _mm256_add_epi32(sum, group_lanes(mag, q8s, scale_32(2 * ls + 1)));
  }
  return sum;
}
AGENTKV_AVX2 float dot_iq3_s(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ3_S, lanes_iq3_s>(n, w, a, 1.f);
}

// iq4_xs: signed levels; |level| and the level's sign moved onto q8 (sign_epi8), as iq4_nl's kernel.
AGENTKV_AVX2_INLINE __m256i lanes_iq4_xs(const BlockIQ4_XS& b, const int8_t* q8) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  __m256i sum = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const __m256i levels = _mm256_shuffle_epi8(table, unpack_nibbles(b.qs + 16 * g));
    const __m256i q8s = _mm256_sign_epi8(load_q8(q8 + 32 * g), levels);
    const int ls = ((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b.scales_h >> (2 * g)) & 3) << 4);
    sum = _mm256_add_epi32(sum, group_lanes(_mm256_sign_epi8(levels, levels), q8s, scale_32(ls - 32)));
  }
  return sum;
}
AGENTKV_AVX2 float dot_iq4_xs(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ4_XS, lanes_iq4_xs>(n, w, a, 1.f);
}

}  // namespace

VecDotFn avx2_iq_vec_dot(GgmlType type) {
  switch (type) {
    case GgmlType::IQ2_XXS: return dot_iq2_xxs;
    case GgmlType::IQ2_XS: return dot_iq2_xs;
    case GgmlType::IQ2_S: return dot_iq2_s;
    case GgmlType::IQ3_XXS: return dot_iq3_xxs;
    case GgmlType::IQ3_S: return dot_iq3_s;
    case GgmlType::IQ4_XS: return dot_iq4_xs;
    default: return nullptr;
  }
}
#else
VecDotFn avx2_iq_vec_dot(GgmlType) { return nullptr; }
#endif

}  // namespace agentkv::quant_detail
