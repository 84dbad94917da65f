// AVX2 + FMA + F16C dot products. Integer types: per block, exact int32 dot products of the
// unpacked quants (maddubs/madd), scaled into a float accumulator with FMA, so results equal the
// scalar kernels up to float summation order. q2_K and q3_K stay scalar for now.
#include <cmath>

#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"

namespace agentkv::quant_detail {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace x86;

// ggml_vec_dot_f32 / _f16 on an AVX2 build: whole 32-element steps go to four fused chains reduced
// by reduce_ggml_f32x8 (quant_simd_x86.h). The elements after the last whole step are added one
// product at a time (f32: each product rounded, then added in float — the AVX2 reference build was
// compiled with GCC's Zen tuning, which does not fuse such loop-carried chains; f16: products in
// float, the sum in double).
AGENTKV_AVX2 float dot_f32(int64_t n, const void* w, const void* a) {
  const float* x = static_cast<const float*>(w);
  const float* y = static_cast<const float*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32) {
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
  }
  float sum = reduce_ggml_f32x8(acc);
  for (int64_t i = np; i < n; ++i) {
    float p = x[i] * y[i];
    __asm__("" : "+x"(p));  // keep the product rounded: no contraction into the addition
    sum += p;
  }
  return sum;
}

AGENTKV_AVX2_INLINE __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

AGENTKV_AVX2 float dot_f16(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const uint16_t* y = static_cast<const uint16_t*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32) {
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(load_f16x8(x + i + 8 * k), load_f16x8(y + i + 8 * k), acc[k]);
  }
  double sum = reduce_ggml_f32x8(acc);
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(half_to_float(x[i]) * half_to_float(y[i]));
  return static_cast<float>(sum);
}

AGENTKV_AVX2_INLINE __m256 load_bf16x8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// ggml_vec_dot_bf16 on AVX2: four 8-lane accumulators over 32-element steps (products of bf16
// values are exact in float, so mul + add and a fused step agree), (c1 + c3) + (c2 + c4), reduced
// like hsum_ps, then the sum and the tail in double.
AGENTKV_AVX2 float dot_bf16(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const uint16_t* y = static_cast<const uint16_t*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(load_bf16x8(x + i + 8 * k), load_bf16x8(y + i + 8 * k), acc[k]);
  }
  double sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3])));
  for (; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
  return static_cast<float>(sum);
}

AGENTKV_AVX2_INLINE __m256i load_q8(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// llama.cpp's float order (see the scalar kernel): per block one FMA into 8 lanes, then hsum_ps.
AGENTKV_AVX2 float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK8_0; ++ib) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
    const __m256i p = dot_s8s8(load_q8(x[ib].qs), load_q8(y[ib].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc);
}

AGENTKV_AVX2 float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK4_0; ++ib) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[ib].qs), _mm256_set1_epi8(8));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(q, load_q8(y[ib].qs))), acc);
  }
  return hsum_ps(acc);
}

AGENTKV_AVX2 float dot_q4_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t ib = 0; ib < n / kQK4_1; ++ib) {
    mins += half_to_float(x[ib].m) * half_to_float(y[ib].s);
    const __m256 d = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
    const __m256i p = dot_u8s8(unpack_nibbles(x[ib].qs), load_q8(y[ib].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc) + mins;
}

AGENTKV_AVX2 float dot_q5_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK5_0; ++ib) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
    const __m256i high = _mm256_and_si256(expand_bits(x[ib].qh), _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles(x[ib].qs), high), _mm256_set1_epi8(16));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(q, load_q8(y[ib].qs))), acc);
  }
  return hsum_ps(acc);
}

AGENTKV_AVX2 float dot_q5_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t ib = 0; ib < n / kQK5_1; ++ib) {
    mins += half_to_float(x[ib].m) * half_to_float(y[ib].s);
    const __m256 d = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
    const __m256i high = _mm256_and_si256(expand_bits(x[ib].qh), _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_or_si256(unpack_nibbles(x[ib].qs), high);
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(q, load_q8(y[ib].qs))), acc);
  }
  return hsum_ps(acc) + mins;
}

AGENTKV_AVX2 float dot_iq4_nl(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK4_NL; ++ib) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
    const __m256i q = _mm256_shuffle_epi8(levels, unpack_nibbles(x[ib].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_s8s8(q, load_q8(y[ib].qs))), acc);
  }
  return hsum_ps(acc);
}

// ggml_vec_dot_mxfp4_q8_0's AVX2 kernel (which its AVX-512 builds run too): blocks in pairs, the
// even block's 8 int32 lane sums (lane l: elements 4l..4l+3) scaled into one 8-lane accumulator by
// a fused multiply-add with fp16(a.d) * half_scale(w.e), the odd block's into a second; the two
// added lane by lane and reduced (hsum_float_8); an odd last block added on its own.
AGENTKV_AVX2_INLINE __m256i mxfp4_values(const BlockMXFP4& b, __m256i table) {
  return _mm256_shuffle_epi8(table, unpack_nibbles(b.qs));
}

AGENTKV_AVX2 float dot_mxfp4(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / kQK_MXFP4;
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMXFP4Values)));
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t ib = 0;
  for (; ib + 1 < nb; ib += 2) {
    for (int h = 0; h < 2; ++h) {
      const __m256 d = _mm256_set1_ps(half_to_float(y[ib + h].d) * mxfp4_half_scale(x[ib + h].e));
      const __m256i p = dot_s8s8(mxfp4_values(x[ib + h], table), load_q8(y[ib + h].qs));
      acc[h] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[h]);
    }
  }
  float sum = hsum_ps(_mm256_add_ps(acc[0], acc[1]));
  if (ib < nb) sum = mxfp4_add_block(sum, x[ib], y[ib]);
  return sum;
}

// tq4 / tq3 (quant_tq.cpp): the 64 indices of a block unpacked into two vectors of 32 bytes,
// levels by table lookup (pshufb); the dot is an exact int32 sum per 32 elements against one q8_0
// block, scaled by d_tq * d_q8 into the float accumulator.
// The pshufb tables: 16 bytes each (tq3's 8 levels padded), constant so that loading them costs
// no store-forwarding stall (a row of one or two blocks is a call).
alignas(16) constexpr int8_t kTQ3Levels16[16] = {kTQ3Levels[0], kTQ3Levels[1], kTQ3Levels[2], kTQ3Levels[3],
                                                 kTQ3Levels[4], kTQ3Levels[5], kTQ3Levels[6], kTQ3Levels[7]};
AGENTKV_AVX2_INLINE __m256i tq_levels(const int8_t* table16) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table16)));
}

// Levels of elements 0..31 (lv[0]) and 32..63 (lv[1]) of a block.
AGENTKV_AVX2_INLINE void tq4_block_levels(const BlockTQ4& b, __m256i table, __m256i lv[2]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  lv[0] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
  lv[1] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
}

AGENTKV_AVX2_INLINE void tq3_block_levels(const BlockTQ3& b, __m256i table, __m256i lv[2]) {
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  // Both 128-bit lanes hold qs; elements 32h + 16k + i are at bits 4h + 2k of qs[i].
  const __m256i qs = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
  const __m256i low0 = _mm256_and_si256(_mm256_srlv_epi64(qs, _mm256_setr_epi64x(0, 0, 2, 2)), three);
  const __m256i low1 = _mm256_and_si256(_mm256_srlv_epi64(qs, _mm256_setr_epi64x(4, 4, 6, 6)), three);
  lv[0] = _mm256_shuffle_epi8(table, _mm256_or_si256(low0, _mm256_and_si256(expand_bits(b.qh), four)));
  lv[1] = _mm256_shuffle_epi8(table, _mm256_or_si256(low1, _mm256_and_si256(expand_bits(b.qh + 4), four)));
}

template <class Block, void (*Levels)(const Block&, __m256i, __m256i*)>
AGENTKV_AVX2_INLINE float tq_dot(int64_t n, const void* w, const void* a, const int8_t* table16) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i table = tq_levels(table16);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQKTQ; ++ib) {
    const float d = half_to_float(x[ib].d);
    __m256i lv[2];
    Levels(x[ib], table, lv);
    for (int h = 0; h < 2; ++h) {
      const __m256i p = dot_s8s8(lv[h], load_q8(y[2 * ib + h].qs));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * half_to_float(y[2 * ib + h].d)), _mm256_cvtepi32_ps(p), acc);
    }
  }
  return hsum_ps(acc);
}

// d * level, one rounding per element as the scalar dequantizer: the same bits.
template <class Block, void (*Levels)(const Block&, __m256i, __m256i*)>
AGENTKV_AVX2_INLINE void tq_dequantize(const void* src, float* y, int64_t n, const int8_t* table16) {
  const auto* x = static_cast<const Block*>(src);
  const __m256i table = tq_levels(table16);
  for (int64_t ib = 0; ib < n / kQKTQ; ++ib, y += kQKTQ) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[ib].d));
    __m256i lv[2];
    Levels(x[ib], table, lv);
    for (int h = 0; h < 2; ++h) {
      const __m128i halves[2] = {_mm256_castsi256_si128(lv[h]), _mm256_extracti128_si256(lv[h], 1)};
      for (int k = 0; k < 4; ++k) {
        const __m128i bytes = k % 2 ? _mm_srli_si128(halves[k / 2], 8) : halves[k / 2];
        const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
        _mm256_storeu_ps(y + 32 * h + 8 * k, _mm256_mul_ps(d, f));
      }
    }
  }
}

AGENTKV_AVX2 float dot_tq4(int64_t n, const void* w, const void* a) {
  return tq_dot<BlockTQ4, tq4_block_levels>(n, w, a, kTQ4Levels);
}
AGENTKV_AVX2 float dot_tq3(int64_t n, const void* w, const void* a) {
  return tq_dot<BlockTQ3, tq3_block_levels>(n, w, a, kTQ3Levels16);
}
AGENTKV_AVX2 void dequantize_tq4_avx2(const void* x, float* y, int64_t n) {
  tq_dequantize<BlockTQ4, tq4_block_levels>(x, y, n, kTQ4Levels);
}
AGENTKV_AVX2 void dequantize_tq3_avx2(const void* x, float* y, int64_t n) {
  tq_dequantize<BlockTQ3, tq3_block_levels>(x, y, n, kTQ3Levels16);
}

// Sum over the 8 sub-blocks of min_j * (sum of the 32 activation quants of sub-block j).
AGENTKV_AVX2_INLINE int k4_min_sum(const uint8_t* mins, const int16_t* bsums) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return s;
}

// int32 lanes of sum_j scale_j * dot(q_j, y_j) over 64 unsigned weights (two sub-blocks of 32).
AGENTKV_AVX2_INLINE __m256i k4_pair_dot(__m256i q_lo, __m256i q_hi, const int8_t* q8, int scale_lo, int scale_hi) {
  const __m256i p_lo = _mm256_maddubs_epi16(q_lo, load_q8(q8));
  const __m256i p_hi = _mm256_maddubs_epi16(q_hi, load_q8(q8 + 32));
  return _mm256_add_epi32(_mm256_madd_epi16(p_lo, _mm256_set1_epi16(static_cast<short>(scale_lo))),
                          _mm256_madd_epi16(p_hi, _mm256_set1_epi16(static_cast<short>(scale_hi))));
}

// One fused multiply-add in single precision (ggml's float accumulation steps).
AGENTKV_AVX2_INLINE float fma_ss(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// Sums of four int32 vectors, one per lane of the result: {sum(v0), sum(v1), sum(v2), sum(v3)}.
AGENTKV_AVX2_INLINE __m128i reduce4_epi32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Scaled integer dots of the four 64-weight pairs (sub-blocks 2j, 2j+1) of a q4_K superblock, as
// int32 lanes (before the final sum over lanes). Integer sums are exact, so only where they are
// converted and scaled matters (see quant_dot_scalar.cpp).
AGENTKV_AVX2_INLINE void q4k_pair_vectors(const BlockQ4_K& x, const BlockQ8_K& y, const uint8_t sc[8], __m256i pair[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
    const __m256i q_lo = _mm256_and_si256(bytes, low4);
    const __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
    pair[j] = k4_pair_dot(q_lo, q_hi, y.qs + 64 * j, sc[2 * j], sc[2 * j + 1]);
  }
}

AGENTKV_AVX2 float dot_q4_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0, acc_min = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k4_scale_min(j, x[i].scales, &sc[j], &mn[j]);
    __m256i pair[4];
    q4k_pair_vectors(x[i], y[i], sc, pair);
    const __m256i isum = _mm256_add_epi32(_mm256_add_epi32(pair[0], pair[1]), _mm256_add_epi32(pair[2], pair[3]));
    acc = fma_ss(static_cast<float>(hsum_epi32(isum)), half_to_float(x[i].d) * y[i].d, acc);
    acc_min = fma_ss(static_cast<float>(k4_min_sum(mn, y[i].bsums)), half_to_float(x[i].dmin) * y[i].d, acc_min);
  }
  return acc - acc_min;
}

// The GEMM order for four activation rows at once: their float chains are independent, so
// interleaving them hides the latency of the per-pair multiply-adds.
AGENTKV_AVX2 void dot4_q4_K_grouped(int64_t n, const void* w, const void* a, size_t a_stride, float* out) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* ys[kRowGroupSize];
  for (int r = 0; r < kRowGroupSize; ++r) ys[r] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(a) + r * a_stride);
  float acc[kRowGroupSize] = {0, 0, 0, 0}, acc_min[kRowGroupSize] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k4_scale_min(j, x[i].scales, &sc[j], &mn[j]);
    const float xd = half_to_float(x[i].d), xdmin = half_to_float(x[i].dmin);
    for (int r = 0; r < kRowGroupSize; ++r) {
      const BlockQ8_K& y = ys[r][i];
      __m256i pair[4];
      q4k_pair_vectors(x[i], y, sc, pair);
      alignas(16) int dots[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(dots), reduce4_epi32(pair[0], pair[1], pair[2], pair[3]));
      const float d = xd * y.d, dmin = xdmin * y.d;
      for (int j = 0; j < 4; ++j) {
        const int min = mn[2 * j] * (y.bsums[4 * j] + y.bsums[4 * j + 1]) + mn[2 * j + 1] * (y.bsums[4 * j + 2] + y.bsums[4 * j + 3]);
        acc[r] = fma_ss(static_cast<float>(dots[j]), d, acc[r]);
        acc_min[r] = fma_ss(static_cast<float>(min), dmin, acc_min[r]);
      }
    }
  }
  for (int r = 0; r < kRowGroupSize; ++r) out[r] = acc[r] - acc_min[r];
}

AGENTKV_AVX2 float dot_q5_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float mins_total = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k4_scale_min(j, x[i].scales, &sc[j], &mn[j]);
    mins_total += half_to_float(x[i].dmin) * y[i].d * static_cast<float>(k4_min_sum(mn, y[i].bsums));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh));
    __m256i isum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * j));
      // Bit 2j of qh[l] is bit 4 of element 64j + l, bit 2j+1 that of element 64j + 32 + l.
      const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
      const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
      const __m256i q_lo = _mm256_or_si256(_mm256_and_si256(bytes, low4), h_lo);
      const __m256i q_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), h_hi);
      isum = _mm256_add_epi32(isum, k4_pair_dot(q_lo, q_hi, y[i].qs + 64 * j, sc[2 * j], sc[2 * j + 1]));
    }
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * y[i].d);
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum_ps(acc) - mins_total;
}

// ggml's lanes (see quant_dot_scalar.cpp): int32 lane m of a 32-weight group holds its weights
// 4m..4m+3, the -32 offset subtracted per pair of products before the scale.
AGENTKV_AVX2 float dot_q6_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i offset = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const int8_t* sc = x[i].scales;
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6k_unpack_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
      for (int k = 0; k < 4; ++k) {
        // 32 weights = sub-blocks s and s+1 (16 each): the low 128 bits get scale s.
        const int s = 8 * h + 2 * k;
        const __m256i scale = _mm256_setr_m128i(_mm_set1_epi16(sc[s]), _mm_set1_epi16(sc[s + 1]));
        const __m256i q8 = load_q8(y[i].qs + 128 * h + 32 * k);
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], q8), _mm256_maddubs_epi16(offset, q8));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scale));
      }
    }
    const float d = y[i].d * half_to_float(x[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum_ps(acc);
}

}  // namespace

VecDotFn avx2_vec_dot(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return dot_f32;
    case GgmlType::F16: return dot_f16;
    case GgmlType::BF16: return dot_bf16;
    case GgmlType::Q8_0: return dot_q8_0;
    case GgmlType::Q4_0: return dot_q4_0;
    case GgmlType::Q4_1: return dot_q4_1;
    case GgmlType::Q5_0: return dot_q5_0;
    case GgmlType::Q5_1: return dot_q5_1;
    case GgmlType::IQ4_NL: return dot_iq4_nl;
    case GgmlType::MXFP4: return dot_mxfp4;
    case GgmlType::TQ4: return dot_tq4;
    case GgmlType::TQ3: return dot_tq3;
    case GgmlType::Q4_K: return dot_q4_K;
    case GgmlType::Q5_K: return dot_q5_K;
    case GgmlType::Q6_K: return dot_q6_K;
    default: return nullptr;
  }
}

RowGroupDotFn avx2_row_group_dot(GgmlType type) { return type == GgmlType::Q4_K ? dot4_q4_K_grouped : nullptr; }

DequantizeFn avx2_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::TQ4: return dequantize_tq4_avx2;
    case GgmlType::TQ3: return dequantize_tq3_avx2;
    default: return nullptr;
  }
}
#else
VecDotFn avx2_vec_dot(GgmlType) { return nullptr; }
DequantizeFn avx2_dequantize(GgmlType) { return nullptr; }
RowGroupDotFn avx2_row_group_dot(GgmlType) { return nullptr; }
#endif

}  // namespace agentkv::quant_detail
