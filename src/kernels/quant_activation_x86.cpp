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
//  - the fp16 scales are converted outside the SIMD kernels, in code built for baseline x86-64
//    like the reference: under the kernels' FMA target GCC would fuse the multiply and add inside
//    fp32_to_fp16 (harmless for today's power-of-two factors, but nothing to rely on).

// GCC 12 reports the deliberately undefined upper half in _mm512_castsi128_si512 and the
// _mm512_reduce_* helpers as uninitialized: a false positive inside its own intrinsic headers,
// reported at their location, so the pragmas come before the includes.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/quant_activation.h"

#include <algorithm>
#include <cstring>

#include "core/fp16.h"
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

// q8_0 / q8_1 kernels: the quants of `blocks` blocks, their float scales d and (q8_1) quant sums.
AGENTKV_ACT_AVX2 void q8_0_blocks_avx2(const float* x, BlockQ8_0* y, int blocks, float* d) {
  for (int b = 0; b < blocks; ++b) d[b] = q8_block_avx2(x + b * kQK8_0, y[b].qs).d;
}

AGENTKV_ACT_AVX2 void q8_1_blocks_avx2(const float* x, BlockQ8_1* y, int blocks, float* d, int* sum) {
  for (int b = 0; b < blocks; ++b) {
    const Q8BlockAvx2 q = q8_block_avx2(x + b * kQK8_1, y[b].qs);
    d[b] = q.d;
    sum[b] = sum_bytes_avx2(q.qs);
  }
}

AGENTKV_ACT_AVX2 void quantize_q8_K_avx2(const float* x, BlockQ8_K* y, int64_t n) {
  constexpr int kVectors = kQK_K / 8;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    for (int k = 0; k < kVectors; k += 4) {
      m0 = _mm256_max_ps(m0, abs_avx2(_mm256_loadu_ps(x + 8 * k)));
      m1 = _mm256_max_ps(m1, abs_avx2(_mm256_loadu_ps(x + 8 * k + 8)));
      m2 = _mm256_max_ps(m2, abs_avx2(_mm256_loadu_ps(x + 8 * k + 16)));
      m3 = _mm256_max_ps(m3, abs_avx2(_mm256_loadu_ps(x + 8 * k + 24)));
    }
    const float amax = hmax_avx2(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    if (amax == 0.f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The scalar loop keeps the signed value of the first element whose magnitude reaches amax.
    const __m256 vamax = _mm256_set1_ps(amax);
    int first = 0;
    for (int k = 0; k < kVectors; ++k) {
      const int hits = _mm256_movemask_ps(_mm256_cmp_ps(abs_avx2(_mm256_loadu_ps(x + 8 * k)), vamax, _CMP_EQ_OQ));
      if (hits != 0) {
        first = 8 * k + __builtin_ctz(static_cast<unsigned>(hits));
        break;
      }
    }
    const float iscale = -127.f / x[first];
    const __m256 vscale = _mm256_set1_ps(iscale);
    const __m256i q_max = _mm256_set1_epi32(127);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const float* xg = x + 32 * g;
      const __m256i q = low_bytes_avx2(
          _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(xg))), q_max),
          _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(xg + 8))), q_max),
          _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(xg + 16))), q_max),
          _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vscale, _mm256_loadu_ps(xg + 24))), q_max));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 32 * g), q);
      // Biased sums of bytes 0-7, 8-15, 16-23, 24-31; add neighbours for the two 16-element sums.
      const __m256i s = biased_byte_sums_avx2(q);
      const __m256i pairs = _mm256_add_epi64(s, _mm256_srli_si256(s, 8));
      y[i].bsums[2 * g] = static_cast<int16_t>(_mm256_extract_epi16(pairs, 0) - 16 * kByteBias);
      y[i].bsums[2 * g + 1] = static_cast<int16_t>(_mm256_extract_epi16(pairs, 8) - 16 * kByteBias);
    }
    y[i].d = 1 / iscale;
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

AGENTKV_ACT_AVX512 void q8_0_blocks_avx512(const float* x, BlockQ8_0* y, int blocks, float* d) {
  for (int b = 0; b < blocks; ++b) d[b] = q8_block_avx512(x + b * kQK8_0, y[b].qs).d;
}

AGENTKV_ACT_AVX512 void q8_1_blocks_avx512(const float* x, BlockQ8_1* y, int blocks, float* d, int* sum) {
  for (int b = 0; b < blocks; ++b) {
    const Q8BlockAvx512 q = q8_block_avx512(x + b * kQK8_1, y[b].qs);
    d[b] = q.d;
    sum[b] = sum_bytes_avx2(q.qs);
  }
}

// Quants of 16 floats: min(127, round(scale * x)), as bytes.
AGENTKV_ACT_AVX512_INLINE __m128i q8_K_quads_avx512(__m512 scale, const float* x) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(scale, _mm512_loadu_ps(x)));
  return _mm512_cvtepi32_epi8(_mm512_min_epi32(q, _mm512_set1_epi32(127)));
}

AGENTKV_ACT_AVX512 void quantize_q8_K_avx512(const float* x, BlockQ8_K* y, int64_t n) {
  constexpr int kVectors = kQK_K / 16;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    __m512 m0 = _mm512_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    for (int k = 0; k < kVectors; k += 4) {
      m0 = _mm512_max_ps(m0, abs_avx512(_mm512_loadu_ps(x + 16 * k)));
      m1 = _mm512_max_ps(m1, abs_avx512(_mm512_loadu_ps(x + 16 * k + 16)));
      m2 = _mm512_max_ps(m2, abs_avx512(_mm512_loadu_ps(x + 16 * k + 32)));
      m3 = _mm512_max_ps(m3, abs_avx512(_mm512_loadu_ps(x + 16 * k + 48)));
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
    if (amax == 0.f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The scalar loop keeps the signed value of the first element whose magnitude reaches amax.
    const __m512 vamax = _mm512_set1_ps(amax);
    int first = 0;
    for (int k = 0; k < kVectors; ++k) {
      const __mmask16 hits = _mm512_cmp_ps_mask(abs_avx512(_mm512_loadu_ps(x + 16 * k)), vamax, _CMP_EQ_OQ);
      if (hits != 0) {
        first = 16 * k + __builtin_ctz(static_cast<unsigned>(hits));
        break;
      }
    }
    const float iscale = -127.f / x[first];
    const __m512 vscale = _mm512_set1_ps(iscale);
    __m512i biased_sums[4];  // per 64 quants: 8 x int64, biased sums of 8 consecutive bytes
    for (int g = 0; g < 4; ++g) {
      const float* xg = x + 64 * g;
      __m512i q = _mm512_castsi128_si512(q8_K_quads_avx512(vscale, xg));
      q = _mm512_inserti32x4(q, q8_K_quads_avx512(vscale, xg + 16), 1);
      q = _mm512_inserti32x4(q, q8_K_quads_avx512(vscale, xg + 32), 2);
      q = _mm512_inserti32x4(q, q8_K_quads_avx512(vscale, xg + 48), 3);
      _mm512_storeu_si512(y[i].qs + 64 * g, q);
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
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].bsums + 8 * h), sums16);
    }
    y[i].d = 1 / iscale;
  }
}

// ---------------------------------------------------------------------------------------------
// Row drivers (baseline x86-64: no FMA, so fp32_to_fp16 rounds as in the scalar reference)
// ---------------------------------------------------------------------------------------------

constexpr int kChunkBlocks = 16;  // blocks per kernel call

template <void (*kernel)(const float*, BlockQ8_0*, int, float*)>
void quantize_q8_0_rows(const float* x, BlockQ8_0* y, int64_t n) {
  float d[kChunkBlocks];
  const int64_t blocks = n / kQK8_0;
  for (int64_t i = 0; i < blocks; i += kChunkBlocks) {
    const int count = static_cast<int>(std::min<int64_t>(kChunkBlocks, blocks - i));
    kernel(x + i * kQK8_0, y + i, count, d);
    for (int b = 0; b < count; ++b) y[i + b].d = fp32_to_fp16(d[b]);
  }
}

template <void (*kernel)(const float*, BlockQ8_1*, int, float*, int*)>
void quantize_q8_1_rows(const float* x, BlockQ8_1* y, int64_t n) {
  float d[kChunkBlocks];
  int sum[kChunkBlocks];
  const int64_t blocks = n / kQK8_1;
  for (int64_t i = 0; i < blocks; i += kChunkBlocks) {
    const int count = static_cast<int>(std::min<int64_t>(kChunkBlocks, blocks - i));
    kernel(x + i * kQK8_1, y + i, count, d, sum);
    for (int b = 0; b < count; ++b) {
      y[i + b].d = fp32_to_fp16(d[b]);
      y[i + b].s = fp32_to_fp16(d[b] * static_cast<float>(sum[b]));
    }
  }
}

}  // namespace
#endif  // AGENTKV_HAVE_X86_SIMD

ActivationQuantizers simd_activation_quantizers(CpuLevel level) {
#ifdef AGENTKV_HAVE_X86_SIMD
  switch (level) {
    case CpuLevel::Avx512:
      return {quantize_q8_0_rows<q8_0_blocks_avx512>, quantize_q8_1_rows<q8_1_blocks_avx512>, quantize_q8_K_avx512};
    case CpuLevel::Avx2:
      return {quantize_q8_0_rows<q8_0_blocks_avx2>, quantize_q8_1_rows<q8_1_blocks_avx2>, quantize_q8_K_avx2};
    case CpuLevel::Scalar: break;
  }
#else
  (void)level;
#endif
  return {};
}

}  // namespace agentkv::quant_detail
