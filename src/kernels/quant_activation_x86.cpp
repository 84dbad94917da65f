// AVX2 and AVX-512 activation quantizers (q8_0 / q8_1 in ggml-cpu's x86 rounding, and q8_K). Each
// one performs the float operations of the scalar reference (quant_simple.cpp, quant_kquants.cpp)
// on the same operands, so the bytes are identical on every input:
//  - the block maximum of |x| is exact in any order (max only picks one of its operands);
//  - quants are rounded by cvtps2dq, i.e. in the current rounding mode like std::nearbyint, and
//    ggml's nearest_int (1.5 * 2^23 added) rounds the same way for the |v| <= 127 seen here;
//    using the conversion also leaves no multiply-add the compiler could fuse;
//  - int8 quants are the LOW BYTE of the int32 (vpmovdb / masked packs), the same truncation the
//    scalar casts make, which matters only for blocks whose 127 / amax overflows to infinity;
//  - sums are taken over the stored bytes (sign-flipped psadbw), as the scalar loops do;
//  - fp16 scales come from F16C's vcvtps2ph, rounding to nearest even like fp32_to_fp16 (both are
//    exact IEEE conversions; the test compares them on a broad sample) and like ggml-cpu on x86.
//    fp32_to_fp16 itself is avoided here: under these FMA targets GCC may fuse its multiply-add.

// GCC 12 reports the deliberately undefined upper half in _mm512_castsi128_si512 and the
// _mm512_reduce_* helpers as uninitialized: a false positive inside its own intrinsic headers,
// reported at their location, so the pragmas come before the includes.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/quant_activation.h"

#include <algorithm>
#include <cstring>

#include "agentkv/fp16.h"
#include "kernels/quant_simd_x86.h"

namespace agentkv::quant_detail {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {

#define AGENTKV_ACT_AVX2 __attribute__((target(AGENTKV_TARGET_AVX2)))
#define AGENTKV_ACT_AVX2_INLINE static inline __attribute__((target(AGENTKV_TARGET_AVX2), always_inline))
#define AGENTKV_ACT_AVX512 __attribute__((target(AGENTKV_TARGET_AVX512)))
#define AGENTKV_ACT_AVX512_INLINE static inline __attribute__((target(AGENTKV_TARGET_AVX512), always_inline))

// Bias that makes signed bytes unsigned for psadbw: sum(b) = sad(b ^ 0x80) - 128 * count.
constexpr int kByteBias = 128;

// ---------------------------------------------------------------------------------------------
// AVX2
// ---------------------------------------------------------------------------------------------

AGENTKV_ACT_AVX2_INLINE __m256 abs_avx2(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

AGENTKV_ACT_AVX2_INLINE float hmax_avx2(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Low bytes of 32 int32 lanes (a: elements 0-7 .. d: 24-31) in element order.
AGENTKV_ACT_AVX2_INLINE __m256i low_bytes_avx2(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i byte_mask = _mm256_set1_epi32(0xFF);
  // Masked to 0..255, so neither pack saturates.
  const __m256i ab = _mm256_packus_epi32(_mm256_and_si256(a, byte_mask), _mm256_and_si256(b, byte_mask));
  const __m256i cd = _mm256_packus_epi32(_mm256_and_si256(c, byte_mask), _mm256_and_si256(d, byte_mask));
  // Packs work per 128-bit lane: dwords come out as a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7.
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// psadbw of the bias-flipped bytes: 4 x int64, each the biased sum of 8 consecutive bytes.
AGENTKV_ACT_AVX2_INLINE __m256i biased_byte_sums_avx2(__m256i bytes) {
  return _mm256_sad_epu8(_mm256_xor_si256(bytes, _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_setzero_si256());
}

AGENTKV_ACT_AVX2_INLINE int sum_bytes_avx2(__m256i bytes) {
  const __m256i s = biased_byte_sums_avx2(bytes);
  __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
  return _mm_cvtsi128_si32(t) - 32 * kByteBias;
}

struct Q8BlockAvx2 {
  float d;
  __m256i qs;
};

// quantize_block_q8_x86 on 32 floats: d = amax / 127, q = nearbyint(x * (127 / amax)).
AGENTKV_ACT_AVX2_INLINE Q8BlockAvx2 q8_block_avx2(const float* x, int8_t* qs) {
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(abs_avx2(v0), abs_avx2(v1)), _mm256_max_ps(abs_avx2(v2), abs_avx2(v3)));
  const float amax = hmax_avx2(m);
  const float d = amax / 127.f;
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  const __m256 vid = _mm256_set1_ps(id);
  const __m256i q = low_bytes_avx2(
      _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid)), _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid)),
      _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid)), _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), q);
  return {d, q};
}

AGENTKV_ACT_AVX2_INLINE f16_bits fp16_of(float f) { return static_cast<f16_bits>(_cvtss_sh(f, 0)); }

AGENTKV_ACT_AVX2 void quantize_q8_0_avx2(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i, x += kQK8_0) y[i].d = fp16_of(q8_block_avx2(x, y[i].qs).d);
}

AGENTKV_ACT_AVX2 void quantize_q8_1_avx2(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i, x += kQK8_1) {
    const Q8BlockAvx2 b = q8_block_avx2(x, y[i].qs);
    y[i].d = fp16_of(b.d);
    y[i].s = fp16_of(b.d * static_cast<float>(sum_bytes_avx2(b.qs)));
  }
}

// q8_K's block maximum: the largest |x| and the first index holding it (the scalar loop keeps
// that element's sign). One branch-free pass: per lane of four interleaved chains, the running
// maximum and the index where it was first reached (strict >); then the smallest such index
// among the lanes whose maximum is the block's.
struct BlockMax {
  float amax;
  int first;
};

// A q8_K row goes in two passes over chunks of blocks (a few KB, still in L1): every block's
// scale, then the quants. Each block's quants wait on a long chain (maximum, first index, load,
// division); with the passes apart, the chains of neighbouring blocks overlap.
constexpr int kQ8KChunk = 8;

struct Q8KScale {
  bool zero_block;  // all |x| == 0: the reference writes zeros
  float iscale;     // -127 / max
};

inline Q8KScale q8_K_scale(BlockMax max, const float* x) {
  if (max.amax == 0.f) return {true, 0.f};
  return {false, -127.f / x[max.first]};
}

AGENTKV_ACT_AVX2_INLINE BlockMax q8_K_max_avx2(const float* x) {
  __m256 run[4];
  __m256i at[4];
  for (int c = 0; c < 4; ++c) {
    run[c] = _mm256_setzero_ps();
    at[c] = _mm256_setzero_si256();
  }
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 32
  for (int k = 0; k < kQK_K / 8; ++k) {
    const __m256 a = abs_avx2(_mm256_loadu_ps(x + 8 * k));
    const __m256 above = _mm256_cmp_ps(a, run[k % 4], _CMP_GT_OQ);
    run[k % 4] = _mm256_max_ps(run[k % 4], a);
    at[k % 4] = _mm256_blendv_epi8(at[k % 4], _mm256_add_epi32(iota, _mm256_set1_epi32(8 * k)),
                                   _mm256_castps_si256(above));
  }
  const float amax = hmax_avx2(_mm256_max_ps(_mm256_max_ps(run[0], run[1]), _mm256_max_ps(run[2], run[3])));
  const __m256 vamax = _mm256_set1_ps(amax);
  __m256i first = _mm256_set1_epi32(kQK_K);
  for (int c = 0; c < 4; ++c) {
    const __m256i holds_max = _mm256_castps_si256(_mm256_cmp_ps(run[c], vamax, _CMP_EQ_OQ));
    first = _mm256_min_epi32(first, _mm256_blendv_epi8(_mm256_set1_epi32(kQK_K), at[c], holds_max));
  }
  __m128i m = _mm_min_epi32(_mm256_castsi256_si128(first), _mm256_extracti128_si256(first, 1));
  m = _mm_min_epi32(m, _mm_unpackhi_epi64(m, m));
  m = _mm_min_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return {amax, _mm_cvtsi128_si32(m)};
}

// One q8_K block with iscale = -127 / max.
AGENTKV_ACT_AVX2_INLINE void q8_K_block_avx2(const float* x, float iscale, BlockQ8_K* y) {
  const __m256 vscale = _mm256_set1_ps(iscale);
  const __m256i q_max = _mm256_set1_epi32(127);
  for (int g = 0; g < kQK_K / 32; ++g) {
    const float* xg = x + 32 * g;
    const __m256i q = low_bytes_avx2(
        _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(xg))), q_max),
        _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(xg + 8))), q_max),
        _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(xg + 16))), q_max),
        _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(xg + 24))), q_max));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y->qs + 32 * g), q);
    // Biased sums of bytes 0-7, 8-15, 16-23, 24-31; add neighbours for the two 16-element sums.
    const __m256i s = biased_byte_sums_avx2(q);
    const __m256i pairs = _mm256_add_epi64(s, _mm256_srli_si256(s, 8));
    y->bsums[2 * g] = static_cast<int16_t>(_mm256_extract_epi16(pairs, 0) - 16 * kByteBias);
    y->bsums[2 * g + 1] = static_cast<int16_t>(_mm256_extract_epi16(pairs, 8) - 16 * kByteBias);
  }
  y->d = 1 / iscale;
}

AGENTKV_ACT_AVX2 void quantize_q8_K_avx2(const float* x, BlockQ8_K* y, int64_t n) {
  const int64_t blocks = n / kQK_K;
  for (int64_t i0 = 0; i0 < blocks; i0 += kQ8KChunk) {
    const int count = static_cast<int>(std::min<int64_t>(kQ8KChunk, blocks - i0));
    Q8KScale scale[kQ8KChunk];
    for (int b = 0; b < count; ++b) scale[b] = q8_K_scale(q8_K_max_avx2(x + (i0 + b) * kQK_K), x + (i0 + b) * kQK_K);
    for (int b = 0; b < count; ++b) {
      if (scale[b].zero_block) {
        std::memset(&y[i0 + b], 0, sizeof(BlockQ8_K));
      } else {
        q8_K_block_avx2(x + (i0 + b) * kQK_K, scale[b].iscale, &y[i0 + b]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AVX-512
// ---------------------------------------------------------------------------------------------

AGENTKV_ACT_AVX512_INLINE __m512 abs_avx512(__m512 v) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)));
}

AGENTKV_ACT_AVX512_INLINE __m512i bias_flip_avx512(__m512i bytes) {
  return _mm512_xor_si512(bytes, _mm512_set1_epi8(static_cast<char>(0x80)));
}

struct Q8BlockAvx512 {
  float d;
  __m256i qs;
};

AGENTKV_ACT_AVX512_INLINE Q8BlockAvx512 q8_block_avx512(const float* x, int8_t* qs) {
  const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs_avx512(lo), abs_avx512(hi)));
  const float d = amax / 127.f;
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  const __m512 vid = _mm512_set1_ps(id);
  const __m128i q_lo = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(lo, vid)));
  const __m128i q_hi = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(hi, vid)));
  const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q_lo), q_hi, 1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), q);
  return {d, q};
}

// Four blocks at once. Their maxima are reduced together (each shuffle + max step halves the
// partial maxima of all four), so no block pays for a whole horizontal reduction, and d and
// 1 / d come from one 4-lane division each (the same IEEE divisions as the scalar code's).
// Returns the four d; qs receives each block's quant bytes.
template <typename Block>
AGENTKV_ACT_AVX512_INLINE __m128 q8_four_blocks_avx512(const float* x, Block* y, __m256i* qs) {
  __m512 v[8], m[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = _mm512_loadu_ps(x + 32 * k);
    v[2 * k + 1] = _mm512_loadu_ps(x + 32 * k + 16);
    m[k] = _mm512_max_ps(abs_avx512(v[2 * k]), abs_avx512(v[2 * k + 1]));
  }
  // 128-bit lanes: a = [0 0 1 1], b = [2 2 3 3] (digits name blocks), then c = [0 1 2 3].
  const __m512 a = _mm512_max_ps(_mm512_shuffle_f32x4(m[0], m[1], 0x44), _mm512_shuffle_f32x4(m[0], m[1], 0xEE));
  const __m512 b = _mm512_max_ps(_mm512_shuffle_f32x4(m[2], m[3], 0x44), _mm512_shuffle_f32x4(m[2], m[3], 0xEE));
  __m512 c = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  c = _mm512_max_ps(c, _mm512_permute_ps(c, 0x4E));
  c = _mm512_max_ps(c, _mm512_permute_ps(c, 0xB1));  // lanes 4k..4k+3: block k
  const __m512i lane_firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128 amax = _mm512_castps512_ps128(_mm512_permutexvar_ps(lane_firsts, c));
  const __m128 scale_127 = _mm_set1_ps(127.f);
  const __m128 d = _mm_div_ps(amax, scale_127);
  const __m512 id = _mm512_castps128_ps512(
      _mm_maskz_div_ps(_mm_cmp_ps_mask(amax, _mm_setzero_ps(), _CMP_NEQ_OQ), scale_127, amax));
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512 id_k = _mm512_permutexvar_ps(_mm512_set1_epi32(k), id);
    const __m128i q_lo = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v[2 * k], id_k)));
    const __m128i q_hi = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v[2 * k + 1], id_k)));
    qs[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(q_lo), q_hi, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[k].qs), qs[k]);
  }
  return d;
}

// The sums of four blocks' quant bytes, in block order.
AGENTKV_ACT_AVX512_INLINE __m128i sum_bytes_x4_avx512(const __m256i* qs) {
  const __m512i zero = _mm512_setzero_si512();
  // int64 biased sums of 8 bytes: s01 = block 0 in qwords 0-3, block 1 in 4-7; s23 likewise.
  const __m512i s01 = _mm512_sad_epu8(bias_flip_avx512(_mm512_inserti64x4(_mm512_castsi256_si512(qs[0]), qs[1], 1)), zero);
  const __m512i s23 = _mm512_sad_epu8(bias_flip_avx512(_mm512_inserti64x4(_mm512_castsi256_si512(qs[2]), qs[3], 1)), zero);
  // Each 128-bit lane: [its s01 sum, its s23 sum]; then lanes 0 + 1 = [b0, b2], lanes 2 + 3 = [b1, b3].
  const __m512i lanes = _mm512_add_epi64(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
  const __m512i halves = _mm512_add_epi64(lanes, _mm512_shuffle_i64x2(lanes, lanes, 0xB1));
  const __m512i block_order = _mm512_setr_epi32(0, 8, 2, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm_sub_epi32(_mm512_castsi512_si128(_mm512_permutexvar_epi32(block_order, halves)),
                       _mm_set1_epi32(32 * kByteBias));
}

// Four fp16 values, rounded to nearest even.
AGENTKV_ACT_AVX512_INLINE void store_fp16x4(__m128 v, f16_bits* out) {
  alignas(16) f16_bits halves[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(halves), _mm_cvtps_ph(v, 0));
  std::memcpy(out, halves, 4 * sizeof(f16_bits));
}

AGENTKV_ACT_AVX512 void quantize_q8_0_avx512(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t blocks = n / kQK8_0;
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    __m256i qs[4];
    f16_bits d[4];
    store_fp16x4(q8_four_blocks_avx512(x + b * kQK8_0, y + b, qs), d);
    for (int k = 0; k < 4; ++k) y[b + k].d = d[k];
  }
  for (; b < blocks; ++b) y[b].d = fp16_of(q8_block_avx512(x + b * kQK8_0, y[b].qs).d);
}

AGENTKV_ACT_AVX512 void quantize_q8_1_avx512(const float* x, BlockQ8_1* y, int64_t n) {
  const int64_t blocks = n / kQK8_1;
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    __m256i qs[4];
    const __m128 d = q8_four_blocks_avx512(x + b * kQK8_1, y + b, qs);
    const __m128i sums = sum_bytes_x4_avx512(qs);
    f16_bits d16[4], s16[4];
    store_fp16x4(d, d16);
    store_fp16x4(_mm_mul_ps(d, _mm_cvtepi32_ps(sums)), s16);
    for (int k = 0; k < 4; ++k) {
      y[b + k].d = d16[k];
      y[b + k].s = s16[k];
    }
  }
  for (; b < blocks; ++b) {
    const Q8BlockAvx512 q = q8_block_avx512(x + b * kQK8_1, y[b].qs);
    y[b].d = fp16_of(q.d);
    y[b].s = fp16_of(q.d * static_cast<float>(sum_bytes_avx2(q.qs)));
  }
}

// Quants of 16 floats: min(127, round(scale * x)), as bytes.
AGENTKV_ACT_AVX512_INLINE __m128i q8_K_quads_avx512(__m512 scale, const float* x) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(scale, _mm512_loadu_ps(x)));
  return _mm512_cvtepi32_epi8(_mm512_min_epi32(q, _mm512_set1_epi32(127)));
}

// q8_K_max_avx2 in 16 lanes.
AGENTKV_ACT_AVX512_INLINE BlockMax q8_K_max_avx512(const float* x) {
  __m512 run[4];
  __m512i at[4];
  for (int c = 0; c < 4; ++c) {
    run[c] = _mm512_setzero_ps();
    at[c] = _mm512_setzero_si512();
  }
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 16
  for (int k = 0; k < kQK_K / 16; ++k) {
    const __m512 a = abs_avx512(_mm512_loadu_ps(x + 16 * k));
    const __mmask16 above = _mm512_cmp_ps_mask(a, run[k % 4], _CMP_GT_OQ);
    run[k % 4] = _mm512_max_ps(run[k % 4], a);
    at[k % 4] = _mm512_mask_mov_epi32(at[k % 4], above, _mm512_add_epi32(iota, _mm512_set1_epi32(16 * k)));
  }
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(run[0], run[1]), _mm512_max_ps(run[2], run[3])));
  const __m512 vamax = _mm512_set1_ps(amax);
  __m512i first = _mm512_set1_epi32(kQK_K);
  for (int c = 0; c < 4; ++c) {
    first = _mm512_mask_min_epi32(first, _mm512_cmp_ps_mask(run[c], vamax, _CMP_EQ_OQ), first, at[c]);
  }
  return {amax, _mm512_reduce_min_epi32(first)};
}

// One q8_K block with iscale = -127 / max.
AGENTKV_ACT_AVX512_INLINE void q8_K_block_avx512(const float* x, float iscale, BlockQ8_K* y) {
  const __m512 vscale = _mm512_set1_ps(iscale);
  __m512i biased_sums[4];  // per 64 quants: 8 x int64, biased sums of 8 consecutive bytes
  for (int g = 0; g < 4; ++g) {
    const float* xg = x + 64 * g;
    __m512i q = _mm512_castsi128_si512(q8_K_quads_avx512(vscale, xg));
    q = _mm512_inserti32x4(q, q8_K_quads_avx512(vscale, xg + 16), 1);
    q = _mm512_inserti32x4(q, q8_K_quads_avx512(vscale, xg + 32), 2);
    q = _mm512_inserti32x4(q, q8_K_quads_avx512(vscale, xg + 48), 3);
    _mm512_storeu_si512(y->qs + 64 * g, q);
    biased_sums[g] = _mm512_sad_epu8(bias_flip_avx512(q), _mm512_setzero_si512());
  }
  // 16-element sums: add each even/odd pair of 8-byte sums, two registers at a time.
  const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m512i odd = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
  for (int h = 0; h < 2; ++h) {
    const __m512i a = biased_sums[2 * h], b = biased_sums[2 * h + 1];
    const __m512i sums =
        _mm512_add_epi64(_mm512_permutex2var_epi64(a, even, b), _mm512_permutex2var_epi64(a, odd, b));
    const __m128i sums16 = _mm_sub_epi16(_mm512_cvtepi64_epi16(sums), _mm_set1_epi16(16 * kByteBias));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y->bsums + 8 * h), sums16);
  }
  y->d = 1 / iscale;
}

AGENTKV_ACT_AVX512 void quantize_q8_K_avx512(const float* x, BlockQ8_K* y, int64_t n) {
  const int64_t blocks = n / kQK_K;
  for (int64_t i0 = 0; i0 < blocks; i0 += kQ8KChunk) {
    const int count = static_cast<int>(std::min<int64_t>(kQ8KChunk, blocks - i0));
    Q8KScale scale[kQ8KChunk];
    for (int b = 0; b < count; ++b) scale[b] = q8_K_scale(q8_K_max_avx512(x + (i0 + b) * kQK_K), x + (i0 + b) * kQK_K);
    for (int b = 0; b < count; ++b) {
      if (scale[b].zero_block) {
        std::memset(&y[i0 + b], 0, sizeof(BlockQ8_K));
      } else {
        q8_K_block_avx512(x + (i0 + b) * kQK_K, scale[b].iscale, &y[i0 + b]);
      }
    }
  }
}

}  // namespace
#endif  // AGENTKV_HAVE_X86_SIMD

ActivationQuantizers simd_activation_quantizers(CpuLevel level) {
#ifdef AGENTKV_HAVE_X86_SIMD
  switch (level) {
    case CpuLevel::Avx512:
      return {quantize_q8_0_avx512, quantize_q8_1_avx512, quantize_q8_K_avx512};
    case CpuLevel::Avx2:
      return {quantize_q8_0_avx2, quantize_q8_1_avx2, quantize_q8_K_avx2};
    case CpuLevel::Scalar: break;
  }
#else
  (void)level;
#endif
  return {};
}

}  // namespace agentkv::quant_detail
