// q8_0 GEMM with AVX2 (no VNNI). Numerics per (row, token), identical to dot_q8_0 at the AVX2
// level (quant_dot_avx2.cpp):
//   lane[l] = fma(fp16(w.d) * fp16(a.d), float(sum_{k<4} w.qs[4l+k] * a.qs[4l+k]), lane[l])
// block after block, then hsum_ps. Only the exact int32 lane sums are formed differently: dot_s8s8
// takes maddubs(|w|, sign(a, w)), then madd by ones; here quants are widened to int16 when they are
// packed, in an order where two madds (operands straight from the packed tiles) and an add give
// the lane sums directly; the sign step goes away (on the Zen 3 VM both forms measured alike).
// Activations come from quantize_activation_row (|a| <= 127), where dot_s8s8's 16-bit pair sums
// cannot saturate: both forms are the exact sums.
// The reuse: a register tile of 4 weight rows x 3 tokens loads each weight block once for 3 tokens
// and each activation block once for 4 rows, and the float scale products are formed 8 blocks per
// multiply ahead of the loop (the same single-rounded products).
#include "kernels/gemm_q8_0_avx2.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"
#include "kernels/thread_scratch.h"

namespace agentkv {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;

constexpr int kTileRows = 4;    // weight rows per register tile
constexpr int kTileTokens = 3;  // tokens per register tile: 12 accumulators, 4 registers left

// Scales are kept in rows of whole 8-float vectors (zero past the last block).
int64_t padded_blocks(int64_t nb) { return (nb + 7) / 8 * 8; }

// A block's 32 quants as two int16 vectors whose madd products add up to dot_q8_0's lanes:
// widened[0] holds quants 4l, 4l + 1 of every lane l, widened[1] quants 4l + 2, 4l + 3.
AGENTKV_AVX2_INLINE void widen_block(const int8_t* qs, __m256i* widened) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  // Per 128-bit half: the even byte pairs (quants 4l, 4l + 1), then the odd ones.
  const __m256i split = _mm256_shuffle_epi8(
      q, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10,
                          11, 14, 15));
  const __m256i even_then_odd = _mm256_permute4x64_epi64(split, _MM_SHUFFLE(3, 1, 2, 0));
  _mm256_store_si256(widened, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(even_then_odd)));
  _mm256_store_si256(widened + 1, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(even_then_odd, 1)));
}

// Activations re-laid once per call, in groups of kTileTokens tokens: block b of the group's
// token i at widened[(b * kTileTokens + i) * 2], its scale as a float at d[i * nb_pad + b]. A
// missing last token of a group is zero.
AGENTKV_AVX2 void pack_token(const BlockQ8_0* blocks, int64_t nb, int64_t nb_pad, int slot, __m256i* widened,
                             float* d) {
  for (int64_t b = 0; b < nb; ++b) {
    __m256i* out = widened + (b * kTileTokens + slot) * 2;
    if (blocks) {
      widen_block(blocks[b].qs, out);
    } else {
      out[0] = out[1] = _mm256_setzero_si256();
    }
    d[slot * nb_pad + b] = blocks ? half_to_float(blocks[b].d) : 0.f;
  }
  for (int64_t b = nb; b < nb_pad; ++b) d[slot * nb_pad + b] = 0.f;
}

// A register tile's weight rows, re-laid while they are read from memory (once per chunk of
// tokens): block b of row r at widened[(b * kTileRows + r) * 2], its scale at d[r * nb_pad + b].
AGENTKV_AVX2 void pack_weight_rows(const uint8_t* w, size_t w_stride, int rows, int64_t nb, int64_t nb_pad,
                                   __m256i* widened, float* d) {
  for (int r = 0; r < rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(w + r * w_stride);
    for (int64_t b = 0; b < nb; ++b) {
      widen_block(blocks[b].qs, widened + (b * kTileRows + r) * 2);
      d[r * nb_pad + b] = half_to_float(blocks[b].d);
    }
    for (int64_t b = nb; b < nb_pad; ++b) d[r * nb_pad + b] = 0.f;
  }
}

// kRows x kTokens outputs over all nb blocks. w / w_d: the tile's packed rows and scales; a / a_d:
// the token group's packed blocks and scales; scale_products: room for kRows * kTokens * nb_pad
// floats, laid out [block / 8][row * kTokens + token][block % 8].
template <int kRows, int kTokens>
AGENTKV_AVX2 void tile_kernel(const int16_t* w_quants, const float* w_d, const int16_t* a_quants, const float* a_d,
                              int64_t nb, int64_t nb_pad, float* scale_products, float* y, int64_t y_stride) {
  constexpr int kPairs = kRows * kTokens;
  const auto* w = reinterpret_cast<const __m256i*>(w_quants);
  const auto* a = reinterpret_cast<const __m256i*>(a_quants);
  // fp16(w.d) * fp16(a.d) for every (row, token, block), 8 blocks per multiply.
  for (int64_t b = 0; b < nb_pad; b += 8)
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t)
        _mm256_store_ps(scale_products + b * kPairs + (r * kTokens + t) * 8,
                        _mm256_mul_ps(_mm256_load_ps(w_d + r * nb_pad + b), _mm256_load_ps(a_d + t * nb_pad + b)));
  // The loops over rows and tokens are unrolled so the accumulators live in registers.
  __m256 acc[kRows][kTokens];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i* wb = w + b * kTileRows * 2;
    const __m256i* ab = a + b * kTileTokens * 2;
    const float* db = scale_products + (b & ~int64_t{7}) * kPairs + (b & 7);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256i w_lo = _mm256_load_si256(wb + 2 * r), w_hi = _mm256_load_si256(wb + 2 * r + 1);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        const __m256i sums = _mm256_add_epi32(_mm256_madd_epi16(w_lo, _mm256_load_si256(ab + 2 * t)),
                                              _mm256_madd_epi16(w_hi, _mm256_load_si256(ab + 2 * t + 1)));
        const __m256 d = _mm256_broadcast_ss(db + (r * kTokens + t) * 8);
        acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t)
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) y[t * y_stride + r] = hsum_ps(acc[r][t]);
}

using TileKernel = void (*)(const int16_t*, const float*, const int16_t*, const float*, int64_t, int64_t, float*,
                            float*, int64_t);

// kKernels[rows - 1][tokens - 1]: the kernel for a (possibly partial) register tile.
template <int kRows, int... kTokens>
constexpr std::array<TileKernel, sizeof...(kTokens)> kernels_for_rows(std::integer_sequence<int, kTokens...>) {
  return {tile_kernel<kRows, kTokens + 1>...};
}
template <int... kRows>
constexpr auto kernel_table(std::integer_sequence<int, kRows...>) {
  return std::array{kernels_for_rows<kRows + 1>(std::make_integer_sequence<int, kTileTokens>())...};
}
constexpr auto kKernels = kernel_table(std::make_integer_sequence<int, kTileRows>());

TileKernel kernel_for(int rows, int tokens) { return kKernels[rows - 1][tokens - 1]; }

// The calling thread's packed activations (shared by the workers for the call), and each
// worker's packed weight tile with its scale products.
struct ActivationTag;
struct WeightTileTag;

}  // namespace

bool q8_0_gemm_avx2_available() { return active_cpu_level() >= CpuLevel::Avx2; }

void q8_0_gemm_avx2(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                    size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  // Two tokens repay the packing of the weight tiles too little (0.75-1.04x the per-dot loop on
  // one Zen 3 core; three: 1.02-1.4x): the dot per (row, token), which gives the same bits.
  if (n_tokens < kTileTokens) {
    const VecDotFn dot = vec_dot_fn(GgmlType::Q8_0);
    pool.parallel_for(n_out, [&](int64_t row_begin, int64_t row_end) {
      for (int64_t r = row_begin; r < row_end; ++r)
        for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + r] = dot(n_in, weights + r * w_stride, act + t * act_stride);
    });
    return;
  }
  const int64_t nb = n_in / kQK8_0;
  const int64_t nb_pad = padded_blocks(nb);
  const int64_t n_groups = (n_tokens + kTileTokens - 1) / kTileTokens;
  const int64_t group_vectors = nb * kTileTokens * 2;  // a token group's packed blocks
  const int64_t group_scales = kTileTokens * nb_pad;
  const size_t a_bytes = static_cast<size_t>(n_groups * group_vectors) * sizeof(__m256i);
  uint8_t* a_scratch =
      thread_scratch_lines<ActivationTag>(a_bytes + static_cast<size_t>(n_groups * group_scales) * sizeof(float));
  auto* a_widened = reinterpret_cast<__m256i*>(a_scratch);
  auto* a_d = reinterpret_cast<float*>(a_scratch + a_bytes);
  const auto pack_groups = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g)
      for (int slot = 0; slot < kTileTokens; ++slot) {
        const int64_t t = g * kTileTokens + slot;
        const auto* blocks = t < n_tokens ? reinterpret_cast<const BlockQ8_0*>(act + t * act_stride) : nullptr;
        pack_token(blocks, nb, nb_pad, slot, a_widened + g * group_vectors, a_d + g * group_scales);
      }
  };
  // A few tokens (an expert's batch) are packed in about the time the pool takes to hand out work.
  constexpr int64_t kInlinePackBlocks = 1024;
  if (n_groups * kTileTokens * nb <= kInlinePackBlocks) {
    pack_groups(0, n_groups);
  } else {
    pool.parallel_for(n_groups, pack_groups);
  }

  // A worker walks its rows one register tile at a time, the tile's packed blocks (24 KiB for
  // 3072 inputs) staying in L1 while a chunk of token groups (~320 KiB of activations, in L2)
  // passes over them; each tile is packed again per chunk.
  const int64_t chunk_groups = std::max<int64_t>(1, 320 * 1024 / (group_vectors * 32));
  pool.parallel_chunks(
      n_out, balanced_chunk(n_out, kTileRows, pool.size(), 16),
      [&](int64_t row_begin, int64_t row_end) {
        const size_t w_bytes = static_cast<size_t>(nb * kTileRows * 2) * sizeof(__m256i);
        const size_t d_bytes = static_cast<size_t>(kTileRows * nb_pad) * sizeof(float);
        uint8_t* scratch =
            thread_scratch_lines<WeightTileTag>(w_bytes + d_bytes + static_cast<size_t>(kTileTokens) * d_bytes);
        auto* w_tile = reinterpret_cast<__m256i*>(scratch);
        auto* w_d = reinterpret_cast<float*>(scratch + w_bytes);
        auto* scale_products = reinterpret_cast<float*>(scratch + w_bytes + d_bytes);
        for (int64_t c0 = 0; c0 < n_groups; c0 += chunk_groups) {
          const int64_t c1 = std::min(c0 + chunk_groups, n_groups);
          for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
            const int rows = static_cast<int>(std::min<int64_t>(kTileRows, row_end - r0));
            pack_weight_rows(weights + r0 * w_stride, w_stride, rows, nb, nb_pad, w_tile, w_d);
            // The next tile's rows are fetched into L2 while this one works.
            const int64_t next = std::min<int64_t>(kTileRows, row_end - r0 - rows);
            const uint8_t* next_rows = weights + (r0 + rows) * w_stride;
            for (size_t at = 0; at < static_cast<size_t>(next) * w_stride; at += 64)
              _mm_prefetch(reinterpret_cast<const char*>(next_rows + at), _MM_HINT_T1);
            for (int64_t g = c0; g < c1; ++g) {
              const int64_t t0 = g * kTileTokens;
              const int tokens = static_cast<int>(std::min<int64_t>(kTileTokens, n_tokens - t0));
              kernel_for(rows, tokens)(reinterpret_cast<const int16_t*>(w_tile), w_d,
                                       reinterpret_cast<const int16_t*>(a_widened + g * group_vectors),
                                       a_d + g * group_scales, nb, nb_pad, scale_products, y + t0 * y_stride + r0,
                                       y_stride);
            }
          }
        }
      });
}

#else
bool q8_0_gemm_avx2_available() { return false; }
void q8_0_gemm_avx2(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t,
                    ThreadPool&) {}
#endif

}  // namespace agentkv
