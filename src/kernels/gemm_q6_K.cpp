// q6_K GEMM with AVX-512 VNNI, and with AVX2 without it (one (row, token) per register, below). Numerics per (row, token), identical to dot_q6_K:
//   lane[m] = sum over the superblock's 32-weight groups g of
//             scale[2g + m / 4] * sum_{k<4} q[32g + 4m + k] * a[32g + 4m + k]      (exact int32)
//   acc[m] = fma(a.d * fp16(w.d), float(lane[m]), acc[m]) superblock after superblock, then hsum.
// The quants are stored unsigned (q + 32, 0..63), which is what vpdpbusd wants; each group's
// accumulator starts at -32 * sum(a) per lane (precomputed when activations are packed), so the
// group sums are the signed ones exactly. |group sum| <= 4 * 32 * 128 < 2^15, so a 16-bit
// multiply-add with the scale in the low half of each lane is the exact scaled product.
#include "kernels/gemm_q6_K.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"
#include "kernels/thread_scratch.h"
#include "kernels/token_pairs.h"

// GCC 12 reports the undefined upper halves inside its own AVX-512 intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;

constexpr int kGroups = kQK_K / 32;  // 32-weight groups per superblock

// One q8_K superblock of two consecutive tokens: per group, token 2p's 32 quants in bytes 0..31
// and token 2p + 1's in 32..63 (zeros when the token count is odd).
struct alignas(64) PackedPairSuper {
  struct Group {
    int8_t qs[64];
    int32_t bias[16];  // -32 * (sum of the 4 activations in this lane): undoes the weight offset
  } group[kGroups];
  float d[16];  // the token's q8_K scale, repeated over its 8 lanes
};

constexpr int kTileRows = 4;
constexpr int kTilePairs = 4;

void pack_token(const BlockQ8_K* blocks, int64_t nsb, int half, PackedPairSuper* out) {
  for (int64_t s = 0; s < nsb; ++s) {
    for (int g = 0; g < kGroups; ++g) {
      auto& grp = out[s].group[g];
      const int8_t* q = blocks[s].qs + 32 * g;
      std::memcpy(grp.qs + 32 * half, q, 32);
      for (int l = 0; l < 8; ++l) grp.bias[8 * half + l] = -32 * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
    }
    for (int l = 0; l < 8; ++l) out[s].d[8 * half + l] = blocks[s].d;
  }
}

void clear_half(int64_t nsb, int half, PackedPairSuper* out) {
  for (int64_t s = 0; s < nsb; ++s) {
    for (auto& grp : out[s].group) {
      std::memset(grp.qs + 32 * half, 0, 32);
      for (int l = 0; l < 8; ++l) grp.bias[8 * half + l] = 0;
    }
    for (int l = 0; l < 8; ++l) out[s].d[8 * half + l] = 0.f;
  }
}

// Weight rows re-laid for the kernels: per superblock 256 unsigned quants in element order, per
// group the 8 lane scales of one 256-bit half, and the float d. A lane's scale is in its low 16
// bits with the high 16 zero (the VNNI kernel's 16-bit multiply-add of int32 lane sums), or in
// both halves (the AVX2 kernel's of int16 pair sums).
AGENTKV_AVX2 void pack_weight_rows(const uint8_t* w, size_t w_stride, int64_t rows, int64_t nsb, bool scale_in_both_halves,
                                   uint8_t* q, int32_t* sc, float* d) {
  // Lanes 0-3 take the group's first 16-weight scale, lanes 4-7 the second.
  const __m256i lane_to_scale = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  for (int64_t i = 0; i < rows; ++i) {
    const auto* blocks = reinterpret_cast<const BlockQ6_K*>(w + i * w_stride);
    for (int64_t s = 0; s < nsb; ++s) {
      const BlockQ6_K& b = blocks[s];
      auto* out = reinterpret_cast<__m256i*>(q + (i * nsb + s) * kQK_K);
      for (int h = 0; h < 2; ++h) {
        __m256i unpacked[4];
        q6k_unpack_half(b.ql + 64 * h, b.qh + 32 * h, unpacked);
        for (int k = 0; k < 4; ++k) _mm256_store_si256(out + 4 * h + k, unpacked[k]);
      }
      int32_t* lanes = sc + (i * nsb + s) * kGroups * 8;
      for (int g = 0; g < kGroups; ++g) {
        const uint32_t lo = static_cast<uint16_t>(b.scales[2 * g]), hi = static_cast<uint16_t>(b.scales[2 * g + 1]);
        const uint32_t both = scale_in_both_halves ? 0x10001u : 1u;
        const __m256i pair = _mm256_set_epi32(0, 0, 0, 0, 0, 0, static_cast<int>(hi * both), static_cast<int>(lo * both));
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8 * g), _mm256_permutevar8x32_epi32(pair, lane_to_scale));
      }
      d[i * nsb + s] = half_to_float(b.d);
    }
  }
}

// kRows x kPairs outputs over superblocks [s0, s1); accumulators parked in state between calls
// (as in gemm_q8_0.cpp), reduced into y after the last superblock.
template <int kRows, int kPairs>
AGENTKV_AVX512_VNNI void tile_kernel(const uint8_t* w_q, const int32_t* w_sc, const float* w_d,
                                   const PackedPairSuper* packed, int64_t nsb, int64_t s0, int64_t s1, float* state,
                                   float* y, int64_t y_stride, int64_t token0, int64_t n_tokens) {
  __m512 acc[kRows][kPairs];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < kPairs; ++p)
      acc[r][p] = s0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(state + 16 * (r * kPairs + p));
  for (int64_t s = s0; s < s1; ++s) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* wq = w_q + (r * nsb + s) * kQK_K;
      const int32_t* wsc = w_sc + (r * nsb + s) * kGroups * 8;
      __m512i isum[kPairs];
#pragma GCC unroll 8
      for (int p = 0; p < kPairs; ++p) isum[p] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < kGroups; ++g) {
        const __m512i wv = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(wq + 32 * g)));
        const __m512i sv = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(wsc + 8 * g)));
#pragma GCC unroll 8
        for (int p = 0; p < kPairs; ++p) {
          const auto& grp = packed[p * nsb + s].group[g];
          const __m512i t = _mm512_dpbusd_epi32(_mm512_load_si512(grp.bias), wv, _mm512_load_si512(grp.qs));
          isum[p] = _mm512_add_epi32(isum[p], _mm512_madd_epi16(t, sv));
        }
      }
      const __m512 w_scale = _mm512_set1_ps(w_d[r * nsb + s]);
#pragma GCC unroll 8
      for (int p = 0; p < kPairs; ++p) {
        const __m512 d = _mm512_mul_ps(_mm512_load_ps(packed[p * nsb + s].d), w_scale);  // = a.d * fp16(w.d)
        acc[r][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum[p]), acc[r][p]);
      }
    }
  }
  if (s1 < nsb) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
      for (int p = 0; p < kPairs; ++p) _mm512_store_ps(state + 16 * (r * kPairs + p), acc[r][p]);
    return;
  }
#pragma GCC unroll 8
  for (int p = 0; p < kPairs; ++p) {
    const int64_t t = token0 + 2 * p;
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      y[t * y_stride + r] = hsum_ps(_mm512_castps512_ps256(acc[r][p]));
      if (t + 1 < n_tokens) y[(t + 1) * y_stride + r] = hsum_ps(_mm512_extractf32x8_ps(acc[r][p], 1));
    }
  }
}

using TileKernel = void (*)(const uint8_t*, const int32_t*, const float*, const PackedPairSuper*, int64_t, int64_t,
                            int64_t, float*, float*, int64_t, int64_t, int64_t);

template <int kRows, int... kPairs>
constexpr std::array<TileKernel, sizeof...(kPairs)> kernels_for_rows(std::integer_sequence<int, kPairs...>) {
  return {tile_kernel<kRows, kPairs + 1>...};
}
template <int... kRows>
constexpr auto kernel_table(std::integer_sequence<int, kRows...>) {
  return std::array{kernels_for_rows<kRows + 1>(std::make_integer_sequence<int, kTilePairs>())...};
}
constexpr auto kKernels = kernel_table(std::make_integer_sequence<int, kTileRows>());

// ---- AVX2 (no VNNI): dot_q6_K's lanes with one (row, token) per 256-bit register. Per group,
// vpmaddubsw of the unsigned quants and the activations gives int16 pair sums (|sum| <= 2 * 63 *
// 128), minus the token's precomputed vpmaddubsw(32, a) (the -32 offset, as dot_q6_K subtracts
// it), then vpmaddwd by the sub-block scale: the exact int32 lanes of dot_q6_K.
struct alignas(32) TokenOffsets {
  int16_t offset[kGroups][16];  // vpmaddubsw(32, group's activations)
  float d;
};

AGENTKV_AVX2 void prepare_token(const BlockQ8_K* blocks, int64_t nsb, TokenOffsets* out) {
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t s = 0; s < nsb; ++s) {
    for (int g = 0; g < kGroups; ++g) {
      const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[s].qs + 32 * g));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[s].offset[g]), _mm256_maddubs_epi16(offset, q8));
    }
    out[s].d = blocks[s].d;
  }
}

// rows x kTokens outputs (rows <= kTileRows) over all superblocks; the rows take turns per
// superblock, so a tile's activations are read from L1 once per row.
template <int kTokens>
AGENTKV_AVX2 void tile_kernel_avx2(const uint8_t* w_q, const int32_t* w_sc, const float* w_d, int rows,
                                   const uint8_t* act, size_t act_stride, const TokenOffsets* offsets, int64_t nsb,
                                   float* y, int64_t y_stride) {
  __m256 acc[kTileRows][kTokens];
  for (int r = 0; r < kTileRows; ++r)
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const BlockQ8_K* a[kTokens];
    const TokenOffsets* o[kTokens];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride) + s;
      o[t] = offsets + t * nsb + s;
    }
    for (int r = 0; r < rows; ++r) {
      const uint8_t* wq = w_q + (r * nsb + s) * kQK_K;
      const int32_t* wsc = w_sc + (r * nsb + s) * kGroups * 8;
      __m256i isum[kTokens];
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) isum[t] = _mm256_setzero_si256();
      // Not unrolled: unrolled, GCC hoists every activation load out of the row loop into stack copies.
#pragma GCC unroll 1
      for (int g = 0; g < kGroups; ++g) {
        const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq + 32 * g));
        const __m256i sv = _mm256_load_si256(reinterpret_cast<const __m256i*>(wsc + 8 * g));
#pragma GCC unroll 8
        for (int t = 0; t < kTokens; ++t) {
          const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t]->qs + 32 * g));
          const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(wv, q8),
                                             _mm256_load_si256(reinterpret_cast<const __m256i*>(o[t]->offset[g])));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sv));
        }
      }
      const __m256 w_scale = _mm256_set1_ps(w_d[r * nsb + s]);
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(o[t]->d), w_scale);  // = a.d * fp16(w.d)
        acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum[t]), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) y[t * y_stride + r] = hsum_ps(acc[r][t]);
}

using TileKernelAvx2 = void (*)(const uint8_t*, const int32_t*, const float*, int, const uint8_t*, size_t,
                                const TokenOffsets*, int64_t, float*, int64_t);
constexpr int kTileTokensAvx2 = 4;
constexpr TileKernelAvx2 kKernelsAvx2[kTileTokensAvx2] = {tile_kernel_avx2<1>, tile_kernel_avx2<2>, tile_kernel_avx2<3>,
                                                           tile_kernel_avx2<4>};

// A worker's packed chunk of weight rows (quants, scales, d).
struct WeightChunkTag;

size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

bool q6_K_gemm_available() { return avx512_vnni_active() || active_cpu_level() >= CpuLevel::Avx2; }

namespace {

void q6_K_gemm_avx2(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                    size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  const int64_t nsb = n_in / kQK_K;
  TokenOffsets* offsets = thread_scratch<TokenOffsets>(static_cast<size_t>(n_tokens * nsb));
  pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      prepare_token(reinterpret_cast<const BlockQ8_K*>(act + t * act_stride), nsb, offsets + t * nsb);
  });
  // A packed chunk of rows (~256 KiB) meets every token tile, as in the VNNI kernel below.
  const int64_t packed_row_bytes = nsb * (kQK_K + kGroups * 8 * 4 + 4);
  const int64_t chunk_rows =
      std::max<int64_t>(kTileRows, (256 * 1024 / packed_row_bytes) / kTileRows * kTileRows);
  pool.parallel_chunks(
      n_out, balanced_chunk(n_out, kTileRows, pool.size(), chunk_rows / kTileRows),
      [&](int64_t row_begin, int64_t row_end) {
        const size_t q_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb * kQK_K));
        const size_t sc_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb * kGroups * 8) * sizeof(int32_t));
        const size_t d_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb) * sizeof(float));
        uint8_t* scratch = thread_scratch_lines<WeightChunkTag>(q_bytes + sc_bytes + d_bytes);
        uint8_t* w_q = scratch;
        auto* w_sc = reinterpret_cast<int32_t*>(scratch + q_bytes);
        auto* w_d = reinterpret_cast<float*>(scratch + q_bytes + sc_bytes);
        for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk_rows) {
          const int64_t c1 = std::min(c0 + chunk_rows, row_end);
          pack_weight_rows(weights + c0 * w_stride, w_stride, c1 - c0, nsb, true, w_q, w_sc, w_d);
          for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileTokensAvx2) {
            const int tokens = static_cast<int>(std::min<int64_t>(kTileTokensAvx2, n_tokens - t0));
            for (int64_t r0 = c0; r0 < c1; r0 += kTileRows) {
              const int rows = static_cast<int>(std::min<int64_t>(kTileRows, c1 - r0));
              const int64_t i = r0 - c0;
              kKernelsAvx2[tokens - 1](w_q + i * nsb * kQK_K, w_sc + i * nsb * kGroups * 8, w_d + i * nsb, rows,
                                       act + t0 * act_stride, act_stride, offsets + t0 * nsb, nsb,
                                       y + t0 * y_stride + r0, y_stride);
            }
          }
        }
      });
}

}  // namespace

void q6_K_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
               size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  if (!avx512_vnni_active()) return q6_K_gemm_avx2(weights, w_stride, n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool);
  const int64_t nsb = n_in / kQK_K;
  const int64_t n_pairs = (n_tokens + 1) / 2;
  PackedPairSuper* packed = thread_scratch<PackedPairSuper>(static_cast<size_t>(n_pairs * nsb));
  pack_token_pairs(
      pool, n_tokens,
      [&](int64_t t, int half, int64_t p) {
        pack_token(reinterpret_cast<const BlockQ8_K*>(act + t * act_stride), nsb, half, packed + p * nsb);
      },
      [&](int half, int64_t p) { clear_half(nsb, half, packed + p * nsb); });

  // As in gemm_q8_0.cpp: a packed chunk of rows (~256 KiB) meets every token tile; per token tile
  // the chunk is walked in steps of a few superblocks so the step's packed activations stay in L1.
  constexpr int64_t kStepSupers = 4;
  const int64_t packed_row_bytes = nsb * (kQK_K + kGroups * 8 * 4 + 4);
  const int64_t chunk_rows =
      std::max<int64_t>(kTileRows, (256 * 1024 / packed_row_bytes) / kTileRows * kTileRows);
  const int64_t step = nsb <= kStepSupers * 3 / 2 ? nsb : kStepSupers;
  pool.parallel_chunks(
      n_out, balanced_chunk(n_out, kTileRows, pool.size(), chunk_rows / kTileRows),
      [&](int64_t row_begin, int64_t row_end) {
        const size_t q_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb * kQK_K));
        const size_t sc_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb * kGroups * 8) * sizeof(int32_t));
        const size_t d_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb) * sizeof(float));
        const size_t state_bytes = static_cast<size_t>(chunk_rows / kTileRows * kTileRows * kTilePairs * 16) * sizeof(float);
        uint8_t* scratch = thread_scratch_lines<WeightChunkTag>(q_bytes + sc_bytes + d_bytes + state_bytes);
        uint8_t* w_q = scratch;
        auto* w_sc = reinterpret_cast<int32_t*>(scratch + q_bytes);
        auto* w_d = reinterpret_cast<float*>(scratch + q_bytes + sc_bytes);
        auto* state = reinterpret_cast<float*>(scratch + q_bytes + sc_bytes + d_bytes);
        for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk_rows) {
          const int64_t c1 = std::min(c0 + chunk_rows, row_end);
          pack_weight_rows(weights + c0 * w_stride, w_stride, c1 - c0, nsb, false, w_q, w_sc, w_d);
          for (int64_t p0 = 0; p0 < n_pairs; p0 += kTilePairs) {
            const int pairs = static_cast<int>(std::min<int64_t>(kTilePairs, n_pairs - p0));
            for (int64_t s0 = 0; s0 < nsb; s0 += step) {
              const int64_t s1 = std::min(s0 + step, nsb);
              for (int64_t r0 = c0; r0 < c1; r0 += kTileRows) {
                const int rows = static_cast<int>(std::min<int64_t>(kTileRows, c1 - r0));
                const int64_t i = r0 - c0;
                kKernels[rows - 1][pairs - 1](w_q + i * nsb * kQK_K, w_sc + i * nsb * kGroups * 8, w_d + i * nsb,
                                              packed + p0 * nsb, nsb, s0, s1,
                                              state + i / kTileRows * kTileRows * kTilePairs * 16, y + r0, y_stride,
                                              2 * p0, n_tokens);
              }
            }
          }
        }
      });
}

#else
bool q6_K_gemm_available() { return false; }
void q6_K_gemm(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t, ThreadPool&) {}
#endif

}  // namespace agentkv
