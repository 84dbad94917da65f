// The GEMMs shared by the superblock weight types whose dot products with q8_K activations are
// "per 32-weight group, 8 exact int32 lane sums (lane l = elements 4l..4l+3) times the group's
// integer scale, summed over the superblock; then one FMA per superblock into 8 float lanes; then
// hsum" (q6_K, the i-quants). Each type packs its weight rows (256 bytes per superblock, 8 int32 lane
// scales per group, a float d). AVX-512 VNNI (gemm): the quants stored unsigned (q + offset), two
// tokens share a 512-bit register, each group's accumulator starts at -offset * sum(a) per lane, so
// vpdpbusd yields the signed group sums exactly. AVX2 (gemm_avx2): one (row, token) per register,
// the type's group arithmetic as a policy. Included by gemm_q6_K.cpp and gemm_iq.cpp only.
#pragma once
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"
#include "kernels/thread_scratch.h"
#include "kernels/threadpool.h"
#include "kernels/token_pairs.h"

// GCC 12 reports the undefined upper halves inside its own AVX-512 intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#ifdef AGENTKV_HAVE_X86_SIMD
namespace agentkv::q8_K_pairs {

constexpr int kGroups = kQK_K / 32;  // 32-weight groups per superblock
constexpr int kTileRows = 4;
constexpr int kTilePairs = 4;

// How a group's int32 lane sums meet the lane scales.
enum class LaneScale {
  Madd16,   // |group sum| < 2^15: vpmaddwd with the scale in each lane's low 16 bits (high 16 zero)
  Mullo32,  // wider sums: vpmulld with the scale as an int32
};

// One q8_K superblock of two consecutive tokens: per group, token 2p's 32 quants in bytes 0..31
// and token 2p + 1's in 32..63 (zeros when the token count is odd).
struct alignas(64) PackedPairSuper {
  struct Group {
    int8_t qs[64];
    int32_t bias[16];  // -offset * (sum of the 4 activations in this lane): undoes the weight offset
  } group[kGroups];
  float d[16];  // the token's q8_K scale, repeated over its 8 lanes
};

inline void pack_token(const BlockQ8_K* blocks, int64_t nsb, int half, int offset, PackedPairSuper* out) {
  for (int64_t s = 0; s < nsb; ++s) {
    for (int g = 0; g < kGroups; ++g) {
      auto& grp = out[s].group[g];
      const int8_t* q = blocks[s].qs + 32 * g;
      std::memcpy(grp.qs + 32 * half, q, 32);
      for (int l = 0; l < 8; ++l) grp.bias[8 * half + l] = -offset * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
    }
    for (int l = 0; l < 8; ++l) out[s].d[8 * half + l] = blocks[s].d;
  }
}

inline void clear_half(int64_t nsb, int half, PackedPairSuper* out) {
  for (int64_t s = 0; s < nsb; ++s) {
    for (auto& grp : out[s].group) {
      std::memset(grp.qs + 32 * half, 0, 32);
      for (int l = 0; l < 8; ++l) grp.bias[8 * half + l] = 0;
    }
    for (int l = 0; l < 8; ++l) out[s].d[8 * half + l] = 0.f;
  }
}

inline size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }

// Packed weights: per row and superblock kQK_K unsigned quants, kGroups x 8 int32 lane scales,
// one float d.
constexpr int64_t packed_bytes_per_superblock() { return kQK_K + kGroups * 8 * 4 + 4; }

// Rows are split across the pool in chunks of ~256 KiB of packed weights (a multiple of the tile).
inline int64_t chunk_rows_for(int64_t nsb) {
  return std::max<int64_t>(kTileRows, (256 * 1024 / (nsb * packed_bytes_per_superblock())) / kTileRows * kTileRows);
}

// A worker's packed chunk: quants, lane scales, d, then `extra_bytes` (64-byte aligned each).
struct PackedChunk {
  uint8_t* q;
  int32_t* sc;
  float* d;
  uint8_t* extra;
};
template <class Tag>
PackedChunk packed_chunk_scratch(int64_t chunk_rows, int64_t nsb, size_t extra_bytes) {
  const size_t q_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb * kQK_K));
  const size_t sc_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb * kGroups * 8) * sizeof(int32_t));
  const size_t d_bytes = round_up_64(static_cast<size_t>(chunk_rows * nsb) * sizeof(float));
  uint8_t* scratch = thread_scratch_lines<Tag>(q_bytes + sc_bytes + d_bytes + extra_bytes);
  return {scratch, reinterpret_cast<int32_t*>(scratch + q_bytes), reinterpret_cast<float*>(scratch + q_bytes + sc_bytes),
          scratch + q_bytes + sc_bytes + d_bytes};
}

// The AVX2-level drivers' loop (one (row, token) per register, no pairs): rows split across the
// pool in packed chunks; each chunk packed once (pack_rows as for gemm below), then every token
// tile passes over it: tile(q, sc, d, rows, r0, t0, tokens) for tile_rows x up to tile_tokens
// outputs starting at row r0 (q, sc, d: that row's packed data) and token t0.
template <class Tag, class PackRows, class Tile>
void for_each_row_tile(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t nsb, int64_t n_tokens,
                       int tile_tokens, ThreadPool& pool, const PackRows& pack_rows, const Tile& tile) {
  const int64_t chunk_rows = chunk_rows_for(nsb);
  pool.parallel_chunks(
      n_out, balanced_chunk(n_out, kTileRows, pool.size(), chunk_rows / kTileRows),
      [&](int64_t row_begin, int64_t row_end) {
        const PackedChunk c = packed_chunk_scratch<Tag>(chunk_rows, nsb, 0);
        for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk_rows) {
          const int64_t c1 = std::min(c0 + chunk_rows, row_end);
          pack_rows(weights + c0 * w_stride, w_stride, c1 - c0, nsb, c.q, c.sc, c.d);
          for (int64_t t0 = 0; t0 < n_tokens; t0 += tile_tokens) {
            const int tokens = static_cast<int>(std::min<int64_t>(tile_tokens, n_tokens - t0));
            for (int64_t r0 = c0; r0 < c1; r0 += kTileRows) {
              const int rows = static_cast<int>(std::min<int64_t>(kTileRows, c1 - r0));
              const int64_t i = r0 - c0;
              tile(c.q + i * nsb * kQK_K, c.sc + i * nsb * kGroups * 8, c.d + i * nsb, rows, r0, t0, tokens);
            }
          }
        }
      });
}

// The AVX2-level tile kernel (no VNNI): rows x kTokens outputs (rows <= kTileRows) over all
// superblocks, one (row, token) per 256-bit register; the rows take turns per superblock, so a
// tile's activations are read from L1 once per row. Group is the type's group arithmetic:
//   Group::Weights Group::load(const uint8_t* group_quants)   (once per row and group)
//   __m256i Group::pairs(const Weights&, __m256i q8, const int16_t* token_offset)
// giving the int16 pair sums that vpmaddwd with the lane scales turns into the dot's exact lanes.
// offsets: the Group's per-token data, kGroups x 16 int16 per superblock and token (nullptr when
// the Group needs none).
template <class Group, int kTokens>
AGENTKV_AVX2 void tile_kernel_avx2(const uint8_t* w_q, const int32_t* w_sc, const float* w_d, int rows,
                                   const uint8_t* act, size_t act_stride, const int16_t* offsets, int64_t nsb,
                                   float* y, int64_t y_stride) {
  using namespace quant_detail::x86;
  __m256 acc[kTileRows][kTokens];
  for (int r = 0; r < kTileRows; ++r)
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const BlockQ8_K* a[kTokens];
    const int16_t* o[kTokens];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      a[t] = reinterpret_cast<const BlockQ8_K*>(act + t * act_stride) + s;
      o[t] = offsets ? offsets + (t * nsb + s) * kGroups * 16 : nullptr;
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
        const typename Group::Weights wv = Group::load(wq + 32 * g);
        const __m256i sv = _mm256_load_si256(reinterpret_cast<const __m256i*>(wsc + 8 * g));
#pragma GCC unroll 8
        for (int t = 0; t < kTokens; ++t) {
          const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t]->qs + 32 * g));
          const __m256i p = Group::pairs(wv, q8, o[t] ? o[t] + 16 * g : nullptr);
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sv));
        }
      }
      const __m256 w_scale = _mm256_set1_ps(w_d[r * nsb + s]);
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(a[t]->d), w_scale);  // = a.d * fp16(w.d)
        acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum[t]), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) y[t * y_stride + r] = hsum_ps(acc[r][t]);
}

// The whole AVX2-level GEMM over Group's tile kernels, 4 tokens per tile (for_each_row_tile).
template <class Group, class Tag, class PackRows>
void gemm_avx2(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t nsb, const uint8_t* act, size_t act_stride,
               int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool, const int16_t* offsets,
               const PackRows& pack_rows) {
  using Kernel = void (*)(const uint8_t*, const int32_t*, const float*, int, const uint8_t*, size_t, const int16_t*,
                          int64_t, float*, int64_t);
  static constexpr Kernel kKernels[] = {tile_kernel_avx2<Group, 1>, tile_kernel_avx2<Group, 2>,
                                        tile_kernel_avx2<Group, 3>, tile_kernel_avx2<Group, 4>};
  for_each_row_tile<Tag>(
      weights, w_stride, n_out, nsb, n_tokens, 4, pool, pack_rows,
      [&](const uint8_t* q, const int32_t* sc, const float* d, int rows, int64_t r0, int64_t t0, int tokens) {
        kKernels[tokens - 1](q, sc, d, rows, act + t0 * act_stride, act_stride,
                             offsets ? offsets + t0 * nsb * kGroups * 16 : nullptr, nsb, y + t0 * y_stride + r0, y_stride);
      });
}

// kRows x kPairs outputs over superblocks [s0, s1); accumulators parked in state between calls
// (as in gemm_q8_0.cpp), reduced into y after the last superblock.
template <LaneScale kScale, int kRows, int kPairs>
AGENTKV_AVX512_VNNI void tile_kernel(const uint8_t* w_q, const int32_t* w_sc, const float* w_d,
                                     const PackedPairSuper* packed, int64_t nsb, int64_t s0, int64_t s1, float* state,
                                     float* y, int64_t y_stride, int64_t token0, int64_t n_tokens) {
  using namespace quant_detail::x86;
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
          const __m512i scaled = kScale == LaneScale::Madd16 ? _mm512_madd_epi16(t, sv) : _mm512_mullo_epi32(t, sv);
          isum[p] = _mm512_add_epi32(isum[p], scaled);
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

template <LaneScale kScale, int kRows, int... kPairs>
constexpr std::array<TileKernel, sizeof...(kPairs)> kernels_for_rows(std::integer_sequence<int, kPairs...>) {
  return {tile_kernel<kScale, kRows, kPairs + 1>...};
}
template <LaneScale kScale, int... kRows>
constexpr auto kernel_table(std::integer_sequence<int, kRows...>) {
  return std::array{kernels_for_rows<kScale, kRows + 1>(std::make_integer_sequence<int, kTilePairs>())...};
}

// The whole GEMM: y[t * y_stride + r] for r < n_out, t < n_tokens. pack_rows(w, w_stride, rows,
// nsb, q, sc, d) writes a chunk's packed weights; `offset` is what it added to each quant.
template <LaneScale kScale, class Tag, class PackRows>
void gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act, size_t act_stride,
          int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool, int offset, const PackRows& pack_rows) {
  static constexpr auto kKernels = kernel_table<kScale>(std::make_integer_sequence<int, kTileRows>());
  const int64_t nsb = n_in / kQK_K;
  const int64_t n_pairs = (n_tokens + 1) / 2;
  PackedPairSuper* packed = thread_scratch<PackedPairSuper, Tag>(static_cast<size_t>(n_pairs * nsb));
  pack_token_pairs(
      pool, n_tokens,
      [&](int64_t t, int half, int64_t p) {
        pack_token(reinterpret_cast<const BlockQ8_K*>(act + t * act_stride), nsb, half, offset, packed + p * nsb);
      },
      [&](int half, int64_t p) { clear_half(nsb, half, packed + p * nsb); });

  // As in gemm_q8_0.cpp: a packed chunk of rows meets every token tile; per token tile the chunk
  // is walked in steps of a few superblocks so the step's packed activations stay in L1.
  constexpr int64_t kStepSupers = 4;
  const int64_t chunk_rows = chunk_rows_for(nsb);
  const int64_t step = nsb <= kStepSupers * 3 / 2 ? nsb : kStepSupers;
  pool.parallel_chunks(
      n_out, balanced_chunk(n_out, kTileRows, pool.size(), chunk_rows / kTileRows),
      [&](int64_t row_begin, int64_t row_end) {
        const size_t state_bytes = static_cast<size_t>(chunk_rows / kTileRows * kTileRows * kTilePairs * 16) * sizeof(float);
        const PackedChunk c = packed_chunk_scratch<Tag>(chunk_rows, nsb, state_bytes);
        auto* state = reinterpret_cast<float*>(c.extra);
        for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk_rows) {
          const int64_t c1 = std::min(c0 + chunk_rows, row_end);
          pack_rows(weights + c0 * w_stride, w_stride, c1 - c0, nsb, c.q, c.sc, c.d);
          for (int64_t p0 = 0; p0 < n_pairs; p0 += kTilePairs) {
            const int pairs = static_cast<int>(std::min<int64_t>(kTilePairs, n_pairs - p0));
            for (int64_t s0 = 0; s0 < nsb; s0 += step) {
              const int64_t s1 = std::min(s0 + step, nsb);
              for (int64_t r0 = c0; r0 < c1; r0 += kTileRows) {
                const int rows = static_cast<int>(std::min<int64_t>(kTileRows, c1 - r0));
                const int64_t i = r0 - c0;
                kKernels[rows - 1][pairs - 1](c.q + i * nsb * kQK_K, c.sc + i * nsb * kGroups * 8, c.d + i * nsb,
                                              packed + p0 * nsb, nsb, s0, s1,
                                              state + i / kTileRows * kTileRows * kTilePairs * 16, y + r0, y_stride,
                                              2 * p0, n_tokens);
              }
            }
          }
        }
      });
}

}  // namespace agentkv::q8_K_pairs
#endif
