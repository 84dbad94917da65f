// q4_K GEMM with AVX-512 VNNI, or AVX2 without it (below), one weight row per 32-bit lane (16 rows
// per 512-bit register, 8 per 256-bit one), so every
// lane carries one output's scalar accumulators exactly as dot_q4_K / dot_q4_K_grouped do:
//   per superblock and 64-weight pair j: dot_j = sc[2j] * sum(lo quants * a) + sc[2j+1] * sum(hi * a)
//                                         min_j = m[2j] * bsum pair + m[2j+1] * bsum pair   (exact int32)
//   grouped (llama's repacked GEMM): acc = fma(dot_j, d, acc), acc_min = fma(min_j, dmin, acc_min) per j
//   GEMV: acc = fma(sum_j dot_j, d, acc), acc_min = fma(sum_j min_j, dmin, acc_min) per superblock
//   result acc - acc_min, with d = fp16(w.d) * a.d, dmin = fp16(w.dmin) * a.d.
// The weights are re-laid so that 4 consecutive quants of each of 16 rows fill one register and
// vpdpbusd multiplies them by 4 activation bytes broadcast to every lane.
#include "kernels/gemm_q4_K.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"
#include "kernels/thread_scratch.h"

// GCC 12 reports the undefined upper halves inside its own AVX-512 intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;

constexpr int kLanes = 16;      // weight rows per register
constexpr int kTileTokens = 4;  // = kRowGroupSize: a tile is all grouped or all GEMV tokens
static_assert(kTileTokens == kRowGroupSize);

// One superblock of 16 rows (rows past the matrix are zero).
struct alignas(64) PackedRows {
  uint8_t q[kQK_K / 4][4 * kLanes];  // chunk c: lane r holds row r's quants 4c .. 4c + 3 (0..15)
  int32_t scale[8][kLanes];          // sub-block scales
  int32_t mins[4][kLanes];           // pair j: m[2j] in the low 16 bits, m[2j + 1] in the high 16
  float d[kLanes];
  float dmin[kLanes];
};

// 16 x 16 transpose of 32-bit elements: out[c] lane r = rows[r] element c.
static inline __attribute__((target(AGENTKV_TARGET_AVX512), always_inline)) void transpose_16x16_epi32(
    const __m512i* rows, __m512i* out) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    out[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    out[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    out[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    out[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

constexpr int64_t kPackPrefetchBlocks = 2;  // superblocks ahead in each row while packing

// Scales, mins, d and dmin of rows [0, rows) of superblock s (shared by both packers).
AGENTKV_AVX2_INLINE void pack_scales(const uint8_t* w, size_t w_stride, int rows, int64_t s, int64_t nsb,
                                     PackedRows& p) {
  for (int r = 0; r < rows; ++r) {
    const BlockQ4_K& b = reinterpret_cast<const BlockQ4_K*>(w + r * w_stride)[s];
    if (s + kPackPrefetchBlocks < nsb) {  // 16 row streams at once: the hardware prefetchers lose them
      const char* ahead = reinterpret_cast<const char*>(&b + kPackPrefetchBlocks);
      for (size_t line = 0; line < sizeof(BlockQ4_K); line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    }
    uint8_t sc[8], mn[8];
    for (int k = 0; k < 8; ++k) {
      k4_scale_min(k, b.scales, &sc[k], &mn[k]);
      p.scale[k][r] = sc[k];
    }
    for (int j = 0; j < 4; ++j) p.mins[j][r] = mn[2 * j] | (mn[2 * j + 1] << 16);
    p.d[r] = half_to_float(b.d);
    p.dmin[r] = half_to_float(b.dmin);
  }
}

AGENTKV_AVX512_VNNI void pack_rows(const uint8_t* w, size_t w_stride, int rows, int64_t nsb, PackedRows* out) {
  // Per superblock: every row's quants in element order (pair j: the low nibbles of
  // qs[32j .. 32j + 31], then the high ones), 64 bytes per pair; the 16 rows' pair j is one
  // 16 x 16 transpose of 4-byte chunks (chunk c of all 16 rows in one line). A transpose in
  // registers instead of 64 gathers from a staging buffer: packing is most of a small batch's time.
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t s = 0; s < nsb; ++s) {
    PackedRows& p = out[s];
    std::memset(static_cast<void*>(&p), 0, sizeof(PackedRows));
    pack_scales(w, w_stride, rows, s, nsb, p);
    for (int j = 0; j < 4; ++j) {
      __m512i row_pair[kLanes], chunks[kLanes];
      for (int r = 0; r < kLanes; ++r) {
        if (r >= rows) {
          row_pair[r] = _mm512_setzero_si512();
          continue;
        }
        const BlockQ4_K& b = reinterpret_cast<const BlockQ4_K*>(w + r * w_stride)[s];
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * j));
        row_pair[r] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(bytes, low4)),
                                         _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), 1);
      }
      transpose_16x16_epi32(row_pair, chunks);
      for (int c = 0; c < kLanes; ++c) _mm512_store_si512(p.q[16 * j + c], chunks[c]);
    }
  }
}

// The two bsum sums of pair j as int16 halves (low: sub-block 2j, high: 2j + 1); each is a sum of
// 32 quants, |sum| <= 4096.
inline int32_t bsum_pair(const BlockQ8_K& a, int j) {
  const auto lo = static_cast<uint16_t>(a.bsums[4 * j] + a.bsums[4 * j + 1]);
  const auto hi = static_cast<uint16_t>(a.bsums[4 * j + 2] + a.bsums[4 * j + 3]);
  return static_cast<int32_t>(static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16));
}

template <int kTokens, bool kGrouped>
AGENTKV_AVX512_VNNI void tile_kernel(const PackedRows* w, int64_t nsb, const uint8_t* act, size_t act_stride, float* y,
                                   int64_t y_stride, int valid_rows) {
  __m512 acc[kTokens], acc_min[kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) acc[t] = acc_min[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const PackedRows& pw = w[s];
    const BlockQ8_K* a[kTokens];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride) + s;
    __m512i dot_sum[kTokens], min_sum[kTokens];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) dot_sum[t] = min_sum[t] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int j = 0; j < 4; ++j) {
      __m512i lo[kTokens], hi[kTokens];
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m512i w_lo = _mm512_load_si512(pw.q[16 * j + c]);
        const __m512i w_hi = _mm512_load_si512(pw.q[16 * j + 8 + c]);
#pragma GCC unroll 8
        for (int t = 0; t < kTokens; ++t) {
          int32_t a_lo, a_hi;
          std::memcpy(&a_lo, a[t]->qs + 64 * j + 4 * c, 4);
          std::memcpy(&a_hi, a[t]->qs + 64 * j + 32 + 4 * c, 4);
          lo[t] = _mm512_dpbusd_epi32(lo[t], w_lo, _mm512_set1_epi32(a_lo));
          hi[t] = _mm512_dpbusd_epi32(hi[t], w_hi, _mm512_set1_epi32(a_hi));
        }
      }
      const __m512i sc_lo = _mm512_load_si512(pw.scale[2 * j]);
      const __m512i sc_hi = _mm512_load_si512(pw.scale[2 * j + 1]);
      const __m512i mn = _mm512_load_si512(pw.mins[j]);
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const __m512i dot = _mm512_add_epi32(_mm512_mullo_epi32(lo[t], sc_lo), _mm512_mullo_epi32(hi[t], sc_hi));
        const __m512i min = _mm512_madd_epi16(mn, _mm512_set1_epi32(bsum_pair(*a[t], j)));
        if constexpr (kGrouped) {
          const __m512 ya = _mm512_set1_ps(a[t]->d);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(_mm512_load_ps(pw.d), ya), acc[t]);
          acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(min), _mm512_mul_ps(_mm512_load_ps(pw.dmin), ya), acc_min[t]);
        } else {
          dot_sum[t] = _mm512_add_epi32(dot_sum[t], dot);
          min_sum[t] = _mm512_add_epi32(min_sum[t], min);
        }
      }
    }
    if constexpr (!kGrouped) {
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const __m512 ya = _mm512_set1_ps(a[t]->d);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_sum[t]), _mm512_mul_ps(_mm512_load_ps(pw.d), ya), acc[t]);
        acc_min[t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(min_sum[t]), _mm512_mul_ps(_mm512_load_ps(pw.dmin), ya), acc_min[t]);
      }
    }
  }
  const __mmask16 keep = static_cast<__mmask16>(valid_rows >= kLanes ? 0xFFFF : (1u << valid_rows) - 1);
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) _mm512_mask_storeu_ps(y + t * y_stride, keep, _mm512_sub_ps(acc[t], acc_min[t]));
}

using TileKernel = void (*)(const PackedRows*, int64_t, const uint8_t*, size_t, float*, int64_t, int);

TileKernel kernel_for(int tokens, bool grouped) {
  if (grouped) return tile_kernel<4, true>;
  switch (tokens) {
    case 1: return tile_kernel<1, false>;
    case 2: return tile_kernel<2, false>;
    case 3: return tile_kernel<3, false>;
    default: return tile_kernel<4, false>;
  }
}

// ---- AVX2 (no VNNI): the same packed layout, read as two 8-row halves (bytes 0-31 and 32-63 of
// each chunk line), one row per 32-bit lane of a 256-bit register. vpmaddubsw multiplies a chunk
// (4 quants of 8 rows) by 4 activation bytes broadcast to every lane into two int16 pair sums per
// row; the 8 chunks of a sub-block add up in int16 (16 products of 0..15 by -128..127 per lane,
// |sum| <= 30720: no saturation), then vpmaddwd by the sub-block scale (both halves of the lane)
// gives the lane's exact int32 scaled sum, as vpdpbusd + vpmulld do above.

// 8 x 8 transpose of 32-bit elements: out[c] lane r = rows[r] element c.
AGENTKV_AVX2_INLINE void transpose_8x8_epi32(const __m256i* rows, __m256i* out) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  // u[4i + k], 128-bit lane L: column 4L + k of rows 4i .. 4i + 3
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
    out[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
  }
}

AGENTKV_AVX2 void pack_rows_avx2(const uint8_t* w, size_t w_stride, int rows, int64_t nsb, PackedRows* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t s = 0; s < nsb; ++s) {
    PackedRows& p = out[s];
    std::memset(static_cast<void*>(&p), 0, sizeof(PackedRows));
    pack_scales(w, w_stride, rows, s, nsb, p);
    for (int half = 0; half * 8 < rows; ++half) {
      for (int j = 0; j < 4; ++j) {
        __m256i lo[8], hi[8], chunks[8];
        for (int r = 0; r < 8; ++r) {
          const int row = 8 * half + r;
          if (row >= rows) {
            lo[r] = hi[r] = _mm256_setzero_si256();
            continue;
          }
          const BlockQ4_K& b = reinterpret_cast<const BlockQ4_K*>(w + row * w_stride)[s];
          const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * j));
          lo[r] = _mm256_and_si256(bytes, low4);
          hi[r] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
        }
        transpose_8x8_epi32(lo, chunks);
        for (int c = 0; c < 8; ++c) _mm256_store_si256(reinterpret_cast<__m256i*>(p.q[16 * j + c] + 32 * half), chunks[c]);
        transpose_8x8_epi32(hi, chunks);
        for (int c = 0; c < 8; ++c)
          _mm256_store_si256(reinterpret_cast<__m256i*>(p.q[16 * j + 8 + c] + 32 * half), chunks[c]);
      }
    }
  }
}

// The int32 scaled sums of sub-block 2j + h of the 16 rows (two halves of 8 lanes) for each token.
template <int kTokens>
AGENTKV_AVX2_INLINE void sub_block_dots(const PackedRows& pw, int j, int h, const BlockQ8_K* const* a,
                                        __m256i (*dot)[kTokens]) {
  __m256i part[2][kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) part[0][t] = part[1][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pw.q[16 * j + 8 * h + c]));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pw.q[16 * j + 8 * h + c] + 32));
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      int32_t av;
      std::memcpy(&av, a[t]->qs + 64 * j + 32 * h + 4 * c, 4);
      const __m256i a4 = _mm256_set1_epi32(av);
      part[0][t] = _mm256_add_epi16(part[0][t], _mm256_maddubs_epi16(w0, a4));
      part[1][t] = _mm256_add_epi16(part[1][t], _mm256_maddubs_epi16(w1, a4));
      // Keeps the running sums: GCC otherwise re-associates them into trees of all 8 products, spilled.
      __asm__("" : "+x"(part[0][t]), "+x"(part[1][t]));
    }
  }
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half) {
    const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(pw.scale[2 * j + h] + 8 * half));
    const __m256i sc_both = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));  // the scale in both int16 halves
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) dot[half][t] = _mm256_madd_epi16(part[half][t], sc_both);
  }
}

// 16 rows (two 8-lane halves) x kTokens tokens.
template <int kTokens, bool kGrouped>
AGENTKV_AVX2 void tile_kernel_avx2(const PackedRows* w, int64_t nsb, const uint8_t* act, size_t act_stride, float* y,
                                   int64_t y_stride, int valid_rows) {
  __m256 acc[2][kTokens], acc_min[2][kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) acc[0][t] = acc[1][t] = acc_min[0][t] = acc_min[1][t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const PackedRows& pw = w[s];
    const BlockQ8_K* a[kTokens];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride) + s;
    __m256i dot_sum[2][kTokens], min_sum[2][kTokens];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t)
      dot_sum[0][t] = dot_sum[1][t] = min_sum[0][t] = min_sum[1][t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int j = 0; j < 4; ++j) {
      __m256i lo[2][kTokens], hi[2][kTokens];
      sub_block_dots<kTokens>(pw, j, 0, a, lo);
      sub_block_dots<kTokens>(pw, j, 1, a, hi);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m256i mn = _mm256_load_si256(reinterpret_cast<const __m256i*>(pw.mins[j] + 8 * half));
#pragma GCC unroll 8
        for (int t = 0; t < kTokens; ++t) {
          const __m256i dot = _mm256_add_epi32(lo[half][t], hi[half][t]);
          const __m256i min = _mm256_madd_epi16(mn, _mm256_set1_epi32(bsum_pair(*a[t], j)));
          if constexpr (kGrouped) {
            const __m256 ya = _mm256_set1_ps(a[t]->d);
            acc[half][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(_mm256_load_ps(pw.d + 8 * half), ya),
                                           acc[half][t]);
            acc_min[half][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min),
                                               _mm256_mul_ps(_mm256_load_ps(pw.dmin + 8 * half), ya), acc_min[half][t]);
          } else {
            dot_sum[half][t] = _mm256_add_epi32(dot_sum[half][t], dot);
            min_sum[half][t] = _mm256_add_epi32(min_sum[half][t], min);
          }
        }
      }
    }
    if constexpr (!kGrouped) {
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
#pragma GCC unroll 8
        for (int t = 0; t < kTokens; ++t) {
          const __m256 ya = _mm256_set1_ps(a[t]->d);
          acc[half][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_sum[half][t]),
                                         _mm256_mul_ps(_mm256_load_ps(pw.d + 8 * half), ya), acc[half][t]);
          acc_min[half][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum[half][t]),
                                             _mm256_mul_ps(_mm256_load_ps(pw.dmin + 8 * half), ya), acc_min[half][t]);
        }
      }
    }
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half) {
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid_rows - 8 * half), lane);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t)
      _mm256_maskstore_ps(y + t * y_stride + 8 * half, keep, _mm256_sub_ps(acc[half][t], acc_min[half][t]));
  }
}

// Two tokens per tile: 16 rows x 2 tokens keep the int16 sums and the weight loads in registers;
// a grouped tile is half a row group (the grouped order is per token).
constexpr int kTileTokensAvx2 = 2;
// AVX2: tokens per block that meets one row group after another while the group's packed weights
// stay in L1 (rows of up to kL1Supers superblocks, 20 KB a group; with longer rows, read from L2
// anyway, the plain order, every token tile over the chunk, measured ~6 % faster).
constexpr int64_t kBlockTokensAvx2 = 32;
constexpr int64_t kL1Supers = 4;
static_assert(kTileTokens % kTileTokensAvx2 == 0);

TileKernel avx2_kernel_for(int tokens, bool grouped) {
  if (grouped) return tile_kernel_avx2<2, true>;
  return tokens == 1 ? tile_kernel_avx2<1, false> : tile_kernel_avx2<2, false>;
}

}  // namespace

bool q4_K_gemm_available() { return avx512_vnni_active() || active_cpu_level() >= CpuLevel::Avx2; }

void q4_K_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
               size_t act_stride, int64_t n_tokens, int64_t n_grouped, float* y, int64_t y_stride,
               ThreadPool& pool) {
  const int64_t nsb = n_in / kQK_K;
  const bool vnni = avx512_vnni_active();  // otherwise the AVX2 kernels
  // A chunk of row groups (~256 KiB packed) meets every token tile while it is in cache.
  const int64_t chunk_groups = std::max<int64_t>(1, 256 * 1024 / (nsb * static_cast<int64_t>(sizeof(PackedRows))));
  pool.parallel_chunks(
      n_out, balanced_chunk(n_out, kLanes, pool.size(), chunk_groups),
      [&](int64_t row_begin, int64_t row_end) {
        PackedRows* packed = thread_scratch<PackedRows>(static_cast<size_t>(chunk_groups * nsb));
        for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk_groups * kLanes) {
          const int64_t c1 = std::min(c0 + chunk_groups * kLanes, row_end);
          const int64_t groups = (c1 - c0 + kLanes - 1) / kLanes;
          for (int64_t g = 0; g < groups; ++g) {
            const int rows = static_cast<int>(std::min<int64_t>(kLanes, c1 - c0 - g * kLanes));
            (vnni ? pack_rows : pack_rows_avx2)(weights + (c0 + g * kLanes) * w_stride, w_stride, rows, nsb,
                                                packed + g * nsb);
          }
          const int tile_tokens = vnni ? kTileTokens : kTileTokensAvx2;
          const auto run_tile = [&](int64_t g, int64_t t0, int64_t t_end) {
            const int rows = static_cast<int>(std::min<int64_t>(kLanes, c1 - c0 - g * kLanes));
            const int tokens = static_cast<int>(std::min<int64_t>(tile_tokens, t_end - t0));
            const TileKernel kernel = vnni ? kernel_for(tokens, t0 < n_grouped) : avx2_kernel_for(tokens, t0 < n_grouped);
            kernel(packed + g * nsb, nsb, act + t0 * act_stride, act_stride, y + t0 * y_stride + c0 + g * kLanes,
                   y_stride, rows);
          };
          if (!vnni && nsb <= kL1Supers) {
            // AVX2, short rows: a block of tokens meets each row group in turn, the group's packed
            // weights read from L1 by all the block's tiles (1024-wide rows: ~59 -> ~64 GMAC/s).
            for (int64_t b0 = 0; b0 < n_tokens; b0 += kBlockTokensAvx2) {
              const int64_t b1 = std::min(b0 + kBlockTokensAvx2, n_tokens);
              for (int64_t g = 0; g < groups; ++g)
                for (int64_t t0 = b0; t0 < b1; t0 += tile_tokens) run_tile(g, t0, b1);
            }
          } else {
            for (int64_t t0 = 0; t0 < n_tokens; t0 += tile_tokens)
              for (int64_t g = 0; g < groups; ++g) run_tile(g, t0, n_tokens);
          }
        }
      });
}

#else
bool q4_K_gemm_available() { return false; }
void q4_K_gemm(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, int64_t, float*, int64_t,
               ThreadPool&) {}
#endif

}  // namespace agentkv
