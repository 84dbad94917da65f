// AVX-512 VNNI dot products of the i-quant weight types with q8_K activations: two 32-element
// groups per 512-bit register. vpdpbusd sums 4 consecutive products of unsigned magnitudes and
// signed q8 bytes into an int32 lane — exactly a lane of llama.cpp's x86 kernels (elements
// 4l..4l+3 of a group) — the signs are applied to q8 under a 64-bit mask taken straight from the
// sign bits, each group's lanes are multiplied by its integer scale, and the two groups' halves
// are added at the superblock's end: the same exact 8 lane sums, the same fused multiply-add per
// superblock, so the same bits as the scalar and AVX2 kernels (quant_iq.h). Without VNNI this
// level uses the AVX2 kernels.
#include <cstring>

#include "kernels/iq_grids.h"
#include "kernels/quant_iq.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"

// GCC 12 reports the undefined upper half in _mm512_castsi128_si512 as uninitialized (a false
// positive inside its own intrinsic headers), as in quant_dot_avx512.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv::quant_detail {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace x86;

#define AGENTKV_IQ_VNNI_INLINE static inline __attribute__((target(AGENTKV_TARGET_AVX512 ",avx512vnni"), always_inline))

// 64 q8 bytes, negated where the weight's sign bit (bit e of `negative`) is set.
AGENTKV_IQ_VNNI_INLINE __m512i signed_q8(const int8_t* q8, uint64_t negative) {
  const __m512i v = _mm512_loadu_si512(q8);
  return _mm512_mask_sub_epi8(v, static_cast<__mmask64>(negative), _mm512_setzero_si512(), v);
}

// Exact lane sums of 64 elements, times their scales (16 int32: lanes 0..7 group 0, 8..15 group 1).
AGENTKV_IQ_VNNI_INLINE __m512i scaled_lanes(__m512i magnitudes, __m512i q8s, __m512i scales) {
  return _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitudes, q8s), scales);
}

// Scales of two groups of 32 (s[0], s[1]) or four of 16 (s[0..3]) spread over the 16 lanes.
AGENTKV_IQ_VNNI_INLINE __m512i scales_per_32(int s0, int s1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(s0)), _mm256_set1_epi32(s1), 1);
}
AGENTKV_IQ_VNNI_INLINE __m512i scales_per_16(int s0, int s1, int s2, int s3) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                  _mm512_castsi128_si512(_mm_setr_epi32(s0, s1, s2, s3)));
}

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t load_u64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The sign bytes of the parity-coded types for 32 elements: 4 x 7 bits from bit 0 of `packed`.
inline uint64_t parity_signs_32(uint32_t packed) {
  return static_cast<uint64_t>(kIQ2KSigns[packed & 127]) | (static_cast<uint64_t>(kIQ2KSigns[(packed >> 7) & 127]) << 8) |
         (static_cast<uint64_t>(kIQ2KSigns[(packed >> 14) & 127]) << 16) |
         (static_cast<uint64_t>(kIQ2KSigns[(packed >> 21) & 127]) << 24);
}

// Grid entries go into registers from general registers (vpinsrq / vpinsrd): stored to memory
// and loaded as one vector, they stall on store forwarding (1.5-2.6 x slower, measured on Zen 4).
AGENTKV_IQ_VNNI_INLINE __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
AGENTKV_IQ_VNNI_INLINE __m256i entries4(uint64_t e0, uint64_t e1, uint64_t e2, uint64_t e3) {
  return _mm256_setr_epi64x(static_cast<long long>(e0), static_cast<long long>(e1), static_cast<long long>(e2),
                            static_cast<long long>(e3));
}
AGENTKV_IQ_VNNI_INLINE __m256i entries8(const uint32_t* grid, const uint8_t* idx) {
  return _mm256_setr_epi32(static_cast<int>(grid[idx[0]]), static_cast<int>(grid[idx[1]]), static_cast<int>(grid[idx[2]]),
                           static_cast<int>(grid[idx[3]]), static_cast<int>(grid[idx[4]]), static_cast<int>(grid[idx[5]]),
                           static_cast<int>(grid[idx[6]]), static_cast<int>(grid[idx[7]]));
}

template <class Block, __m512i (*lanes_of)(const Block&, const int8_t*)>
AGENTKV_IQ_VNNI_INLINE float superblock_sum(int64_t n, const void* w, const void* a, float factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    const __m512i both = lanes_of(x[ib], y[ib].qs);
    const __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(both), _mm512_extracti64x4_epi64(both, 1));
    const float d = half_to_float(x[ib].d) * y[ib].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
  }
  return factor * hsum_ps(acc);
}

AGENTKV_IQ_VNNI_INLINE __m512i lanes_iq2_xxs(const BlockIQ2_XXS& b, const int8_t* q8) {
  __m512i sum = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    const uint8_t* i0 = reinterpret_cast<const uint8_t*>(b.qs + 4 * g);  // grid indices of group g
    const uint8_t* i1 = reinterpret_cast<const uint8_t*>(b.qs + 4 * g + 4);  // and of group g + 1
    const uint32_t ss0 = load_u32(b.qs + 4 * g + 2), ss1 = load_u32(b.qs + 4 * g + 6);
    const __m512i mag = join(entries4(kIQ2XXSGrid[i0[0]], kIQ2XXSGrid[i0[1]], kIQ2XXSGrid[i0[2]], kIQ2XXSGrid[i0[3]]),
                             entries4(kIQ2XXSGrid[i1[0]], kIQ2XXSGrid[i1[1]], kIQ2XXSGrid[i1[2]], kIQ2XXSGrid[i1[3]]));
    const uint64_t negative = parity_signs_32(ss0) | (parity_signs_32(ss1) << 32);
    const __m512i scales = scales_per_32(2 * static_cast<int>(ss0 >> 28) + 1, 2 * static_cast<int>(ss1 >> 28) + 1);
    sum = _mm512_add_epi32(sum, scaled_lanes(mag, signed_q8(q8 + 32 * g, negative), scales));
  }
  return sum;
}

AGENTKV_IQ_VNNI_INLINE __m512i lanes_iq2_xs(const BlockIQ2_XS& b, const int8_t* q8) {
  __m512i sum = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    const uint16_t* c = b.qs + 4 * g;
    const __m512i mag = join(entries4(kIQ2XSGrid[c[0] & 511], kIQ2XSGrid[c[1] & 511], kIQ2XSGrid[c[2] & 511], kIQ2XSGrid[c[3] & 511]),
                             entries4(kIQ2XSGrid[c[4] & 511], kIQ2XSGrid[c[5] & 511], kIQ2XSGrid[c[6] & 511], kIQ2XSGrid[c[7] & 511]));
    uint64_t negative = 0;
    for (int k = 0; k < 8; ++k) negative |= static_cast<uint64_t>(kIQ2KSigns[c[k] >> 9]) << (8 * k);
    const __m512i scales = scales_per_16(2 * (b.scales[g] & 0xF) + 1, 2 * (b.scales[g] >> 4) + 1,
                                         2 * (b.scales[g + 1] & 0xF) + 1, 2 * (b.scales[g + 1] >> 4) + 1);
    sum = _mm512_add_epi32(sum, scaled_lanes(mag, signed_q8(q8 + 32 * g, negative), scales));
  }
  return sum;
}

AGENTKV_IQ_VNNI_INLINE __m512i lanes_iq2_s(const BlockIQ2_S& b, const int8_t* q8) {
  __m512i sum = _mm512_setzero_si512();
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int g = 0; g < 8; g += 2) {
    const uint8_t* qs = b.qs + 4 * g;
    const int h0 = b.qh[g], h1 = b.qh[g + 1];
    const __m512i mag = join(entries4(kIQ2SGrid[qs[0] | ((h0 << 8) & 0x300)], kIQ2SGrid[qs[1] | ((h0 << 6) & 0x300)],
                                      kIQ2SGrid[qs[2] | ((h0 << 4) & 0x300)], kIQ2SGrid[qs[3] | ((h0 << 2) & 0x300)]),
                             entries4(kIQ2SGrid[qs[4] | ((h1 << 8) & 0x300)], kIQ2SGrid[qs[5] | ((h1 << 6) & 0x300)],
                                      kIQ2SGrid[qs[6] | ((h1 << 4) & 0x300)], kIQ2SGrid[qs[7] | ((h1 << 2) & 0x300)]));
    const __m512i scales = scales_per_16(2 * (b.scales[g] & 0xF) + 1, 2 * (b.scales[g] >> 4) + 1,
                                         2 * (b.scales[g + 1] & 0xF) + 1, 2 * (b.scales[g + 1] >> 4) + 1);
    sum = _mm512_add_epi32(sum, scaled_lanes(mag, signed_q8(q8 + 32 * g, load_u64(signs + 4 * g)), scales));
  }
  return sum;
}

AGENTKV_IQ_VNNI_INLINE __m512i lanes_iq3_xxs(const BlockIQ3_XXS& b, const int8_t* q8) {
  __m512i sum = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    const __m512i mag = join(entries8(kIQ3XXSGrid, b.qs + 8 * g), entries8(kIQ3XXSGrid, b.qs + 8 * g + 8));
    const uint32_t ss0 = load_u32(b.qs + kQK_K / 4 + 4 * g), ss1 = load_u32(b.qs + kQK_K / 4 + 4 * (g + 1));
    const uint64_t negative = parity_signs_32(ss0) | (parity_signs_32(ss1) << 32);
    const __m512i scales = scales_per_32(2 * static_cast<int>(ss0 >> 28) + 1, 2 * static_cast<int>(ss1 >> 28) + 1);
    sum = _mm512_add_epi32(sum, scaled_lanes(mag, signed_q8(q8 + 32 * g, negative), scales));
  }
  return sum;
}

// iq3_s's 8 entries of a group: 9-bit indices, bit 8 of entry k in bit k of qh.
AGENTKV_IQ_VNNI_INLINE __m256i iq3s_entries(const uint8_t* qs, int qh) {
  return _mm256_setr_epi32(static_cast<int>(kIQ3SGrid[qs[0] | ((qh << 8) & 256)]), static_cast<int>(kIQ3SGrid[qs[1] | ((qh << 7) & 256)]),
                           static_cast<int>(kIQ3SGrid[qs[2] | ((qh << 6) & 256)]), static_cast<int>(kIQ3SGrid[qs[3] | ((qh << 5) & 256)]),
                           static_cast<int>(kIQ3SGrid[qs[4] | ((qh << 4) & 256)]), static_cast<int>(kIQ3SGrid[qs[5] | ((qh << 3) & 256)]),
                           static_cast<int>(kIQ3SGrid[qs[6] | ((qh << 2) & 256)]), static_cast<int>(kIQ3SGrid[qs[7] | ((qh << 1) & 256)]));
}

AGENTKV_IQ_VNNI_INLINE __m512i lanes_iq3_s(const BlockIQ3_S& b, const int8_t* q8) {
  __m512i sum = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    const __m512i mag = join(iq3s_entries(b.qs + 8 * g, b.qh[g]), iq3s_entries(b.qs + 8 * g + 8, b.qh[g + 1]));
    const int ls0 = b.scales[g / 2] & 0xF, ls1 = b.scales[g / 2] >> 4;  // g even: one scale byte per pair
    sum = _mm512_add_epi32(sum, scaled_lanes(mag, signed_q8(q8 + 32 * g, load_u64(b.signs + 4 * g)),
                                             scales_per_32(2 * ls0 + 1, 2 * ls1 + 1)));
  }
  return sum;
}

// iq4_xs: |level| as the unsigned operand, the level's sign (its top bit) moved onto q8.
AGENTKV_IQ_VNNI_INLINE __m512i lanes_iq4_xs(const BlockIQ4_XS& b, const int8_t* q8) {
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  // 128-bit quarters [g low, g high, g+1 low, g+1 high] from [g bytes | g+1 bytes] and its >> 4.
  const __m512i quarter_order = _mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7);
  __m512i sum = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 16 * g));
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(packed), _mm256_srli_epi16(packed, 4), 1);
    const __m512i nibbles = _mm512_and_si512(_mm512_permutexvar_epi64(quarter_order, both), _mm512_set1_epi8(0x0F));
    const __m512i levels = _mm512_shuffle_epi8(table, nibbles);
    const uint64_t negative = _mm512_movepi8_mask(levels);
    const int ls0 = ((b.scales_l[g / 2] & 0xF) | ((b.scales_h >> (2 * g)) & 3) << 4) - 32;
    const int ls1 = ((b.scales_l[g / 2] >> 4) | ((b.scales_h >> (2 * g + 2)) & 3) << 4) - 32;
    sum = _mm512_add_epi32(sum, scaled_lanes(_mm512_abs_epi8(levels), signed_q8(q8 + 32 * g, negative), scales_per_32(ls0, ls1)));
  }
  return sum;
}

AGENTKV_AVX512_VNNI float dot_iq2_xxs(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ2_XXS, lanes_iq2_xxs>(n, w, a, 0.125f);
}
AGENTKV_AVX512_VNNI float dot_iq2_xs(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ2_XS, lanes_iq2_xs>(n, w, a, 0.125f);
}
AGENTKV_AVX512_VNNI float dot_iq2_s(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ2_S, lanes_iq2_s>(n, w, a, 0.125f);
}
AGENTKV_AVX512_VNNI float dot_iq3_xxs(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ3_XXS, lanes_iq3_xxs>(n, w, a, 0.25f);
}
AGENTKV_AVX512_VNNI float dot_iq3_s(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ3_S, lanes_iq3_s>(n, w, a, 1.f);
}
AGENTKV_AVX512_VNNI float dot_iq4_xs(int64_t n, const void* w, const void* a) {
  return superblock_sum<BlockIQ4_XS, lanes_iq4_xs>(n, w, a, 1.f);
}

}  // namespace

VecDotFn avx512_iq_vec_dot(GgmlType type) {
  if (!cpu_features().avx512_vnni) return nullptr;  // the AVX2 kernels
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
VecDotFn avx512_iq_vec_dot(GgmlType) { return nullptr; }
#endif

}  // namespace agentkv::quant_detail
