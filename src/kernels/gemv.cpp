// Decode GEMV kernels (AVX-512 VNNI; q4_K and q6_K also AVX2; f16 and q8_0 per level, at the end).
// The per-row dot loop is bound by the latency of its one load stream and its long per-block
// instruction chain, not by memory bandwidth; these kernels
// take a group of rows at once (sharing the activation loads, the scale conversions and the
// final reductions) and prefetch the rows a few KB ahead. Each output keeps the float operations
// of its vec_dot kernel, in the same order (see quant_dot_avx2.cpp / quant_dot_avx512.cpp):
//   q8_0: 8 lanes per row, lane = fma(fp16(w.d) * fp16(a.d), float(int lane sum), lane) per block,
//         then hsum_ps. Two rows share a 512-bit register, one per 256-bit half; with a few
//         tokens (gemv_batch_rows) a register holds one row and two tokens instead.
//   q6_K: 8 lanes per row, lane = fma(a.d * fp16(w.d), float(int lane sum), lane) per superblock,
//         then hsum_ps. Two rows per 512-bit register as for q8_0.
//   q4_K: two scalar chains per row, acc = fma(float(isum), fp16(w.d) * a.d, acc) and
//         acc_min = fma(float(min sum), fp16(w.dmin) * a.d, acc_min) per superblock, then
//         acc - acc_min. Eight rows' chains sit in the lanes of one register.
// Only integer sums (exact) are computed differently from the per-row kernels.
#include "kernels/gemv.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"
#include "kernels/thread_scratch.h"

// GCC 12 reports the undefined upper halves inside its own AVX-512 intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv {

namespace {
// The per-(row, token) loop: the reference order, and the path for types without a batch kernel.
void batch_rows_by_dot(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
                       size_t act_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y,
                       int64_t y_stride) {
  const VecDotFn dot = vec_dot_fn(type);
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t)
      y[t * y_stride + r] = dot(n_in, weights + static_cast<size_t>(r) * w_stride, act + static_cast<size_t>(t) * act_stride);
  }
}
}  // namespace

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;

#define AGENTKV_GEMV_INLINE static inline __attribute__((target(AGENTKV_TARGET_AVX512 ",avx512vnni"), always_inline))

// How far ahead of the rows being read the software prefetch runs (bytes of the row stream).
// 2-8 KB measured alike (~19 GB/s on 2 threads, the read probe's rate); none: ~30 % slower.
constexpr size_t kPrefetchBytes = 4096;

// Rows to look ahead for prefetching: a whole number of groups covering kPrefetchBytes.
int64_t rows_ahead(size_t w_stride, int group_rows) {
  const size_t group_bytes = w_stride * static_cast<size_t>(group_rows);
  return static_cast<int64_t>((kPrefetchBytes + group_bytes - 1) / group_bytes) * group_rows;
}

// First row of the group to prefetch while group `r` is read: `ahead` rows on, but never past the
// last whole group of the range (the prefetch then re-touches rows already read, harmlessly).
const uint8_t* prefetch_rows(const uint8_t* weights, size_t w_stride, int64_t r, int64_t ahead, int64_t last_group) {
  return weights + static_cast<size_t>(std::min(r + ahead, last_group)) * w_stride;
}

AGENTKV_AVX2_INLINE void prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// Per-call activation data lives in thread_scratch (thread_scratch.h); the activation scales are
// plain floats, so they carry a tag of their own.
struct ActivationScaleTag;

// The four rows' fp16 scales (each at byte `offset` of its row) times a float scale, as floats.
AGENTKV_GEMV_INLINE __m128 four_scales(const uint8_t* row0, size_t w_stride, size_t offset, float a_scale) {
  uint16_t h[4];
  for (int i = 0; i < 4; ++i) std::memcpy(&h[i], row0 + i * w_stride + offset, 2);
  const __m128i halves = _mm_setr_epi16(static_cast<short>(h[0]), static_cast<short>(h[1]), static_cast<short>(h[2]),
                                        static_cast<short>(h[3]), 0, 0, 0, 0);
  return _mm_mul_ps(_mm_cvtph_ps(halves), _mm_set1_ps(a_scale));
}

// Lanes 0-7: scale i, lanes 8-15: scale i + 1 (of four).
AGENTKV_GEMV_INLINE __m512 pair_scales(__m128 four, int i) {
  const __m512i index = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(i), _mm512_set1_epi32(i + 1));
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(four));
}

// ---------------------------------------------------------------------------------------------
// q8_0: vpdpbusd multiplies unsigned by signed bytes, so the weights are shifted to w + 128
// (xor 0x80) and each lane starts from -128 * (sum of its 4 activations); the lane sums are the
// same exact int32 as dot_q8_0's.
constexpr int kQ8_0Rows = 4;

struct alignas(32) Q8_0Bias {
  int32_t lane[8];  // -128 * (sum of the lane's 4 activations)
};

AGENTKV_AVX512_VNNI void q8_0_prepare(const BlockQ8_0* a, int64_t nb, Q8_0Bias* bias, float* scale) {
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), q);
    _mm256_store_si256(reinterpret_cast<__m256i*>(bias + b), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 7)));
    scale[b] = half_to_float(a[b].d);
  }
}

AGENTKV_AVX512_VNNI void q8_0_group(const uint8_t* row0, size_t w_stride, int64_t nb, const BlockQ8_0* a,
                                    const Q8_0Bias* bias, const float* a_scale, const uint8_t* pf, float* out) {
  const auto* x0 = reinterpret_cast<const BlockQ8_0*>(row0);
  const auto* x1 = reinterpret_cast<const BlockQ8_0*>(row0 + w_stride);
  const auto* x2 = reinterpret_cast<const BlockQ8_0*>(row0 + 2 * w_stride);
  const auto* x3 = reinterpret_cast<const BlockQ8_0*>(row0 + 3 * w_stride);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc01 = _mm512_setzero_ps(), acc23 = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t at = static_cast<size_t>(b) * sizeof(BlockQ8_0);
    for (int i = 0; i < kQ8_0Rows; ++i) prefetch(pf + i * w_stride + at);
    const __m512i act = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs)));
    const __m512i start = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(bias + b)));
    const __m512i w01 = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0[b].qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1[b].qs)), 1);
    const __m512i w23 = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x2[b].qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x3[b].qs)), 1);
    const __m512i s01 = _mm512_dpbusd_epi32(start, _mm512_xor_si512(w01, flip), act);
    const __m512i s23 = _mm512_dpbusd_epi32(start, _mm512_xor_si512(w23, flip), act);
    const __m128 d = four_scales(row0, w_stride, at, a_scale[b]);  // fp16(w.d) * fp16(a.d)
    acc01 = _mm512_fmadd_ps(pair_scales(d, 0), _mm512_cvtepi32_ps(s01), acc01);
    acc23 = _mm512_fmadd_ps(pair_scales(d, 2), _mm512_cvtepi32_ps(s23), acc23);
  }
  out[0] = hsum_ps(_mm512_castps512_ps256(acc01));
  out[1] = hsum_ps(_mm512_extractf32x8_ps(acc01, 1));
  out[2] = hsum_ps(_mm512_castps512_ps256(acc23));
  out[3] = hsum_ps(_mm512_extractf32x8_ps(acc23, 1));
}

void q8_0_rows(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, int64_t row_begin,
               int64_t row_end, float* y) {
  const int64_t nb = n_in / kQK8_0;
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  Q8_0Bias* bias = thread_scratch<Q8_0Bias>(static_cast<size_t>(nb));
  float* a_scale = thread_scratch<float, ActivationScaleTag>(static_cast<size_t>(nb));
  q8_0_prepare(a, nb, bias, a_scale);
  const int64_t ahead = rows_ahead(w_stride, kQ8_0Rows);
  const int64_t grouped_end = row_begin + (row_end - row_begin) / kQ8_0Rows * kQ8_0Rows;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ8_0Rows) {
    q8_0_group(weights + static_cast<size_t>(r) * w_stride, w_stride, nb, a, bias, a_scale,
               prefetch_rows(weights, w_stride, r, ahead, grouped_end - kQ8_0Rows), y + r);
  }
  const VecDotFn dot = vec_dot_fn(GgmlType::Q8_0);
  for (; r < row_end; ++r) y[r] = dot(n_in, weights + static_cast<size_t>(r) * w_stride, act);
}

// ---------------------------------------------------------------------------------------------
// q8_0, a few tokens (multi-sequence decode): each group of 4 weight rows is read from memory
// once (with the prefetch) and applied to every token while its blocks are in registers / L1.
// Tokens go in pairs, one per 256-bit half of a register (the row's block broadcast to both
// halves), so a (row, token) keeps dot_q8_0's 8 lanes and its fma chain; the scale is
// fp16(w.d) * fp16(a.d) as there.

// One q8_0 block of tokens 2p and 2p + 1 (the upper half all zero past the last token, which
// leaves that half's accumulator at zero).
struct alignas(64) Q8_0TokenPair {
  int8_t qs[64];
  int32_t bias[16];  // -128 * (sum of the lane's 4 activations)
  float d[16];       // the token's block scale over its 8 lanes
};

constexpr int kQ8_0TilePairs = 4;  // token pairs per register tile: 4 rows x 4 pairs accumulators
// Up to this many tokens the batch GEMV beats q8_0_gemm (which packs weight chunks first):
// streaming a model's matrices on 2 threads, 4 tokens 34 vs 54 ms, 16: 76 vs 94, 32: 146 vs 158,
// 48: 199 vs 205, 64: 284 vs 276 (gemv_test's batch throughput report).
constexpr int64_t kQ8_0BatchMaxTokens = 32;

// out[b * n_pairs + p]: block b of pair p.
AGENTKV_AVX512_VNNI void q8_0_pack_pairs(const uint8_t* act, size_t act_stride, int64_t n_tokens, int64_t nb,
                                         Q8_0TokenPair* out) {
  const int64_t n_pairs = (n_tokens + 1) / 2;
  for (int64_t t = 0; t < 2 * n_pairs; ++t) {
    const int64_t p = t / 2;
    const int half = static_cast<int>(t % 2);
    const auto* a = t < n_tokens ? reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * act_stride) : nullptr;
    for (int64_t b = 0; b < nb; ++b) {
      Q8_0TokenPair& dst = out[b * n_pairs + p];
      __m256i q = _mm256_setzero_si256();
      float d = 0.f;
      if (a) {
        q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
        d = half_to_float(a[b].d);
      }
      const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), q);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.qs + 32 * half), q);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.bias + 8 * half),
                          _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 7)));
      _mm256_storeu_ps(dst.d + 8 * half, _mm256_set1_ps(d));
    }
  }
}

// Rows row0 .. row0 + 3 times token pairs a[0 .. kPairs) (pairs pair_stride apart per block);
// writes y[t * y_stride + i] for row i and token t = token0 .. (y at the group's first row).
template <int kPairs, bool kPrefetch>
AGENTKV_AVX512_VNNI void q8_0_batch_group(const uint8_t* row0, size_t w_stride, int64_t nb, const Q8_0TokenPair* a,
                                          int64_t pair_stride, const uint8_t* pf, float* y, int64_t y_stride,
                                          int64_t token0, int64_t n_tokens) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[kQ8_0Rows][kPairs];
#pragma GCC unroll 4
  for (int r = 0; r < kQ8_0Rows; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t at = static_cast<size_t>(b) * sizeof(BlockQ8_0);
    if constexpr (kPrefetch) {
      for (int i = 0; i < kQ8_0Rows; ++i) prefetch(pf + i * w_stride + at);
    }
    const Q8_0TokenPair* ab = a + b * pair_stride;
#pragma GCC unroll 4
    for (int r = 0; r < kQ8_0Rows; ++r) {
      const uint8_t* block = row0 + r * w_stride + at;
      uint16_t h;
      std::memcpy(&h, block + offsetof(BlockQ8_0, d), 2);
      const __m512 w_scale = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h)));
      const __m512i w = _mm512_xor_si512(
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + offsetof(BlockQ8_0, qs)))),
          flip);
#pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) {
        const __m512i sums = _mm512_dpbusd_epi32(_mm512_load_si512(ab[p].bias), w, _mm512_load_si512(ab[p].qs));
        const __m512 d = _mm512_mul_ps(w_scale, _mm512_load_ps(ab[p].d));  // fp16(w.d) * fp16(a.d)
        acc[r][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sums), acc[r][p]);
      }
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < kPairs; ++p) {
    const int64_t t = token0 + 2 * p;
#pragma GCC unroll 4
    for (int r = 0; r < kQ8_0Rows; ++r) {
      y[t * y_stride + r] = hsum_ps(_mm512_castps512_ps256(acc[r][p]));
      if (t + 1 < n_tokens) y[(t + 1) * y_stride + r] = hsum_ps(_mm512_extractf32x8_ps(acc[r][p], 1));
    }
  }
}

using Q8_0BatchKernel = void (*)(const uint8_t*, size_t, int64_t, const Q8_0TokenPair*, int64_t, const uint8_t*, float*,
                                 int64_t, int64_t, int64_t);

Q8_0BatchKernel q8_0_batch_kernel(int pairs, bool with_prefetch) {
  switch (pairs) {
    case 1: return with_prefetch ? q8_0_batch_group<1, true> : q8_0_batch_group<1, false>;
    case 2: return with_prefetch ? q8_0_batch_group<2, true> : q8_0_batch_group<2, false>;
    case 3: return with_prefetch ? q8_0_batch_group<3, true> : q8_0_batch_group<3, false>;
    default: return with_prefetch ? q8_0_batch_group<4, true> : q8_0_batch_group<4, false>;
  }
}

void q8_0_batch_rows(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, size_t act_stride,
                     int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  const int64_t nb = n_in / kQK8_0;
  const int64_t n_pairs = (n_tokens + 1) / 2;
  Q8_0TokenPair* pairs = thread_scratch<Q8_0TokenPair>(static_cast<size_t>(nb * n_pairs));
  q8_0_pack_pairs(act, act_stride, n_tokens, nb, pairs);
  const int64_t ahead = rows_ahead(w_stride, kQ8_0Rows);
  const int64_t grouped_end = row_begin + (row_end - row_begin) / kQ8_0Rows * kQ8_0Rows;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ8_0Rows) {
    const uint8_t* row0 = weights + static_cast<size_t>(r) * w_stride;
    const uint8_t* pf = prefetch_rows(weights, w_stride, r, ahead, grouped_end - kQ8_0Rows);
    // Past the first tile of tokens the group's rows are in L1 / L2: no prefetch.
    for (int64_t p0 = 0; p0 < n_pairs; p0 += kQ8_0TilePairs) {
      const int tile = static_cast<int>(std::min<int64_t>(kQ8_0TilePairs, n_pairs - p0));
      q8_0_batch_kernel(tile, p0 == 0)(row0, w_stride, nb, pairs + p0, n_pairs, pf, y + r, y_stride, 2 * p0, n_tokens);
    }
  }
  batch_rows_by_dot(GgmlType::Q8_0, weights, w_stride, n_in, act, act_stride, n_tokens, r, row_end, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// q4_K: per row and superblock, an exact int32 vector whose lanes 0-7 sum to the scaled quant dot
// (sum_j sc_j * dot(q_j, a_j)) and lanes 8-15 to the min dot (sum_j m_j * bsum pair j); eight
// rows' vectors are reduced together, so one register carries the eight (isum, min sum) pairs and
// one fused multiply-add per superblock advances all sixteen chains.
constexpr int kQ4_KRows = 8;

// A superblock of the activation, re-laid for 512-bit steps: act[0] = sub-blocks 0 and 2 (the
// low nibbles of weight bytes 0..63), act[1] = 1 and 3 (their high nibbles), act[2] = 4 and 6,
// act[3] = 5 and 7; lanes 8-15 of bsum_pairs hold bsums[2j] + bsums[2j + 1], lanes 0-7 zero.
struct alignas(64) Q4_KAct {
  int8_t act[4][64];
  int32_t bsum_pairs[16];
  float d;
};

void q4_K_prepare(const BlockQ8_K* a, int64_t nsb, Q4_KAct* out) {
  for (int64_t s = 0; s < nsb; ++s) {
    for (int k = 0; k < 4; ++k) {
      const int first = 128 * (k / 2) + 32 * (k % 2);  // sub-block 4 (k / 2) + k % 2, and the one 2 on
      std::memcpy(out[s].act[k], a[s].qs + first, 32);
      std::memcpy(out[s].act[k] + 32, a[s].qs + first + 64, 32);
    }
    for (int j = 0; j < 8; ++j) {
      out[s].bsum_pairs[j] = 0;
      out[s].bsum_pairs[8 + j] = a[s].bsums[2 * j] + a[s].bsums[2 * j + 1];
    }
    out[s].d = a[s].d;
  }
}

// The row's 8 scales and 8 mins (6 bits each, packed in 12 bytes) as bytes 0-7 and 8-15.
AGENTKV_AVX2_INLINE __m128i q4_K_scale_min_bytes(const uint8_t* packed) {
  // Bytes 0-3 / 4-7 / 8-11 as dwords u0, u1, u2 (the 4 bytes after them are the quants, unused):
  // scales 0-3 = u0 & 63, mins 0-3 = u1 & 63, scales 4-7 = (u2 & 15) | (u0 >> 6) << 4,
  // mins 4-7 = (u2 >> 4) | (u1 >> 6) << 4, byte by byte.
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i low_src = _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0));   // u0 u2 u1 u2
  const __m128i high_src = _mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0));  // u0 u0 u1 u1
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(low_src, _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high = _mm_and_si128(_mm_srli_epi32(high_src, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, high);
}

// The same as int32 lanes 0-7 and 8-15.
AGENTKV_GEMV_INLINE __m512i q4_K_scales_mins(const uint8_t* packed) {
  return _mm512_cvtepu8_epi32(q4_K_scale_min_bytes(packed));
}

// Lanes 0-7: lo, lanes 8-15: hi.
AGENTKV_GEMV_INLINE __m512i lanes_of(int lo, int hi) {
  return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(lo), _mm512_set1_epi32(hi));
}

AGENTKV_GEMV_INLINE __m512i q4_K_row_sums(const BlockQ4_K& x, const Q4_KAct& a) {
  const __m512i sm = q4_K_scales_mins(x.scales);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i q0 = _mm512_loadu_si512(x.qs), q1 = _mm512_loadu_si512(x.qs + 64);
  const __m512i zero = _mm512_setzero_si512();
  // Lane sums of 4 products each (|p| <= 4 * 15 * 128 < 2^15), times their sub-block scale with a
  // 16-bit multiply-add (the scales' high halves are 0): exact.
  const __m512i p0 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(q0, low4), _mm512_load_si512(a.act[0]));
  const __m512i p1 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4), _mm512_load_si512(a.act[1]));
  const __m512i p2 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(q1, low4), _mm512_load_si512(a.act[2]));
  const __m512i p3 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4), _mm512_load_si512(a.act[3]));
  __m512i isum = _mm512_dpwssd_epi32(zero, p0, _mm512_permutexvar_epi32(lanes_of(0, 2), sm));
  isum = _mm512_dpwssd_epi32(isum, p1, _mm512_permutexvar_epi32(lanes_of(1, 3), sm));
  isum = _mm512_dpwssd_epi32(isum, p2, _mm512_permutexvar_epi32(lanes_of(4, 6), sm));
  isum = _mm512_dpwssd_epi32(isum, p3, _mm512_permutexvar_epi32(lanes_of(5, 7), sm));
  // Mins (lanes 8-15) times bsum pairs (|pair| <= 32 * 128): 16-bit multiply-add, exact.
  const __m512i mins = _mm512_madd_epi16(sm, _mm512_load_si512(a.bsum_pairs));
  // Lanes 0-7: isum folded to 8 lanes; lanes 8-15: the min products.
  return _mm512_mask_add_epi32(mins, 0x00FF, isum, _mm512_shuffle_i64x2(isum, isum, _MM_SHUFFLE(1, 0, 3, 2)));
}

// Sums lanes 0-7 and lanes 8-15 of eight rows' vectors: [A r0-3, B r0-3, A r4-7, B r4-7], A the
// lanes 0-7 sums, B the lanes 8-15 sums (integer, so the order is free).
AGENTKV_GEMV_INLINE __m512i reduce8(const __m512i v[8]) {
  __m512i t[4];
  for (int i = 0; i < 4; ++i)
    t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  const __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[0], t[1]), _mm512_unpackhi_epi64(t[0], t[1]));
  const __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2], t[3]), _mm512_unpackhi_epi64(t[2], t[3]));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
}

AGENTKV_AVX512_VNNI void q4_K_group(const uint8_t* row0, size_t w_stride, int64_t nsb, const Q4_KAct* a,
                                    const uint8_t* pf, float* out) {
  // d and dmin of a row's superblock are one dword: gather the eight rows', then lay the halves out
  // as the reduced sums are: [d r0-3, dmin r0-3, d r4-7, dmin r4-7].
  const __m256i row_offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                 _mm256_set1_epi32(static_cast<int>(w_stride)));
  const __m256i half_order = _mm256_setr_epi16(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const size_t at = static_cast<size_t>(s) * sizeof(BlockQ4_K);
    __m512i sums[kQ4_KRows];
    for (int i = 0; i < kQ4_KRows; ++i) {
      const uint8_t* p = pf + i * w_stride + at;
      prefetch(p);
      prefetch(p + 64);
      prefetch(p + 128);
      sums[i] = q4_K_row_sums(*reinterpret_cast<const BlockQ4_K*>(row0 + i * w_stride + at), a[s]);
    }
    const __m256i d_dmin = _mm256_i32gather_epi32(reinterpret_cast<const int*>(row0 + at), row_offsets, 1);
    const __m512 scales = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_permutexvar_epi16(half_order, d_dmin)),
                                        _mm512_set1_ps(a[s].d));  // fp16(w.d) * a.d, fp16(w.dmin) * a.d
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce8(sums)), scales, acc);
  }
  // acc - acc_min per row.
  const __m128 r03 = _mm_sub_ps(_mm512_extractf32x4_ps(acc, 0), _mm512_extractf32x4_ps(acc, 1));
  const __m128 r47 = _mm_sub_ps(_mm512_extractf32x4_ps(acc, 2), _mm512_extractf32x4_ps(acc, 3));
  _mm_storeu_ps(out, r03);
  _mm_storeu_ps(out + 4, r47);
}

void q4_K_rows(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, int64_t row_begin,
               int64_t row_end, float* y) {
  const int64_t nsb = n_in / kQK_K;
  Q4_KAct* a = thread_scratch<Q4_KAct>(static_cast<size_t>(nsb));
  q4_K_prepare(reinterpret_cast<const BlockQ8_K*>(act), nsb, a);
  const int64_t ahead = rows_ahead(w_stride, kQ4_KRows);
  // The scale gather takes int32 row offsets (rows of 16 M superblocks would not fit; none do).
  const bool offsets_fit = w_stride <= static_cast<size_t>(INT32_MAX / kQ4_KRows);
  const int64_t grouped_end = offsets_fit ? row_begin + (row_end - row_begin) / kQ4_KRows * kQ4_KRows : row_begin;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ4_KRows) {
    q4_K_group(weights + static_cast<size_t>(r) * w_stride, w_stride, nsb, a,
               prefetch_rows(weights, w_stride, r, ahead, grouped_end - kQ4_KRows), y + r);
  }
  const VecDotFn dot = vec_dot_fn(GgmlType::Q4_K);
  for (; r < row_end; ++r) y[r] = dot(n_in, weights + static_cast<size_t>(r) * w_stride, act);
}

// Up to this many tokens the batch GEMV beats q4_K_gemm (as measured for kQ8_0BatchMaxTokens:
// 2 tokens 21 vs 52 ms, 4: 33 vs 54, 6: 48 vs 60, 8: 64 vs 65, 12: 92 vs 74).
constexpr int64_t kQ4_KBatchMaxTokens = 6;

// q4_K, a few tokens, vec_dot numerics only (matmul keeps the tokens that take the row-group
// numerics on q4_K_gemm): the group kernel above once per token, the row group read from memory
// (with the prefetch) for the first token and from L1 for the others.
void q4_K_batch_rows(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, size_t act_stride,
                     int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  const int64_t nsb = n_in / kQK_K;
  Q4_KAct* a = thread_scratch<Q4_KAct>(static_cast<size_t>(nsb * n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t)
    q4_K_prepare(reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride), nsb, a + t * nsb);
  const int64_t ahead = rows_ahead(w_stride, kQ4_KRows);
  const bool offsets_fit = w_stride <= static_cast<size_t>(INT32_MAX / kQ4_KRows);
  const int64_t grouped_end = offsets_fit ? row_begin + (row_end - row_begin) / kQ4_KRows * kQ4_KRows : row_begin;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ4_KRows) {
    const uint8_t* row0 = weights + static_cast<size_t>(r) * w_stride;
    for (int64_t t = 0; t < n_tokens; ++t) {
      // Past the first token the "prefetch" re-touches the group's own rows (in L1 by then).
      const uint8_t* pf = t == 0 ? prefetch_rows(weights, w_stride, r, ahead, grouped_end - kQ4_KRows) : row0;
      float out[kQ4_KRows];
      q4_K_group(row0, w_stride, nsb, a + t * nsb, pf, out);
      std::memcpy(y + t * y_stride + r, out, sizeof(out));
    }
  }
  batch_rows_by_dot(GgmlType::Q4_K, weights, w_stride, n_in, act, act_stride, n_tokens, r, row_end, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// q6_K: dot_q6_K's lanes (AVX-512 kernel): per 64 weights, vpdpbusd lane L sums 4 products of the
// 0..63 quants, started from -32 * (sum of the 4 activations) (the offset), times the scale of
// 16-weight sub-block L / 4; a row's 8 lanes are lane m + lane m + 8 of the 16. Two rows share a
// 512-bit accumulator, one per half.
constexpr int kQ6_KRows = 4;

struct alignas(64) Q6_KAct {
  int32_t offset[4][16];  // -32 * lane sums of activations 64c .. 64c + 63
  float d;
};

AGENTKV_AVX512_VNNI void q6_K_prepare(const BlockQ8_K* a, int64_t nsb, Q6_KAct* out) {
  for (int64_t s = 0; s < nsb; ++s) {
    for (int c = 0; c < 4; ++c) {
      const __m512i q8 = _mm512_loadu_si512(a[s].qs + 64 * c);
      const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(32), q8);
      _mm512_store_si512(out[s].offset[c], _mm512_sub_epi32(_mm512_setzero_si512(), sums));
    }
    out[s].d = a[s].d;
  }
}

// Int32 lanes of one row and superblock, before folding to 8 (see above).
AGENTKV_GEMV_INLINE __m512i q6_K_row_sums(const BlockQ6_K& x, const BlockQ8_K& y, const Q6_KAct& a) {
  // Scales sign-extended to 16 bits, zero above (for the 16-bit multiply-add below).
  const __m512i sc = _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales))));
  const __m512i low4 = _mm512_set1_epi8(0x0F), high2 = _mm512_set1_epi8(0x30);
  // Quant pairs (32 + 32 weights): high bits 2k..2k+1 of qh go to bits 4-5: shifts per 256-bit half.
  const __m512i shift_01 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
  const __m512i shift_23 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
  __m512i isum = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(x.ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * h)));
    const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, shift_01), high2));
    const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                        _mm512_and_si512(_mm512_srlv_epi16(qh, shift_23), high2));
    // |p| <= 4 * 32 * 128 < 2^15: the 16-bit multiply-add by the scale is exact.
    const __m512i p01 = _mm512_dpbusd_epi32(_mm512_load_si512(a.offset[2 * h]), q01, _mm512_loadu_si512(y.qs + 128 * h));
    const __m512i p23 =
        _mm512_dpbusd_epi32(_mm512_load_si512(a.offset[2 * h + 1]), q23, _mm512_loadu_si512(y.qs + 128 * h + 64));
    const __m512i by_sub_block = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    isum = _mm512_dpwssd_epi32(isum, p01, _mm512_permutexvar_epi32(_mm512_add_epi32(by_sub_block, _mm512_set1_epi32(8 * h)), sc));
    isum = _mm512_dpwssd_epi32(isum, p23, _mm512_permutexvar_epi32(_mm512_add_epi32(by_sub_block, _mm512_set1_epi32(8 * h + 4)), sc));
  }
  return isum;
}

// [row A's 8 lanes | row B's 8 lanes], each lane m = lane m + lane m + 8 of the row's sums.
AGENTKV_GEMV_INLINE __m512i fold_pair(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

AGENTKV_AVX512_VNNI void q6_K_group(const uint8_t* row0, size_t w_stride, int64_t nsb, const BlockQ8_K* y,
                                    const Q6_KAct* a, const uint8_t* pf, float* out) {
  __m512 acc01 = _mm512_setzero_ps(), acc23 = _mm512_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const size_t at = static_cast<size_t>(s) * sizeof(BlockQ6_K);
    __m512i sums[kQ6_KRows];
    for (int i = 0; i < kQ6_KRows; ++i) {
      const uint8_t* p = pf + i * w_stride + at;
      prefetch(p);
      prefetch(p + 64);
      prefetch(p + 128);
      prefetch(p + 192);
      sums[i] = q6_K_row_sums(*reinterpret_cast<const BlockQ6_K*>(row0 + i * w_stride + at), y[s], a[s]);
    }
    const __m128 d = four_scales(row0, w_stride, at + offsetof(BlockQ6_K, d), a[s].d);  // a.d * fp16(w.d)
    acc01 = _mm512_fmadd_ps(pair_scales(d, 0), _mm512_cvtepi32_ps(fold_pair(sums[0], sums[1])), acc01);
    acc23 = _mm512_fmadd_ps(pair_scales(d, 2), _mm512_cvtepi32_ps(fold_pair(sums[2], sums[3])), acc23);
  }
  out[0] = hsum_ps(_mm512_castps512_ps256(acc01));
  out[1] = hsum_ps(_mm512_extractf32x8_ps(acc01, 1));
  out[2] = hsum_ps(_mm512_castps512_ps256(acc23));
  out[3] = hsum_ps(_mm512_extractf32x8_ps(acc23, 1));
}

void q6_K_rows(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, int64_t row_begin,
               int64_t row_end, float* y) {
  const int64_t nsb = n_in / kQK_K;
  const auto* y8 = reinterpret_cast<const BlockQ8_K*>(act);
  Q6_KAct* a = thread_scratch<Q6_KAct>(static_cast<size_t>(nsb));
  q6_K_prepare(y8, nsb, a);
  const int64_t ahead = rows_ahead(w_stride, kQ6_KRows);
  const int64_t grouped_end = row_begin + (row_end - row_begin) / kQ6_KRows * kQ6_KRows;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ6_KRows) {
    q6_K_group(weights + static_cast<size_t>(r) * w_stride, w_stride, nsb, y8, a,
               prefetch_rows(weights, w_stride, r, ahead, grouped_end - kQ6_KRows), y + r);
  }
  const VecDotFn dot = vec_dot_fn(GgmlType::Q6_K);
  for (; r < row_end; ++r) y[r] = dot(n_in, weights + static_cast<size_t>(r) * w_stride, act);
}

// q6_K, a few tokens: per superblock each row's quants and scale lanes are unpacked once and meet
// every token of the tile; a (row, token) keeps q6_K_group's lanes, scale product and fma chain.
constexpr int kQ6_KTileTokens = 4;
// Up to this many tokens the batch GEMV beats q6_K_gemm (as measured for kQ8_0BatchMaxTokens:
// 4 tokens 28 vs 55 ms, 16: 93 vs 103, 24: 136 vs 139, 32: 185 vs 168).
constexpr int64_t kQ6_KBatchMaxTokens = 16;

// Row x's quants for the four 64-activation chunks, and its sub-block scales laid out for them.
AGENTKV_GEMV_INLINE void q6_K_unpack(const BlockQ6_K& x, __m512i q[4], __m512i scale_lanes[4]) {
  const __m512i sc = _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales))));
  const __m512i low4 = _mm512_set1_epi8(0x0F), high2 = _mm512_set1_epi8(0x30);
  const __m512i shift_01 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
  const __m512i shift_23 = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
  const __m512i by_sub_block = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(x.ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * h)));
    q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, shift_01), high2));
    q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                   _mm512_and_si512(_mm512_srlv_epi16(qh, shift_23), high2));
    scale_lanes[2 * h] = _mm512_permutexvar_epi32(_mm512_add_epi32(by_sub_block, _mm512_set1_epi32(8 * h)), sc);
    scale_lanes[2 * h + 1] = _mm512_permutexvar_epi32(_mm512_add_epi32(by_sub_block, _mm512_set1_epi32(8 * h + 4)), sc);
  }
}

// The exact int32 lanes of q6_K_row_sums for one unpacked row and one token's superblock.
AGENTKV_GEMV_INLINE __m512i q6_K_unpacked_sums(const __m512i q[4], const __m512i scale_lanes[4], const BlockQ8_K& y,
                                               const Q6_KAct& a) {
  __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i p = _mm512_dpbusd_epi32(_mm512_load_si512(a.offset[k]), q[k], _mm512_loadu_si512(y.qs + 64 * k));
    isum = _mm512_dpwssd_epi32(isum, p, scale_lanes[k]);
  }
  return isum;
}

// Rows row0 .. row0 + 3 times kTokens tokens (activation rows act_stride apart, their prepared
// offsets `a` nsb apart); writes y[t * y_stride + i] (y at the group's first row and first token).
template <int kTokens, bool kPrefetch>
AGENTKV_AVX512_VNNI void q6_K_batch_group(const uint8_t* row0, size_t w_stride, int64_t nsb, const uint8_t* act,
                                          size_t act_stride, const Q6_KAct* a, const uint8_t* pf, float* y,
                                          int64_t y_stride) {
  __m512 acc[2][kTokens];  // [row pair][token]: rows 2i and 2i + 1 in the two halves
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const size_t at = static_cast<size_t>(s) * sizeof(BlockQ6_K);
    if constexpr (kPrefetch) {
      for (int i = 0; i < kQ6_KRows; ++i) {
        const uint8_t* p = pf + i * w_stride + at;
        prefetch(p);
        prefetch(p + 64);
        prefetch(p + 128);
        prefetch(p + 192);
      }
    }
    const __m128 w_scales = four_scales(row0, w_stride, at + offsetof(BlockQ6_K, d), 1.0f);  // exact fp16(w.d)
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) {
      __m512i qa[4], sa[4], qb[4], sb[4];
      q6_K_unpack(*reinterpret_cast<const BlockQ6_K*>(row0 + 2 * i * w_stride + at), qa, sa);
      q6_K_unpack(*reinterpret_cast<const BlockQ6_K*>(row0 + (2 * i + 1) * w_stride + at), qb, sb);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        const BlockQ8_K& yt = reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride)[s];
        const Q6_KAct& at_t = a[t * nsb + s];
        const __m128 d = _mm_mul_ps(w_scales, _mm_set1_ps(at_t.d));  // fp16(w.d) * a.d, as four_scales
        const __m512i sums = fold_pair(q6_K_unpacked_sums(qa, sa, yt, at_t), q6_K_unpacked_sums(qb, sb, yt, at_t));
        acc[i][t] = _mm512_fmadd_ps(pair_scales(d, 2 * i), _mm512_cvtepi32_ps(sums), acc[i][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) {
      y[t * y_stride + 2 * i] = hsum_ps(_mm512_castps512_ps256(acc[i][t]));
      y[t * y_stride + 2 * i + 1] = hsum_ps(_mm512_extractf32x8_ps(acc[i][t], 1));
    }
  }
}

using Q6_KBatchKernel = void (*)(const uint8_t*, size_t, int64_t, const uint8_t*, size_t, const Q6_KAct*, const uint8_t*,
                                 float*, int64_t);

Q6_KBatchKernel q6_K_batch_kernel(int tokens, bool with_prefetch) {
  switch (tokens) {
    case 1: return with_prefetch ? q6_K_batch_group<1, true> : q6_K_batch_group<1, false>;
    case 2: return with_prefetch ? q6_K_batch_group<2, true> : q6_K_batch_group<2, false>;
    case 3: return with_prefetch ? q6_K_batch_group<3, true> : q6_K_batch_group<3, false>;
    default: return with_prefetch ? q6_K_batch_group<4, true> : q6_K_batch_group<4, false>;
  }
}

void q6_K_batch_rows(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, size_t act_stride,
                     int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  const int64_t nsb = n_in / kQK_K;
  Q6_KAct* a = thread_scratch<Q6_KAct>(static_cast<size_t>(nsb * n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t)
    q6_K_prepare(reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride), nsb, a + t * nsb);
  const int64_t ahead = rows_ahead(w_stride, kQ6_KRows);
  const int64_t grouped_end = row_begin + (row_end - row_begin) / kQ6_KRows * kQ6_KRows;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ6_KRows) {
    const uint8_t* row0 = weights + static_cast<size_t>(r) * w_stride;
    const uint8_t* pf = prefetch_rows(weights, w_stride, r, ahead, grouped_end - kQ6_KRows);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kQ6_KTileTokens) {
      const int tile = static_cast<int>(std::min<int64_t>(kQ6_KTileTokens, n_tokens - t0));
      q6_K_batch_kernel(tile, t0 == 0)(row0, w_stride, nsb, act + static_cast<size_t>(t0) * act_stride, act_stride,
                                       a + t0 * nsb, pf, y + t0 * y_stride + r, y_stride);
    }
  }
  batch_rows_by_dot(GgmlType::Q6_K, weights, w_stride, n_in, act, act_stride, n_tokens, r, row_end, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// AVX2 (no VNNI): the same row groups, prefetch and float chains with 256-bit registers, the
// integer sums through vpmaddubsw / vpmaddwd as in quant_dot_avx2.cpp.

// q4_K: eight rows per group, one row per lane of the two float chains (acc and acc_min).
// Per row and superblock: int32 lanes summing to sum_j sc_j * dot(q_j, a_j) (pair sums of
// 2 products of 0..15 by -128..127 from vpmaddubsw, times the sub-block scale by vpmaddwd), and
// four lanes summing to the min dot; the eight rows' lanes are reduced together.
struct alignas(32) Q4_KActAvx2 {
  int16_t bsum_pairs[8];  // bsums[2j] + bsums[2j + 1], |pair| <= 32 * 128
  float d;
};

AGENTKV_AVX2 void q4_K_prepare_avx2(const BlockQ8_K* a, int64_t nsb, Q4_KActAvx2* out) {
  for (int64_t s = 0; s < nsb; ++s) {
    for (int j = 0; j < 8; ++j) out[s].bsum_pairs[j] = static_cast<int16_t>(a[s].bsums[2 * j] + a[s].bsums[2 * j + 1]);
    out[s].d = a[s].d;
  }
}

// Row x's scaled quant dot as 8 int32 lanes, and its min dot as 4 int32 lanes.
AGENTKV_AVX2_INLINE void q4_K_row_sums_avx2(const BlockQ4_K& x, const BlockQ8_K& y, const Q4_KActAvx2& a,
                                            __m256i* isum, __m128i* min_sum) {
  const __m128i sm = q4_K_scale_min_bytes(x.scales);
  *min_sum = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), _mm_load_si128(reinterpret_cast<const __m128i*>(a.bsum_pairs)));
  const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));  // 8 int16, both halves
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    // Every int16 lane = scale 2j (or 2j + 1): bytes 4j, 4j + 1 (4j + 2, 4j + 3) of `scales` repeated.
    const __m256i sc_lo = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * j + 1) << 8 | 4 * j)));
    const __m256i sc_hi =
        _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * j + 3) << 8 | (4 * j + 2))));
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
    const __m256i p_lo = _mm256_maddubs_epi16(_mm256_and_si256(bytes, low4),
                                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j)));
    const __m256i p_hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4),
                                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j + 32)));
    sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_madd_epi16(p_lo, sc_lo), _mm256_madd_epi16(p_hi, sc_hi)));
  }
  *isum = sum;
}

// Lane i = sum of v[i]'s eight lanes (integer: the order is free).
AGENTKV_AVX2_INLINE __m256i reduce8_avx2(const __m256i v[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Lane i = sum of m[i]'s four lanes.
AGENTKV_AVX2_INLINE __m256i reduce8x4_avx2(const __m128i m[8]) {
  const __m256i w0 = _mm256_setr_m128i(m[0], m[4]), w1 = _mm256_setr_m128i(m[1], m[5]);
  const __m256i w2 = _mm256_setr_m128i(m[2], m[6]), w3 = _mm256_setr_m128i(m[3], m[7]);
  return _mm256_hadd_epi32(_mm256_hadd_epi32(w0, w1), _mm256_hadd_epi32(w2, w3));
}

AGENTKV_AVX2 void q4_K_group_avx2(const uint8_t* row0, size_t w_stride, int64_t nsb, const BlockQ8_K* y,
                                  const Q4_KActAvx2* a, float* out) {
  // d and dmin of a row's superblock are one dword: gather the eight rows', then split the halves.
  const __m256i row_offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                 _mm256_set1_epi32(static_cast<int>(w_stride)));
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  // The integer sums row by row, each row's superblocks in address order, then the float chains
  // superblock by superblock, in dot_q4_K's order, for the eight rows at once. A matrix's rows are
  // contiguous, so the reads are one forward stream, which the hardware prefetcher follows on its
  // own: the superblock-major order (a row stride per step) needed a software prefetch 4 KiB
  // ahead, and was 1.12-1.15x slower with it (Q4_K_M tg64 at the AVX2 level, Zen 4); software
  // prefetch on top of the forward stream cost another ~7 %.
  struct Sums {
    __m256i sums[kQ4_KRows];
    __m128i mins[kQ4_KRows];
  };
  auto* sb_sums = reinterpret_cast<Sums*>(thread_scratch_lines<Sums>(static_cast<size_t>(nsb) * sizeof(Sums)));
  for (int i = 0; i < kQ4_KRows; ++i) {
    const uint8_t* row = row0 + i * w_stride;
    for (int64_t s = 0; s < nsb; ++s) {
      const size_t at = static_cast<size_t>(s) * sizeof(BlockQ4_K);
      q4_K_row_sums_avx2(*reinterpret_cast<const BlockQ4_K*>(row + at), y[s], a[s], &sb_sums[s].sums[i], &sb_sums[s].mins[i]);
    }
  }
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const size_t at = static_cast<size_t>(s) * sizeof(BlockQ4_K);
    const __m256i* sums = sb_sums[s].sums;
    const __m128i* mins = sb_sums[s].mins;
    const __m256i d_dmin = _mm256_i32gather_epi32(reinterpret_cast<const int*>(row0 + at), row_offsets, 1);
    // [d r0-3, dmin r0-3 | d r4-7, dmin r4-7] -> [d r0-7 | dmin r0-7]
    const __m256i halves = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(d_dmin, split), _MM_SHUFFLE(3, 1, 2, 0));
    const __m256 ya = _mm256_set1_ps(a[s].d);
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(halves)), ya);       // fp16(w.d) * a.d
    const __m256 dmin = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1)), ya);  // fp16(w.dmin) * a.d
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8_avx2(sums)), d, acc);
    acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8x4_avx2(mins)), dmin, acc_min);
  }
  _mm256_storeu_ps(out, _mm256_sub_ps(acc, acc_min));
}

void q4_K_rows_avx2(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, int64_t row_begin,
                    int64_t row_end, float* y) {
  const int64_t nsb = n_in / kQK_K;
  const auto* y8 = reinterpret_cast<const BlockQ8_K*>(act);
  Q4_KActAvx2* a = thread_scratch<Q4_KActAvx2>(static_cast<size_t>(nsb));
  q4_K_prepare_avx2(y8, nsb, a);
  const bool offsets_fit = w_stride <= static_cast<size_t>(INT32_MAX / kQ4_KRows);  // the gather's int32 offsets
  const int64_t grouped_end = offsets_fit ? row_begin + (row_end - row_begin) / kQ4_KRows * kQ4_KRows : row_begin;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ4_KRows) q4_K_group_avx2(weights + static_cast<size_t>(r) * w_stride, w_stride, nsb, y8, a, y + r);
  const VecDotFn dot = vec_dot_fn(GgmlType::Q4_K);
  for (; r < row_end; ++r) y[r] = dot(n_in, weights + static_cast<size_t>(r) * w_stride, act);
}

// q4_K, a few tokens (vec_dot numerics, as q4_K_batch_rows): the group kernel once per token, the
// rows read from memory for the first token and from L1 for the others.
// Up to this many tokens it beats the AVX2 q4_K_gemm (thread CPU time streaming the model's
// matrices, 1 thread: 2 tokens 56 vs 175 ms, 4: 106 vs 186, 8: 186 vs 217, 12: 251 vs 247,
// 16: 364 vs 300).
constexpr int64_t kQ4_KBatchMaxTokensAvx2 = 8;
void q4_K_batch_rows_avx2(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, size_t act_stride,
                          int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  const int64_t nsb = n_in / kQK_K;
  Q4_KActAvx2* a = thread_scratch<Q4_KActAvx2>(static_cast<size_t>(nsb * n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t)
    q4_K_prepare_avx2(reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride), nsb, a + t * nsb);
  const bool offsets_fit = w_stride <= static_cast<size_t>(INT32_MAX / kQ4_KRows);
  const int64_t grouped_end = offsets_fit ? row_begin + (row_end - row_begin) / kQ4_KRows * kQ4_KRows : row_begin;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ4_KRows) {
    const uint8_t* row0 = weights + static_cast<size_t>(r) * w_stride;
    for (int64_t t = 0; t < n_tokens; ++t) {
      q4_K_group_avx2(row0, w_stride, nsb, reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride),
                      a + t * nsb, y + t * y_stride + r);
    }
  }
  batch_rows_by_dot(GgmlType::Q4_K, weights, w_stride, n_in, act, act_stride, n_tokens, r, row_end, y, y_stride);
}

// q6_K: four rows per group, each with dot_q6_K's 8 float lanes; per group of 32 weights
// vpmaddubsw(quants, a) minus the token's precomputed vpmaddubsw(32, a) (the -32 offset), times the
// sub-block scales by vpmaddwd, exactly dot_q6_K's int32 lanes. Only for a few tokens: for one,
// the per-row dot streams the rows faster on Zen 3 (the decode matrices come from memory: per-row
// 6-7 GB/s against 5-6 for four rows at once, whatever the prefetch distance, 2-32 KB; from
// cache the group is 1.7x faster, 20.8 vs 12 GB/s), so gemv_available(Q6_K) is false at AVX2.
struct alignas(32) Q6_KActAvx2 {
  int16_t offset[8][16];  // vpmaddubsw(32, activations 32g .. 32g + 31)
  float d;
};

AGENTKV_AVX2 void q6_K_prepare_avx2(const BlockQ8_K* a, int64_t nsb, Q6_KActAvx2* out) {
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t s = 0; s < nsb; ++s) {
    for (int g = 0; g < 8; ++g) {
      const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[s].qs + 32 * g));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[s].offset[g]), _mm256_maddubs_epi16(offset, q8));
    }
    out[s].d = a[s].d;
  }
}

AGENTKV_AVX2_INLINE __m256i q6_K_row_sums_avx2(const BlockQ6_K& x, const BlockQ8_K& y, const Q6_KActAvx2& a) {
  // Scales as int16: [0-7 | 8-15]; half h of the superblock takes [8h .. 8h + 7] in both halves.
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
  __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i sc = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00) : _mm256_permute2x128_si256(sc16, sc16, 0x11);
    __m256i q[4];
    q6k_unpack_half(x.ql + 64 * h, x.qh + 32 * h, q);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      // Low 128 bits: scale 8h + 2k (element 2k of sc), high: 8h + 2k + 1.
      const __m256i pick = _mm256_setr_epi8(4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1,
                                            4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1,
                                            4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2,
                                            4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3,
                                            4 * k + 2, 4 * k + 3);
      const int g = 4 * h + k;
      const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 32 * g));
      const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], q8),
                                         _mm256_load_si256(reinterpret_cast<const __m256i*>(a.offset[g])));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sc, pick)));
    }
  }
  return isum;
}

AGENTKV_AVX2 void q6_K_group_avx2(const uint8_t* row0, size_t w_stride, int64_t nsb, const BlockQ8_K* y,
                                  const Q6_KActAvx2* a, const uint8_t* pf, float* out) {
  __m256 acc[kQ6_KRows];
  for (int i = 0; i < kQ6_KRows; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const size_t at = static_cast<size_t>(s) * sizeof(BlockQ6_K);
#pragma GCC unroll 4
    for (int i = 0; i < kQ6_KRows; ++i) {
      const uint8_t* p = pf + i * w_stride + at;
      prefetch(p);
      prefetch(p + 64);
      prefetch(p + 128);
      prefetch(p + 192);
      const auto& x = *reinterpret_cast<const BlockQ6_K*>(row0 + i * w_stride + at);
      const __m256i isum = q6_K_row_sums_avx2(x, y[s], a[s]);
      const __m256 d = _mm256_set1_ps(a[s].d * half_to_float(x.d));  // as dot_q6_K: y.d * fp16(x.d)
      acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[i]);
    }
  }
  for (int i = 0; i < kQ6_KRows; ++i) out[i] = hsum_ps(acc[i]);
}

// q6_K, one token, one row at a time (the 4-row group streamed slower than dot_q6_K here: four
// row streams at once), with the group kernel's per-call activation offsets and scale shuffles
// and the row stream prefetched kPrefetchBytes ahead. Same bits as dot_q6_K.
AGENTKV_AVX2 void q6_K_rows_avx2(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
                                 int64_t row_begin, int64_t row_end, float* y) {
  const int64_t nsb = n_in / kQK_K;
  Q6_KActAvx2* a = thread_scratch<Q6_KActAvx2>(static_cast<size_t>(nsb));
  const auto* q8 = reinterpret_cast<const BlockQ8_K*>(act);
  q6_K_prepare_avx2(q8, nsb, a);
  const int64_t ahead = rows_ahead(w_stride, 1);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = weights + static_cast<size_t>(r) * w_stride;
    const uint8_t* pf = prefetch_rows(weights, w_stride, r, ahead, row_end - 1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const size_t at = static_cast<size_t>(s) * sizeof(BlockQ6_K);
      prefetch(pf + at);
      prefetch(pf + at + 64);
      prefetch(pf + at + 128);
      prefetch(pf + at + 192);
      const auto& x = *reinterpret_cast<const BlockQ6_K*>(row + at);
      const __m256i isum = q6_K_row_sums_avx2(x, q8[s], a[s]);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(a[s].d * half_to_float(x.d)), _mm256_cvtepi32_ps(isum), acc);
    }
    y[r] = hsum_ps(acc);
  }
}

// q6_K, a few tokens: the group kernel once per token, as q4_K_batch_rows_avx2. Each token unpacks
// the rows again, so it beats the AVX2 q6_K_gemm only for 2-3 tokens (streaming the model's
// matrices, 1 thread: 2 tokens 140 vs 160 ms, 3: 175 vs 180, 4: 145 vs 163 wall but 140 vs 130 ms
// thread CPU, 8: 235 vs 177).
constexpr int64_t kQ6_KBatchMaxTokensAvx2 = 3;
void q6_K_batch_rows_avx2(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, size_t act_stride,
                          int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  const int64_t nsb = n_in / kQK_K;
  Q6_KActAvx2* a = thread_scratch<Q6_KActAvx2>(static_cast<size_t>(nsb * n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t)
    q6_K_prepare_avx2(reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride), nsb, a + t * nsb);
  const int64_t ahead = rows_ahead(w_stride, kQ6_KRows);
  const int64_t grouped_end = row_begin + (row_end - row_begin) / kQ6_KRows * kQ6_KRows;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kQ6_KRows) {
    const uint8_t* row0 = weights + static_cast<size_t>(r) * w_stride;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* pf = t == 0 ? prefetch_rows(weights, w_stride, r, ahead, grouped_end - kQ6_KRows) : row0;
      float out[kQ6_KRows];
      q6_K_group_avx2(row0, w_stride, nsb, reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride),
                      a + t * nsb, pf, out);
      for (int i = 0; i < kQ6_KRows; ++i) y[t * y_stride + r + i] = out[i];
    }
  }
  batch_rows_by_dot(GgmlType::Q6_K, weights, w_stride, n_in, act, act_stride, n_tokens, r, row_end, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// f16 (AVX2 level): each row in dot_f16's order (ggml_vec_dot_f16 on an AVX2 build: four 8-lane
// chains over 32-element steps, reduce_ggml_f32x8, the tail's products summed in double), with
// the activation row — f16, llama.cpp's vec_dot_type for f16 weights — widened to f32 once per
// call instead of once per row: an f16 value widens exactly, so the bits are dot_f16's, and a
// row step converts only its weights. The row stream is prefetched kPrefetchBytes ahead.
struct F16ActivationTag;

AGENTKV_AVX2 float f16_row_dot_avx2(const uint16_t* w, const float* a, int64_t n, const uint8_t* pf) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32) {
    prefetch(pf + 2 * i);  // one 64-byte line of the row `ahead` rows on per step
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256 wk = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i + 8 * k)));
      acc[k] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(a + i + 8 * k), acc[k]);
    }
  }
  double sum = reduce_ggml_f32x8(acc);
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(half_to_float(w[i]) * a[i]);
  return static_cast<float>(sum);
}

// The f16 activation widened to f32 once per call, for every row (exact: each f16 is an f32).
AGENTKV_AVX2 const float* widened_f16_activation(const uint8_t* act, int64_t n_in) {
  float* a = thread_scratch<float, F16ActivationTag>(static_cast<size_t>(n_in));
  const auto* a16 = reinterpret_cast<const uint16_t*>(act);
  int64_t i = 0;
  for (; i + 8 <= n_in; i += 8)
    _mm256_storeu_ps(a + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a16 + i))));
  for (; i < n_in; ++i) a[i] = half_to_float(a16[i]);
  return a;
}

AGENTKV_AVX2 void f16_rows_avx2(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
                                int64_t row_begin, int64_t row_end, float* y) {
  const float* a = widened_f16_activation(act, n_in);
  const int64_t ahead = rows_ahead(w_stride, 1);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = weights + static_cast<size_t>(r) * w_stride;
    y[r] = f16_row_dot_avx2(reinterpret_cast<const uint16_t*>(row), a, n_in,
                            prefetch_rows(weights, w_stride, r, ahead, row_end - 1));
  }
}

// f16 (AVX-512 level): each row in the AVX-512 dot_f16's order (ggml_vec_dot_f16 on an AVX-512
// build: four 16-lane chains over 64-element steps, combined (0 + 2) + (1 + 3), reduce_add, the
// tail's products summed in double), the activation widened to f32 once per call as at AVX2.
// `Rows` rows are read at once, interleaved (Intel's cores stream such groups faster than one
// row front to back; AMD's the other way round: interleaved_rows_stream_slowly), each with its
// own four chains, so every row's bits are dot_f16's.
template <int Rows>
AGENTKV_GEMV_INLINE void f16_group_avx512(const uint8_t* row0, size_t w_stride, const float* a, int64_t n,
                                          const uint8_t* pf, float* out) {
  __m512 acc[Rows][4];
  for (int r = 0; r < Rows; ++r)
    for (int k = 0; k < 4; ++k) acc[r][k] = _mm512_setzero_ps();
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64) {
    for (int r = 0; r < Rows; ++r) {  // the two 64-byte lines of each row's step, `ahead` rows on
      prefetch(pf + r * w_stride + 2 * i);
      prefetch(pf + r * w_stride + 2 * i + 64);
    }
    __m512 ak[4];
    for (int k = 0; k < 4; ++k) ak[k] = _mm512_loadu_ps(a + i + 16 * k);
#pragma GCC unroll 4
    for (int r = 0; r < Rows; ++r) {
      const auto* w = reinterpret_cast<const uint16_t*>(row0 + r * w_stride);
      for (int k = 0; k < 4; ++k)
        acc[r][k] = _mm512_fmadd_ps(
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 16 * k))), ak[k], acc[r][k]);
    }
  }
  for (int r = 0; r < Rows; ++r) {
    const auto* w = reinterpret_cast<const uint16_t*>(row0 + r * w_stride);
    const __m512 v = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][2]), _mm512_add_ps(acc[r][1], acc[r][3]));
    double sum = _mm512_reduce_add_ps(v);
    for (int64_t i = np; i < n; ++i) sum += static_cast<double>(half_to_float(w[i]) * a[i]);
    out[r] = static_cast<float>(sum);
  }
}

template <int Rows>
AGENTKV_AVX512_VNNI void f16_rows_avx512(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
                                         int64_t row_begin, int64_t row_end, float* y) {
  const float* a = widened_f16_activation(act, n_in);
  const int64_t grouped_end = row_begin + (row_end - row_begin) / Rows * Rows;
  const int64_t ahead = rows_ahead(w_stride, Rows);
  int64_t r = row_begin;
  for (; r < grouped_end; r += Rows)
    f16_group_avx512<Rows>(weights + static_cast<size_t>(r) * w_stride, w_stride, a, n_in,
                           prefetch_rows(weights, w_stride, r, ahead, grouped_end - Rows), y + r);
  for (; r < row_end; ++r)
    f16_group_avx512<1>(weights + static_cast<size_t>(r) * w_stride, w_stride, a, n_in,
                        weights + static_cast<size_t>(r) * w_stride, y + r);
}

// q8_0 (AVX2 level): each row in the AVX2 dot_q8_0's order (per block one FMA of
// fp16(w.d) * fp16(a.d) times the block's int32 lane sums into 8 lanes, then hsum_ps), `Rows` rows
// at once sharing the activation loads (one row at a time on AMD, as at AVX-512), the rows
// prefetched kPrefetchBytes ahead. Without it gpt-oss-bench's AVX2 decode spent 63 % in the per-row
// dot_q8_0 (its non-expert weights), 0.92-0.94 x llama.cpp on the Intel VM; with it 1.18-1.30 x.
template <int Rows>
AGENTKV_AVX2 void q8_0_rows_avx2(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
                                 int64_t row_begin, int64_t row_end, float* y) {
  const int64_t nb = n_in / kQK8_0;
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t grouped_end = row_begin + (row_end - row_begin) / Rows * Rows;
  const int64_t ahead = rows_ahead(w_stride, Rows);
  for (int64_t r0 = row_begin; r0 < row_end;) {
    const int rows = r0 < grouped_end ? Rows : 1;
    const uint8_t* row0 = weights + static_cast<size_t>(r0) * w_stride;
    const uint8_t* pf = r0 < grouped_end ? prefetch_rows(weights, w_stride, r0, ahead, grouped_end - Rows) : row0;
    __m256 acc[Rows];
    for (int r = 0; r < Rows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const size_t at = static_cast<size_t>(b) * sizeof(BlockQ8_0);
      if (b % 2 == 0)
        for (int r = 0; r < rows; ++r) prefetch(pf + r * w_stride + at);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
      const float ad = half_to_float(a[b].d);
      for (int r = 0; r < rows; ++r) {
        const auto* x = reinterpret_cast<const BlockQ8_0*>(row0 + r * w_stride) + b;
        const __m256 d = _mm256_set1_ps(half_to_float(x->d) * ad);
        const __m256i p = dot_s8s8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs)), q);
        acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
      }
    }
    for (int r = 0; r < rows; ++r) y[r0 + r] = hsum_ps(acc[r]);
    r0 += rows;
  }
}

// AMD's cores (Zen 4, 2-vCPU VM, 28 layers' matrices from DRAM) stream one row front to back at
// close to full speed and serve the VNNI groups' rows, read interleaved a stride apart, ~1.5 x
// slower (q8_0 two threads: 31.9 vs 20.9 GB/s; q6_K 27.3 vs 17.4); Intel's cores (the Xeon these
// kernels were built on) were the other way round (per-row 11.5 vs group 21.3 GB/s). On AMD one
// token takes vec_dot row by row for q8_0 / q6_K and the AVX2 address-order group for q4_K.
bool interleaved_rows_stream_slowly() { return cpu_features().amd; }

}  // namespace

bool gemv_available(GgmlType type) {
  if (avx512_vnni_active())
    return type == GgmlType::Q8_0 || type == GgmlType::Q4_K || type == GgmlType::Q6_K || type == GgmlType::F16;
  if (active_cpu_level() >= CpuLevel::Avx2) {
    // f16 and q6_K only at exactly the AVX2 level, whose dot_f16 / dot_q6_K they reproduce
    // (AVX-512's dot_f16 has 16-lane chains: f16_rows_avx512 above).
    const bool avx2 = active_cpu_level() == CpuLevel::Avx2;
    return type == GgmlType::Q4_K || ((type == GgmlType::Q6_K || type == GgmlType::F16 || type == GgmlType::Q8_0) && avx2);
  }
  return false;
}

bool gemv_preferred(GgmlType type) {
  if (avx512_vnni_active() && interleaved_rows_stream_slowly() && (type == GgmlType::Q8_0 || type == GgmlType::Q6_K))
    return false;
  return gemv_available(type);
}

int64_t gemv_row_grain(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return kQ8_0Rows;
    case GgmlType::Q4_K: return kQ4_KRows;
    case GgmlType::Q6_K: return kQ6_KRows;
    default: return 1;
  }
}

void gemv_rows(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
               int64_t row_begin, int64_t row_end, float* y) {
  const bool vnni = avx512_vnni_active();
  switch (type) {
    case GgmlType::Q8_0:
      if (vnni) return q8_0_rows(weights, w_stride, n_in, act, row_begin, row_end, y);
      if (active_cpu_level() != CpuLevel::Avx2) break;
      if (interleaved_rows_stream_slowly()) return q8_0_rows_avx2<1>(weights, w_stride, n_in, act, row_begin, row_end, y);
      return q8_0_rows_avx2<4>(weights, w_stride, n_in, act, row_begin, row_end, y);
    case GgmlType::Q4_K:
      // (the AVX2 group gives the same bits: both follow the AVX2 dot_q4_K)
      if (vnni && !interleaved_rows_stream_slowly()) return q4_K_rows(weights, w_stride, n_in, act, row_begin, row_end, y);
      if (active_cpu_level() >= CpuLevel::Avx2) return q4_K_rows_avx2(weights, w_stride, n_in, act, row_begin, row_end, y);
      break;
    case GgmlType::Q6_K:
      if (vnni) return q6_K_rows(weights, w_stride, n_in, act, row_begin, row_end, y);
      if (active_cpu_level() == CpuLevel::Avx2) return q6_K_rows_avx2(weights, w_stride, n_in, act, row_begin, row_end, y);
      break;
    case GgmlType::F16:
      if (vnni && interleaved_rows_stream_slowly()) return f16_rows_avx512<1>(weights, w_stride, n_in, act, row_begin, row_end, y);
      if (vnni) return f16_rows_avx512<4>(weights, w_stride, n_in, act, row_begin, row_end, y);
      if (active_cpu_level() == CpuLevel::Avx2) return f16_rows_avx2(weights, w_stride, n_in, act, row_begin, row_end, y);
      break;
    default:
      break;
  }
  const VecDotFn dot = vec_dot_fn(type);
  for (int64_t r = row_begin; r < row_end; ++r) y[r] = dot(n_in, weights + static_cast<size_t>(r) * w_stride, act);
}

int64_t gemv_batch_max_tokens(GgmlType type) {
  if (!avx512_vnni_active()) {
    if (active_cpu_level() < CpuLevel::Avx2) return 0;
    return type == GgmlType::Q4_K ? kQ4_KBatchMaxTokensAvx2 : type == GgmlType::Q6_K ? kQ6_KBatchMaxTokensAvx2 : 0;
  }
  switch (type) {
    case GgmlType::Q8_0: return kQ8_0BatchMaxTokens;
    case GgmlType::Q6_K: return kQ6_KBatchMaxTokens;
    case GgmlType::Q4_K: return kQ4_KBatchMaxTokens;
    default: return 0;
  }
}

void gemv_batch_rows(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
                     size_t act_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  if (type == GgmlType::Q8_0 && avx512_vnni_active()) {
    return q8_0_batch_rows(weights, w_stride, n_in, act, act_stride, n_tokens, row_begin, row_end, y, y_stride);
  }
  if (type == GgmlType::Q4_K && avx512_vnni_active()) {
    return q4_K_batch_rows(weights, w_stride, n_in, act, act_stride, n_tokens, row_begin, row_end, y, y_stride);
  }
  if (type == GgmlType::Q6_K && avx512_vnni_active()) {
    return q6_K_batch_rows(weights, w_stride, n_in, act, act_stride, n_tokens, row_begin, row_end, y, y_stride);
  }
  if (type == GgmlType::Q4_K && active_cpu_level() >= CpuLevel::Avx2) {
    return q4_K_batch_rows_avx2(weights, w_stride, n_in, act, act_stride, n_tokens, row_begin, row_end, y, y_stride);
  }
  if (type == GgmlType::Q6_K && active_cpu_level() >= CpuLevel::Avx2) {
    return q6_K_batch_rows_avx2(weights, w_stride, n_in, act, act_stride, n_tokens, row_begin, row_end, y, y_stride);
  }
  batch_rows_by_dot(type, weights, w_stride, n_in, act, act_stride, n_tokens, row_begin, row_end, y, y_stride);
}

#else
bool gemv_available(GgmlType) { return false; }
bool gemv_preferred(GgmlType) { return false; }
int64_t gemv_row_grain(GgmlType) { return 1; }
int64_t gemv_batch_max_tokens(GgmlType) { return 0; }
void gemv_batch_rows(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
                     size_t act_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  batch_rows_by_dot(type, weights, w_stride, n_in, act, act_stride, n_tokens, row_begin, row_end, y, y_stride);
}
void gemv_rows(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
               int64_t row_begin, int64_t row_end, float* y) {
  const VecDotFn dot = vec_dot_fn(type);
  for (int64_t r = row_begin; r < row_end; ++r) y[r] = dot(n_in, weights + static_cast<size_t>(r) * w_stride, act);
}
#endif

}  // namespace agentkv
