// Internal to the SIMD kernel files: target attributes and the small AVX2 helpers both the AVX2
// and the AVX-512 kernels use. Every function here carries an explicit target attribute (the
// library is built for baseline x86-64), and only the dispatch tables call into these files, after
// checking the CPU. Include it only from the SIMD kernel files (quant_dot_*, gemm_*, gemv.cpp).
#pragma once
#if defined(__x86_64__) || defined(__i386__)
#define AGENTKV_HAVE_X86_SIMD 1
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define AGENTKV_TARGET_AVX2 "avx2,fma,f16c,bmi2"
#define AGENTKV_TARGET_AVX512 AGENTKV_TARGET_AVX2 ",avx512f,avx512bw,avx512vl,avx512dq"
#define AGENTKV_AVX2 __attribute__((target(AGENTKV_TARGET_AVX2)))
#define AGENTKV_AVX2_INLINE static inline __attribute__((target(AGENTKV_TARGET_AVX2), always_inline))
#define AGENTKV_AVX512_VNNI __attribute__((target(AGENTKV_TARGET_AVX512 ",avx512vnni")))
#define AGENTKV_AVX512_VBMI __attribute__((target(AGENTKV_TARGET_AVX512 ",avx512vbmi")))

namespace agentkv::quant_detail::x86 {

AGENTKV_AVX2_INLINE float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// GGML_F32x8_REDUCE of ggml_vec_dot_f32 / _f16's four 8-lane accumulators (GGML_F32_STEP 32) on
// an AVX2 build: (acc0 + acc2) + (acc1 + acc3), the two 128-bit halves added, then
// hadd(hadd(t, t), t): (t0 + t1) + (t2 + t3).
AGENTKV_AVX2_INLINE float reduce_ggml_f32x8(const __m256 acc[4]) {
  const __m256 v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

AGENTKV_AVX2_INLINE int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

AGENTKV_AVX2_INLINE float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// 32 packed nibbles (16 bytes) -> 32 bytes: low nibbles first, then high nibbles.
AGENTKV_AVX2_INLINE __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), _mm_srli_epi16(bytes, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, byte k = 0xFF if bit k is set, else 0.
AGENTKV_AVX2_INLINE __m256i expand_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit_of_byte = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_of_byte), bit_of_byte);
}

// Pairwise-summed products of unsigned bytes u and signed bytes s: 8 x int32 (AVX2: through int16,
// which cannot overflow for |u| <= 128, |s| <= 127 as pairs stay below 2^15).
AGENTKV_AVX2_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Signed x signed bytes: move the sign of a onto b so the unsigned-by-signed instruction applies.
AGENTKV_AVX2_INLINE __m256i dot_s8s8(__m256i a, __m256i b) {
  return dot_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// q6_K weights unpacked to 0..63 (the -32 offset is applied through the q8_K group sums):
// 4 vectors of 32 per 128-element half.
AGENTKV_AVX2_INLINE void q6k_unpack_half(const uint8_t* ql, const uint8_t* qh, __m256i out[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
  const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(h, three), 4);
  const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), three), 4);
  const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), three), 4);
  const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), three), 4);
  out[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), h0);
  out[1] = _mm256_or_si256(_mm256_and_si256(l1, low4), h1);
  out[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), h2);
  out[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), h3);
}

}  // namespace agentkv::quant_detail::x86
#endif
