// F16 / F32 batched matmul in llamafile tinyBLAS's float order for the active CPU level (see
// gemm_float.h): tinyBLAS<16, __m512> at the AVX-512 level, tinyBLAS<8, __m256> at the AVX2 level
// and, in portable code, at the scalar level. Built for baseline x86-64 like the other kernels: the
// SIMD code carries its own target attributes and runs only at its level.
//
// Each thread takes a run of output rows. It widens a panel of those rows to f32 once, packed so
// the register tile reads one contiguous stream, then passes every token over the panel in tiles
// of 4 rows x 6 tokens. The f16 -> f32 conversion is thus paid once per weight, not once per
// token tile, and the inner loop is loads and fused multiply-adds only. The order of the float
// operations is unchanged: one 16-lane chain per output over increasing k, then the reduction of
// _mm512_reduce_add_ps, done for four outputs at once (the same additions, in the same pairs).
#include "kernels/gemm_float.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "agentkv/numerics.h"

#if defined(__x86_64__) || defined(__i386__)
#define AGENTKV_GEMM_FLOAT_X86 1
#include <immintrin.h>
#endif

// GCC 12 reports the undefined upper halves inside its own f16 conversion intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv {
namespace {

constexpr int kTileRows = 4;     // weight rows per register tile (tinyBLAS's RM)
constexpr int kTileTokens = 6;   // tokens per register tile: 24 accumulators + 4 + 1 live zmm
constexpr int64_t kStep = 16;    // elements per fused multiply-add (one zmm of floats)
constexpr size_t kPanelBytes = 768 * 1024;  // widened weight panel, kept in L2 while tokens pass
constexpr size_t kAvx2PanelBytes = 320 * 1024;  // the AVX2 level's panel: Zen 3 has 512 KiB of L2 per core
constexpr int64_t kPrefetchAhead = 384;      // floats (6 steps) of the panel stream asked of L1 ahead
constexpr int64_t kMaxKBlock = 1024;        // k elements per block: a 6-token block is 24 KiB of L1

// Weight rows per widened panel of panel_bytes: whole register tiles, at least one.
int64_t panel_rows_of(size_t panel_bytes, int64_t n_in) {
  const int64_t fit = static_cast<int64_t>(panel_bytes / (static_cast<size_t>(n_in) * sizeof(float)));
  return std::max<int64_t>(kTileRows, fit / kTileRows * kTileRows);
}

// A thread's scratch buffer of at least n floats, 64-byte aligned: a zmm load that straddles two
// cache lines costs two.
float* aligned_scratch(std::vector<float>& scratch, size_t n) {
  if (scratch.size() < n + kStep) scratch.resize(n + kStep);
  const uintptr_t at = reinterpret_cast<uintptr_t>(scratch.data());
  return scratch.data() + ((64 - at % 64) % 64) / sizeof(float);
}

#ifdef AGENTKV_GEMM_FLOAT_X86
#define AGENTKV_GEMM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define AGENTKV_GEMM_AVX512_INLINE \
  static inline __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"), always_inline))

AGENTKV_GEMM_AVX512_INLINE __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
AGENTKV_GEMM_AVX512_INLINE __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// _mm512_reduce_add_ps of four accumulators at once, result lane i from acc_i. Per accumulator
// the same additions as the single reduction: upper 256 + lower 256 bits, then upper 128 + lower
// 128, then (v0 + v2) + (v1 + v3); float addition commutes, so operand order within a pair is free.
AGENTKV_GEMM_AVX512_INLINE __m128 reduce_add_4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  // 128-bit chunks c0..c3 of each accumulator: two accumulators' (c2 + c0, c3 + c1) per register.
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)),
                                   _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)),
                                   _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)));
  // chunk i = (c3 + c1) + (c2 + c0) of accumulator i
  const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)),
                                 _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)));
  const __m512 pairs = _mm512_add_ps(q, _mm512_permute_ps(q, _MM_SHUFFLE(1, 0, 3, 2)));       // v0+v2, v1+v3
  const __m512 sums = _mm512_add_ps(pairs, _mm512_permute_ps(pairs, _MM_SHUFFLE(2, 3, 0, 1)));  // lane 0 of chunk
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12), sums));
}

// Outputs rows [r, r + 4) x tokens [t, t + RN) over k in [k0, k0 + k_len). `panel`: the 4 rows
// widened and interleaved, 4 x 16 floats per step of k, from k0 on; b: the tokens from k0 on.
// A k block that is not the first resumes the accumulators parked in `park` by the one before;
// only the last block reduces them into y. Parking does not round: the chains are unchanged.
template <int RN>
AGENTKV_GEMM_AVX512_INLINE void tile(const float* panel, const float* b, int64_t b_stride, int64_t k_len,
                                     float* park, bool first, bool last, float* y, int64_t y_stride) {
  // Fully unrolled (the pragmas: -O2 does not unroll these by itself) so the RN x 4 accumulators
  // stay in registers.
  __m512 acc[RN][kTileRows];
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i)
      acc[j][i] = first ? _mm512_setzero_ps() : _mm512_load_ps(park + (j * kTileRows + i) * kStep);
  for (int64_t l = 0; l < k_len; l += kStep, panel += kTileRows * kStep) {
    __m512 a[kTileRows];
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i) a[i] = _mm512_load_ps(panel + i * kStep);
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i) _mm_prefetch(reinterpret_cast<const char*>(panel + kPrefetchAhead + i * kStep), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) {
      const __m512 bv = _mm512_loadu_ps(b + j * b_stride + l);
#pragma GCC unroll 4
      for (int i = 0; i < kTileRows; ++i) acc[j][i] = _mm512_fmadd_ps(a[i], bv, acc[j][i]);
    }
  }
  if (last) {
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j)
      _mm_storeu_ps(y + j * y_stride, reduce_add_4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]));
  } else {
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
      for (int i = 0; i < kTileRows; ++i) _mm512_store_ps(park + (j * kTileRows + i) * kStep, acc[j][i]);
  }
}

// Tokens [t, t + RN) against the n_rows widened rows of `panel`: k in blocks of k_block, so the
// tokens' block stays in L1 while the panel streams past; between blocks every 4-row tile parks
// its accumulators in `park` (n_rows / 4 x RN x 4 x 16 floats).
template <int RN>
AGENTKV_GEMM_AVX512 void token_tile(const float* panel, int64_t n_rows, int64_t n_in, int64_t k_block,
                                    const float* b, int64_t b_stride, float* park, float* y, int64_t y_stride) {
  for (int64_t k0 = 0; k0 < n_in; k0 += k_block) {
    const int64_t k_len = std::min(k_block, n_in - k0);
    const bool first = k0 == 0, last = k0 + k_len == n_in;
    for (int64_t r = 0; r < n_rows; r += kTileRows) {
      tile<RN>(panel + r * n_in + k0 * kTileRows, b + k0, b_stride, k_len, park + r * RN * kStep, first, last,
               y + r, y_stride);
    }
  }
}

// Widens rows [0, n_rows) (a multiple of 4) of w into `panel`: per group of 4 rows, per 16-element
// step of k, the 4 rows' 16 values one after the other.
template <class WeightT>
AGENTKV_GEMM_AVX512 void widen_panel(const WeightT* w, int64_t w_stride, int64_t n_rows, int64_t n_in, float* panel) {
  for (int64_t r = 0; r < n_rows; r += kTileRows)
    for (int64_t l = 0; l < n_in; l += kStep)
      for (int i = 0; i < kTileRows; ++i, panel += kStep) _mm512_storeu_ps(panel, load16(w + (r + i) * w_stride + l));
}

float* panel_scratch(size_t n) {
  thread_local std::vector<float> scratch;
  return aligned_scratch(scratch, n);
}

float* park_scratch(size_t n) {
  thread_local std::vector<float> scratch;
  return aligned_scratch(scratch, n);
}

// Weight rows [row_begin, row_end) (multiples of 4) against every token.
template <class WeightT>
AGENTKV_GEMM_AVX512 void rows_avx512(const WeightT* w, int64_t w_stride, const float* b, int64_t b_stride,
                                     int64_t n_tokens, int64_t n_in, float* y, int64_t y_stride,
                                     int64_t row_begin, int64_t row_end) {
  const int64_t panel_rows = panel_rows_of(kPanelBytes, n_in);
  float* panel = panel_scratch(static_cast<size_t>(panel_rows * n_in));
  // Equal k blocks of at most kMaxKBlock elements (whole 16-element steps).
  const int64_t n_blocks = (n_in + kMaxKBlock - 1) / kMaxKBlock;
  const int64_t k_block = (n_in / kStep + n_blocks - 1) / n_blocks * kStep;
  float* park = park_scratch(static_cast<size_t>(panel_rows * kTileTokens * kStep));
  for (int64_t r0 = row_begin; r0 < row_end; r0 += panel_rows) {
    const int64_t n_rows = std::min(panel_rows, row_end - r0);
    widen_panel(w + r0 * w_stride, w_stride, n_rows, n_in, panel);
    for (int64_t t = 0, n_tile = 0; t < n_tokens; t += n_tile) {
      // The last 7 or 8 tokens go as two tiles of 4 and 3 or 4 rather than 6 and a thin 1 or 2.
      const int64_t left = n_tokens - t;
      n_tile = left == kTileTokens + 1 || left == kTileTokens + 2 ? 4 : std::min<int64_t>(kTileTokens, left);
      const float* bt = b + t * b_stride;
      float* yt = y + t * y_stride + r0;
      switch (n_tile) {
        case 6: token_tile<6>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        case 5: token_tile<5>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        case 4: token_tile<4>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        case 3: token_tile<3>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        case 2: token_tile<2>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        default: token_tile<1>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
      }
    }
  }
}

// dst = float(f16(src)): ggml converts the activations of an F16 product to f16 (round to
// nearest even); widening back is exact, so the kernel can read floats.
AGENTKV_GEMM_AVX512 void round_through_f16(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += kStep) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
}

// ---- AVX2 (+FMA, F16C): llamafile tinyBLAS<8, __m256>'s order ----
// One 8-lane fused chain per output over increasing k in 8-element steps, then tinyBLAS's hsum of
// a __m256: upper 128 + lower 128 bits, then (v0 + v2) + (v1 + v3). The layout mirrors the AVX-512
// kernel: per thread a panel of its rows widened to f32 once per call (kAvx2TileRows rows
// interleaved per 8-element step, 128 bytes), tiles of 4 rows x up to 3 tokens (12 ymm
// accumulators + 4 row vectors; the token vectors come as memory operands: 4 x 3 measured
// 52 -> 59 GFLOP/s on one Zen 3 core against 2 x 6), k cut into blocks with the accumulators
// parked between them (no rounding change).
#define AGENTKV_GEMM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AGENTKV_GEMM_AVX2_INLINE static inline __attribute__((target("avx2,fma,f16c"), always_inline))

constexpr int kAvx2TileRows = 4;
constexpr int kAvx2TileTokens = 3;
constexpr int64_t kAvx2Step = 8;
constexpr int64_t kAvx2PrefetchAhead = 256;        // floats of the panel stream (16 steps)
constexpr int64_t kAvx2MaxKBlock = 1024;           // 6 tokens x 1024 floats = 24 KiB of L1

AGENTKV_GEMM_AVX2_INLINE __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
AGENTKV_GEMM_AVX2_INLINE __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// tinyBLAS's hsum(__m256): upper 128 + lower 128 bits, then (v0 + v2) + (v1 + v3).
AGENTKV_GEMM_AVX2_INLINE float hsum_1(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Outputs rows [r, r + kAvx2TileRows) x tokens [t, t + RN) over k in [k0, k0 + k_len); as tile<RN>.
template <int RN>
AGENTKV_GEMM_AVX2_INLINE void tile_avx2(const float* panel, const float* b, int64_t b_stride, int64_t k_len,
                                        float* park, bool first, bool last, float* y, int64_t y_stride) {
  constexpr int RM = kAvx2TileRows;
  __m256 acc[RN][RM];
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < RM; ++i)
      acc[j][i] = first ? _mm256_setzero_ps() : _mm256_load_ps(park + (j * RM + i) * kAvx2Step);
  for (int64_t l = 0; l < k_len; l += kAvx2Step, panel += RM * kAvx2Step) {
    __m256 a[RM];
#pragma GCC unroll 4
    for (int i = 0; i < RM; ++i) a[i] = _mm256_load_ps(panel + i * kAvx2Step);
    _mm_prefetch(reinterpret_cast<const char*>(panel + kAvx2PrefetchAhead), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) {
      const __m256 bv = _mm256_load_ps(b + j * b_stride + l);
#pragma GCC unroll 4
      for (int i = 0; i < RM; ++i) acc[j][i] = _mm256_fmadd_ps(a[i], bv, acc[j][i]);
    }
  }
  if (last) {
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
      for (int i = 0; i < RM; ++i) y[j * y_stride + i] = hsum_1(acc[j][i]);
  } else {
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
      for (int i = 0; i < RM; ++i) _mm256_store_ps(park + (j * RM + i) * kAvx2Step, acc[j][i]);
  }
}

template <int RN>
AGENTKV_GEMM_AVX2 void token_tile_avx2(const float* panel, int64_t n_rows, int64_t n_in, int64_t k_block,
                                       const float* b, int64_t b_stride, float* park, float* y, int64_t y_stride) {
  for (int64_t k0 = 0; k0 < n_in; k0 += k_block) {
    const int64_t k_len = std::min(k_block, n_in - k0);
    const bool first = k0 == 0, last = k0 + k_len == n_in;
    for (int64_t r = 0; r < n_rows; r += kAvx2TileRows) {
      tile_avx2<RN>(panel + r * n_in + k0 * kAvx2TileRows, b + k0, b_stride, k_len, park + r * RN * kAvx2Step, first,
                    last, y + r, y_stride);
    }
  }
}

template <class WeightT>
AGENTKV_GEMM_AVX2 void widen_panel_avx2(const WeightT* w, int64_t w_stride, int64_t n_rows, int64_t n_in, float* panel) {
  for (int64_t r = 0; r < n_rows; r += kAvx2TileRows)
    for (int64_t l = 0; l < n_in; l += kAvx2Step)
      for (int i = 0; i < kAvx2TileRows; ++i, panel += kAvx2Step)
        _mm256_store_ps(panel, load8(w + (r + i) * w_stride + l));
}

template <class WeightT>
AGENTKV_GEMM_AVX2 void rows_avx2(const WeightT* w, int64_t w_stride, const float* b, int64_t b_stride,
                                 int64_t n_tokens, int64_t n_in, float* y, int64_t y_stride, int64_t row_begin,
                                 int64_t row_end) {
  const int64_t panel_rows = panel_rows_of(kAvx2PanelBytes, n_in);
  float* panel = panel_scratch(static_cast<size_t>(panel_rows * n_in));
  const int64_t n_blocks = (n_in + kAvx2MaxKBlock - 1) / kAvx2MaxKBlock;
  const int64_t k_block = (n_in / kAvx2Step + n_blocks - 1) / n_blocks * kAvx2Step;
  float* park = park_scratch(static_cast<size_t>(panel_rows * kAvx2TileTokens * kAvx2Step));
  for (int64_t r0 = row_begin; r0 < row_end; r0 += panel_rows) {
    const int64_t n_rows = std::min(panel_rows, row_end - r0);
    widen_panel_avx2(w + r0 * w_stride, w_stride, n_rows, n_in, panel);
    for (int64_t t = 0, n_tile = 0; t < n_tokens; t += n_tile) {
      const int64_t left = n_tokens - t;
      n_tile = std::min<int64_t>(kAvx2TileTokens, left);
      const float* bt = b + t * b_stride;
      float* yt = y + t * y_stride + r0;
      switch (n_tile) {
        case 6: token_tile_avx2<6>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        case 5: token_tile_avx2<5>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        case 4: token_tile_avx2<4>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        case 3: token_tile_avx2<3>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        case 2: token_tile_avx2<2>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
        default: token_tile_avx2<1>(panel, n_rows, n_in, k_block, bt, b_stride, park, yt, y_stride); break;
      }
    }
  }
}

AGENTKV_GEMM_AVX2 void round_through_f16_avx2(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += kAvx2Step) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
}
#endif  // AGENTKV_GEMM_FLOAT_X86

float* activation_copy(size_t n) {
  thread_local std::vector<float> scratch;
  return aligned_scratch(scratch, n);
}


// The scalar level runs the AVX2 level's order (tinyBLAS<8>) in portable code, so it gives the same
// bits and is held to the same llama.cpp reference: per output 8 lanes, lane l summing elements
// l, l + 8, ... by fused steps, then upper 4 + lower 4, then (0 + 2) + (1 + 3).
void rows_scalar(const WeightMatrix& w, size_t row_bytes, const float* b, int64_t b_stride, int64_t n_tokens,
                 float* y, int64_t y_stride, int64_t row_begin, int64_t row_end) {
  const int64_t n_in = w.n_in;
  thread_local std::vector<float> widened;
  if (widened.size() < static_cast<size_t>(n_in)) widened.resize(n_in);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * row_bytes;
    if (w.type == GgmlType::F16) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < n_in; ++i) widened[i] = fp16_to_fp32(h[i]);
    } else {
      std::copy_n(reinterpret_cast<const float*>(row), n_in, widened.data());
    }
    // F16 weights meet activations rounded to f16: their products are exact in float, so the
    // fused step is a plain multiply and add (vectorisable); F32 rows need the real fma.
    const bool exact_products = w.type == GgmlType::F16;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* x = b + t * b_stride;
      float lanes[8] = {};
      if (exact_products) {
        for (int64_t i = 0; i < n_in; i += 8)
          for (int l = 0; l < 8; ++l) lanes[l] += widened[i + l] * x[i + l];
      } else {
        for (int64_t i = 0; i < n_in; i += 8)
          for (int l = 0; l < 8; ++l) lanes[l] = std::fma(widened[i + l], x[i + l], lanes[l]);
      }
      float h[4];
      for (int l = 0; l < 4; ++l) h[l] = lanes[l + 4] + lanes[l];
      y[t * y_stride + r] = (h[0] + h[2]) + (h[1] + h[3]);
    }
  }
}

// Row length each level's tinyBLAS takes: a whole number of vector steps.
int64_t tinyblas_step(CpuLevel level) { return level == CpuLevel::Avx512 ? kStep : 8; }

}  // namespace

bool float_gemm_applies(const WeightMatrix& w, int64_t n_tokens) {
#ifdef AGENTKV_GEMM_FLOAT_X86
  return (w.type == GgmlType::F16 || w.type == GgmlType::F32) && (n_tokens >= 2 || (n_tokens == 1 && batch_invariant())) && w.n_out % kTileRows == 0 &&
         w.n_in % tinyblas_step(active_cpu_level()) == 0;
#else
  // Without the x86 kernels only the portable loop (the AVX2 order) exists.
  return (w.type == GgmlType::F16 || w.type == GgmlType::F32) && (n_tokens >= 2 || (n_tokens == 1 && batch_invariant())) && w.n_out % kTileRows == 0 &&
         w.n_in % 8 == 0;
#endif
}

void float_gemm(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
                int64_t y_stride, ThreadPool& pool) {
  if (!float_gemm_applies(w, n_tokens)) {
    throw Error("float_gemm: weight " + std::string(ggml_type_name(w.type)) + " [" + std::to_string(w.n_in) + " x " +
                std::to_string(w.n_out) + "] with " + std::to_string(n_tokens) + " tokens is not a tinyBLAS shape");
  }
  const int64_t n_in = w.n_in;
#ifdef AGENTKV_GEMM_FLOAT_X86
  const CpuLevel level = active_cpu_level();
#else
  const CpuLevel level = CpuLevel::Scalar;
#endif
  // The kernel reads the activations from an aligned copy: rounded through f16 for F16 weights.
  float* b = activation_copy(static_cast<size_t>(n_tokens * n_in));
  const int64_t b_stride = n_in;
  const bool round = w.type == GgmlType::F16;
  pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (!round) {
        std::copy_n(x + t * x_stride, n_in, b + t * b_stride);
        continue;
      }
#ifdef AGENTKV_GEMM_FLOAT_X86
      if (level == CpuLevel::Avx512) {
        round_through_f16(x + t * x_stride, b + t * b_stride, n_in);
        continue;
      }
      if (level == CpuLevel::Avx2) {
        round_through_f16_avx2(x + t * x_stride, b + t * b_stride, n_in);
        continue;
      }
#endif
      for (int64_t i = 0; i < n_in; ++i) b[t * b_stride + i] = fp16_to_fp32(fp32_to_fp16(x[t * x_stride + i]));
    }
  });
  const size_t row_bytes = w.row_bytes != 0 ? w.row_bytes : ggml_row_size(w.type, n_in);
  const int64_t n_quads = w.n_out / kTileRows;
  // A chunk is at most one widened panel of rows (rows_* widen each panel once).
  const int64_t panel_quads = panel_rows_of(level == CpuLevel::Avx512 ? kPanelBytes : kAvx2PanelBytes, n_in) / kTileRows;
  pool.parallel_chunks(n_quads, balanced_chunk(n_quads, 1, pool.size(), panel_quads), [&](int64_t q0, int64_t q1) {
    const int64_t r0 = q0 * kTileRows, r1 = q1 * kTileRows;
#ifdef AGENTKV_GEMM_FLOAT_X86
    const auto* h = reinterpret_cast<const uint16_t*>(w.data);
    const auto* f = reinterpret_cast<const float*>(w.data);
    const int64_t h_stride = static_cast<int64_t>(row_bytes / sizeof(uint16_t));
    const int64_t f_stride = static_cast<int64_t>(row_bytes / sizeof(float));
    if (level == CpuLevel::Avx512) {
      if (w.type == GgmlType::F16) {
        rows_avx512(h, h_stride, b, b_stride, n_tokens, n_in, y, y_stride, r0, r1);
      } else {
        rows_avx512(f, f_stride, b, b_stride, n_tokens, n_in, y, y_stride, r0, r1);
      }
      return;
    }
    if (level == CpuLevel::Avx2) {
      if (w.type == GgmlType::F16) {
        rows_avx2(h, h_stride, b, b_stride, n_tokens, n_in, y, y_stride, r0, r1);
      } else {
        rows_avx2(f, f_stride, b, b_stride, n_tokens, n_in, y, y_stride, r0, r1);
      }
      return;
    }
#endif
    rows_scalar(w, row_bytes, b, b_stride, n_tokens, y, y_stride, r0, r1);
  });
}

}  // namespace agentkv
