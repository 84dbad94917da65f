// AVX-512 dot products: 512-bit float kernels (f32, f16, and bf16 through AVX512-BF16's
// vdpbf16ps where present), and AVX512-VNNI integer kernels (vpdpbusd) for q8_0, q4_0 and the
// q5_K / q6_K K-quants, two 32-element groups per 512-bit register. Types without a
// kernel here (or integer types on a CPU without VNNI) fall back to the AVX2 table.
#include <cmath>

#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"

// GCC 12 reports the deliberately undefined upper half in _mm512_castsi256_si512 and the
// _mm512_reduce_* helpers as uninitialized (a false positive inside its own intrinsic headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv::quant_detail {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace x86;

#define AGENTKV_AVX512 __attribute__((target(AGENTKV_TARGET_AVX512)))
#define AGENTKV_AVX512_INLINE static inline __attribute__((target(AGENTKV_TARGET_AVX512), always_inline))
#define AGENTKV_AVX512_VNNI_INLINE \
  static inline __attribute__((target(AGENTKV_TARGET_AVX512 ",avx512vnni"), always_inline))
#define AGENTKV_AVX512_BF16 __attribute__((target(AGENTKV_TARGET_AVX512 ",avx512bf16")))

// ggml_vec_dot_f32 / _f16 on an AVX-512 build (GGML_F32_STEP 64): whole 64-element steps go to
// four 16-lane fused accumulators, combined as (0 + 2) + (1 + 3) and reduced by
// _mm512_reduce_add_ps; the elements after the last whole step are added one product at a time
// (f32: a float fused multiply-add chain; f16: products in float, the sum in double).
AGENTKV_AVX512_INLINE __m512 combine_ggml(const __m512 acc[4]) {
  return _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
}

AGENTKV_AVX512 float dot_f32(int64_t n, const void* w, const void* a) {
  const float* x = static_cast<const float*>(w);
  const float* y = static_cast<const float*>(a);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64) {
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * k), _mm512_loadu_ps(y + i + 16 * k), acc[k]);
  }
  float sum = _mm512_reduce_add_ps(combine_ggml(acc));
  for (int64_t i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

AGENTKV_AVX512_INLINE __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

AGENTKV_AVX512 float dot_f16(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const uint16_t* y = static_cast<const uint16_t*>(a);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64) {
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm512_fmadd_ps(load_f16x16(x + i + 16 * k), load_f16x16(y + i + 16 * k), acc[k]);
  }
  double sum = _mm512_reduce_add_ps(combine_ggml(acc));
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(half_to_float(x[i]) * half_to_float(y[i]));
  return static_cast<float>(sum);
}

AGENTKV_AVX512_INLINE __m512 bf16x16_to_ps(__m256i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

AGENTKV_AVX512_INLINE float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// ggml_vec_dot_bf16's AVX-512 orders: two 16-lane accumulators (AVX512-BF16: two vdpbf16ps
// chains over 64-element steps; without it: widened products over 32-element steps), each
// reduced by _mm512_reduce_add_ps and added in double, the rest one product at a time in double.
// (bf16 products are exact in f32, so the fused multiply-add here equals ggml's mul + add.)
AGENTKV_AVX512 float dot_bf16(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const uint16_t* y = static_cast<const uint16_t*>(a);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(bf16x16_to_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))),
                           bf16x16_to_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i))), acc0);
    acc1 = _mm512_fmadd_ps(bf16x16_to_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16))),
                           bf16x16_to_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i + 16))), acc1);
  }
  double sum = _mm512_reduce_add_ps(acc0);
  sum += _mm512_reduce_add_ps(acc1);
  for (; i < n; ++i) sum += static_cast<double>(bf16_to_float(x[i]) * bf16_to_float(y[i]));
  return static_cast<float>(sum);
}

AGENTKV_AVX512_BF16 float dot_bf16_dp(int64_t n, const void* w, const void* a) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const uint16_t* y = static_cast<const uint16_t*>(a);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(x + i), (__m512bh)_mm512_loadu_si512(y + i));
    acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(x + i + 32), (__m512bh)_mm512_loadu_si512(y + i + 32));
  }
  double sum = _mm512_reduce_add_ps(acc0);
  sum += _mm512_reduce_add_ps(acc1);
  for (; i < n; ++i) sum += static_cast<double>(bf16_to_float(x[i]) * bf16_to_float(y[i]));
  return static_cast<float>(sum);
}

AGENTKV_AVX512_INLINE __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Signed x signed bytes through vpdpbusd (unsigned x signed): |a| times b with a's sign moved onto b.
AGENTKV_AVX512_VNNI_INLINE __m512i dot_s8s8_512(__m512i a, __m512i b) {
  const __m512i neg_b = _mm512_mask_sub_epi8(b, _mm512_movepi8_mask(a), _mm512_setzero_si512(), b);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(a), neg_b);
}

AGENTKV_AVX512_VNNI_INLINE __m256i dot_s8s8_256(__m256i a, __m256i b) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// Float scale vector: the low 8 lanes d0, the high 8 lanes d1.
AGENTKV_AVX512_INLINE __m512 two_scales(float d0, float d1) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
}

AGENTKV_AVX2_INLINE __m256i load_32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// llama.cpp's float order (see the scalar kernel): one 8-lane accumulator, one block at a time,
// so it cannot spread blocks over a 512-bit register; only the integer sums use VNNI here.
AGENTKV_AVX512_VNNI float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK8_0; ++ib) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
    const __m256i p = dot_s8s8_256(load_32(x[ib].qs), load_32(y[ib].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc);
}

AGENTKV_AVX512_VNNI float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / kQK4_0;
  const __m512i eight = _mm512_set1_epi8(8);
  __m512 acc = _mm512_setzero_ps();
  int64_t ib = 0;
  for (; ib + 2 <= nb; ib += 2) {
    const __m512 d = two_scales(half_to_float(x[ib].d) * half_to_float(y[ib].d),
                                half_to_float(x[ib + 1].d) * half_to_float(y[ib + 1].d));
    const __m512i q = _mm512_sub_epi8(join(unpack_nibbles(x[ib].qs), unpack_nibbles(x[ib + 1].qs)), eight);
    const __m512i p = dot_s8s8_512(q, join(load_32(y[ib].qs), load_32(y[ib + 1].qs)));
    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (ib < nb) {
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[ib].qs), _mm256_set1_epi8(8));
    const __m256i p = dot_s8s8_256(q, load_32(y[ib].qs));
    sum += half_to_float(x[ib].d) * half_to_float(y[ib].d) * static_cast<float>(hsum_epi32(p));
  }
  return sum;
}

// mxfp4: ggml's AVX2 order (quant_dot_avx2.cpp) with a block pair per register: the low 8 lanes
// are its even-block accumulator, the high 8 its odd-block one, added half to half at the end.
AGENTKV_AVX512_VNNI float dot_mxfp4(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / kQK_MXFP4;
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMXFP4Values)));
  __m512 acc = _mm512_setzero_ps();
  int64_t ib = 0;
  for (; ib + 1 < nb; ib += 2) {
    const __m512 d = two_scales(half_to_float(y[ib].d) * mxfp4_half_scale(x[ib].e),
                                half_to_float(y[ib + 1].d) * mxfp4_half_scale(x[ib + 1].e));
    const __m512i q = _mm512_shuffle_epi8(table, join(unpack_nibbles(x[ib].qs), unpack_nibbles(x[ib + 1].qs)));
    const __m512i p = dot_s8s8_512(q, join(load_32(y[ib].qs), load_32(y[ib + 1].qs)));
    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
  }
  float sum = hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));
  if (ib < nb) sum = mxfp4_add_block(sum, x[ib], y[ib]);
  return sum;
}

// Lanes 0-7 scale s0, lanes 8-15 scale s1 (two 32-weight sub-blocks in one register).
AGENTKV_AVX512_INLINE __m512i two_int_scales(int s0, int s1) {
  return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(s0), _mm512_set1_epi32(s1));
}

// q4_K / q5_K: 64 unsigned weights (sub-blocks 2j and 2j+1) against 64 contiguous activations.
AGENTKV_AVX512_VNNI_INLINE __m512i k4_pair_dot_vnni(__m256i q_lo, __m256i q_hi, const int8_t* q8, int s0, int s1) {
  const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), join(q_lo, q_hi), _mm512_loadu_si512(q8));
  // |p| <= 4 * 31 * 127 fits in 16 bits and the scales' high halves are 0, so a 16-bit multiply-add
  // of the int32 lanes is their exact product (and cheaper than vpmulld).
  return _mm512_madd_epi16(p, two_int_scales(s0, s1));
}

AGENTKV_AVX512_INLINE int k4_min_sum(const uint8_t* mins, const int16_t* bsums) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return s;
}

AGENTKV_AVX512_VNNI float dot_q5_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  __m512 acc = _mm512_setzero_ps();
  float mins_total = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k4_scale_min(j, x[i].scales, &sc[j], &mn[j]);
    mins_total += half_to_float(x[i].dmin) * y[i].d * static_cast<float>(k4_min_sum(mn, y[i].bsums));
    const __m256i qh = load_32(x[i].qh);
    __m512i isum = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m256i bytes = load_32(x[i].qs + 32 * j);
      const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
      const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
      const __m256i q_lo = _mm256_or_si256(_mm256_and_si256(bytes, low4), h_lo);
      const __m256i q_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), h_hi);
      isum = _mm512_add_epi32(isum, k4_pair_dot_vnni(q_lo, q_hi, y[i].qs + 64 * j, sc[2 * j], sc[2 * j + 1]));
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(half_to_float(x[i].d) * y[i].d), _mm512_cvtepi32_ps(isum), acc);
  }
  return _mm512_reduce_add_ps(acc) - mins_total;
}

// ggml's eight lanes (see quant_dot_scalar.cpp): vpdpbusd lane k sums weights 4k..4k+3 of 64, so
// lanes k and k+8 together are ggml's lane k of a 32-weight group.
AGENTKV_AVX512_VNNI float dot_q6_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  // Lanes 4s..4s+3 belong to 16-weight sub-block s of the 64.
  const __m512i lane_to_scale = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i offset = _mm512_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const int8_t* sc = x[i].scales;
    __m512i isum = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6k_unpack_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
      for (int k = 0; k < 4; k += 2) {
        const int s = 8 * h + 2 * k;
        const __m512i q8 = _mm512_loadu_si512(y[i].qs + 128 * h + 32 * k);
        const __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), join(q[k], q[k + 1]), q8),
                                           _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, q8));
        int32_t four;
        std::memcpy(&four, sc + s, 4);
        // Signed scales in the low 16 bits of each lane, 0 above: with |p| <= 4 * 32 * 127 < 2^15 a
        // 16-bit multiply-add of the int32 lanes is their exact product (cheaper than vpmulld).
        const __m512i scales = _mm512_and_si512(
            _mm512_permutexvar_epi32(lane_to_scale, _mm512_cvtepi8_epi32(_mm_cvtsi32_si128(four))), _mm512_set1_epi32(0xFFFF));
        isum = _mm512_add_epi32(isum, _mm512_madd_epi16(p, scales));
      }
    }
    const __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
    const float d = y[i].d * half_to_float(x[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
  }
  return hsum_ps(acc);
}

}  // namespace

VecDotFn avx512_vec_dot(GgmlType type) {
  const CpuFeatures& f = cpu_features();
  switch (type) {
    case GgmlType::F32: return dot_f32;
    case GgmlType::F16: return dot_f16;
    case GgmlType::BF16: return f.avx512_bf16 ? dot_bf16_dp : dot_bf16;
    case GgmlType::Q8_0: return f.avx512_vnni ? dot_q8_0 : nullptr;
    case GgmlType::Q4_0: return f.avx512_vnni ? dot_q4_0 : nullptr;
    case GgmlType::MXFP4: return f.avx512_vnni ? dot_mxfp4 : nullptr;
    // q4_K: ggml's float order needs each superblock's integer sum as a scalar; with that, the AVX2
    // kernel is as fast as a VNNI one, so this level uses it (nullptr falls back to the AVX2 table).
    case GgmlType::Q5_K: return f.avx512_vnni ? dot_q5_K : nullptr;
    case GgmlType::Q6_K: return f.avx512_vnni ? dot_q6_K : nullptr;
    default: return nullptr;
  }
}

RowGroupDotFn avx512_row_group_dot(GgmlType) { return nullptr; }  // the AVX2 q4_K kernel
#else
VecDotFn avx512_vec_dot(GgmlType) { return nullptr; }
RowGroupDotFn avx512_row_group_dot(GgmlType) { return nullptr; }
#endif

}  // namespace agentkv::quant_detail
