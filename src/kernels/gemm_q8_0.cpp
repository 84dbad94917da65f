// q8_0 GEMM with AVX-512 VNNI. Numerics per (row, token), identical to dot_q8_0:
//   lane[l] = fma(fp16(w.d) * fp16(a.d), float(sum_{k<4} w.qs[4l+k] * a.qs[4l+k]), lane[l])
// block after block, then hsum_ps. Only the integer sums change how they are computed:
// vpdpbusd multiplies unsigned by signed bytes, so weights are shifted to w + 128 (a xor 0x80)
// and the accumulator starts at -128 * sum(a) per lane, precomputed when activations are
// packed; the lane sums stay exact int32, so the float work sees the same operands. Without VNNI
// q8_0_gemm hands the call to the AVX2 kernel (gemm_q8_0_avx2.cpp).
#include "kernels/gemm_q8_0.h"

#include <algorithm>
#include <array>
#include <utility>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/gemm_q8_0_avx2.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"
#include "kernels/thread_scratch.h"
#include "kernels/token_pairs.h"

// GCC 12 reports the undefined upper half in its own _mm512_castsi256_si512 as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;

// One q8_0 block of two consecutive tokens, laid out for the kernel: token 2p in bytes / lanes
// 0..31 / 0..7, token 2p + 1 in the upper half (zeros when the token count is odd).
struct alignas(64) PackedPairBlock {
  int8_t qs[64];
  int32_t bias[16];  // -128 * (sum of the 4 activations in this lane): undoes the weight shift
  float d[16];       // the token's block scale, repeated over its 8 lanes
};

constexpr int kTileRows = 4;   // weight rows per register tile
constexpr int kTilePairs = 4;  // token pairs per register tile (4 x 4 accumulators)

void pack_token(const BlockQ8_0* blocks, int64_t nb, int half, PackedPairBlock* out) {
  for (int64_t b = 0; b < nb; ++b) {
    PackedPairBlock& p = out[b];
    std::memcpy(p.qs + 32 * half, blocks[b].qs, 32);
    const float d = fp16_to_fp32(blocks[b].d);
    for (int l = 0; l < 8; ++l) {
      int sum = 0;
      for (int k = 0; k < 4; ++k) sum += blocks[b].qs[4 * l + k];
      p.bias[8 * half + l] = -128 * sum;
      p.d[8 * half + l] = d;
    }
  }
}

void clear_half(int64_t nb, int half, PackedPairBlock* out) {
  for (int64_t b = 0; b < nb; ++b) {
    std::memset(out[b].qs + 32 * half, 0, 32);
    for (int l = 0; l < 8; ++l) {
      out[b].bias[8 * half + l] = 0;
      out[b].d[8 * half + l] = 0.f;
    }
  }
}

// Weight rows re-laid for the kernel, once per chunk of rows and reused by every token tile:
// quants shifted to unsigned (xor 0x80) in 32-byte blocks, scales converted to float.
AGENTKV_AVX512_VNNI void pack_weight_rows(const uint8_t* w, size_t w_stride, int64_t rows, int64_t nb, uint8_t* qs,
                                        float* d) {
  const __m256i sign_flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < rows; ++i) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(w + i * w_stride);
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].qs));
      _mm256_store_si256(reinterpret_cast<__m256i*>(qs + (i * nb + b) * 32), _mm256_xor_si256(q, sign_flip));
      d[i * nb + b] = half_to_float(blocks[b].d);
    }
  }
}

// kRows x kPairs outputs over blocks [b0, b1). w_qs / w_d: the first row's packed blocks and
// scales (rows nb blocks apart); packed: the first pair's blocks (pairs nb blocks apart). The
// accumulators start at zero when b0 == 0, else from state, and go back to state unless b1 == nb,
// where they are reduced into y: splitting the block range changes no rounding.
template <int kRows, int kPairs>
AGENTKV_AVX512_VNNI void tile_kernel(const uint8_t* w_qs, const float* w_d, const PackedPairBlock* packed, int64_t nb,
                                   int64_t b0, int64_t b1, float* state, float* y, int64_t y_stride, int64_t token0,
                                   int64_t n_tokens) {
  // The loops over rows and pairs are unrolled so the accumulators live in registers (-O2 alone
  // keeps them in memory).
  __m512 acc[kRows][kPairs];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < kPairs; ++p)
      acc[r][p] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(state + 16 * (r * kPairs + p));
  for (int64_t b = b0; b < b1; ++b) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512i w_shifted =
          _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(w_qs + (r * nb + b) * 32)));
      const __m512 w_scale = _mm512_set1_ps(w_d[r * nb + b]);
#pragma GCC unroll 8
      for (int p = 0; p < kPairs; ++p) {
        const PackedPairBlock& a = packed[p * nb + b];
        const __m512i sums = _mm512_dpbusd_epi32(_mm512_load_si512(a.bias), w_shifted, _mm512_load_si512(a.qs));
        const __m512 d = _mm512_mul_ps(w_scale, _mm512_load_ps(a.d));  // = fp16(w.d) * fp16(a.d)
        acc[r][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sums), acc[r][p]);
      }
    }
  }
  if (b1 < nb) {
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

using TileKernel = void (*)(const uint8_t*, const float*, const PackedPairBlock*, int64_t, int64_t, int64_t, float*,
                           float*, int64_t, int64_t, int64_t);

// kKernels[rows - 1][pairs - 1]: the kernel for a (possibly partial) register tile.
template <int kRows, int... kPairs>
constexpr std::array<TileKernel, sizeof...(kPairs)> kernels_for_rows(std::integer_sequence<int, kPairs...>) {
  return {tile_kernel<kRows, kPairs + 1>...};
}
template <int... kRows>
constexpr auto kernel_table(std::integer_sequence<int, kRows...>) {
  return std::array{kernels_for_rows<kRows + 1>(std::make_integer_sequence<int, kTilePairs>())...};
}
constexpr auto kKernels = kernel_table(std::make_integer_sequence<int, kTileRows>());

TileKernel kernel_for(int rows, int pairs) { return kKernels[rows - 1][pairs - 1]; }

// A worker's packed chunk of weight rows (quants, then float scales).
struct WeightChunkTag;

}  // namespace

bool q8_0_gemm_available() { return avx512_vnni_active() || q8_0_gemm_avx2_available(); }

void q8_0_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
               size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  if (!avx512_vnni_active()) {
    q8_0_gemm_avx2(weights, w_stride, n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool);
    return;
  }
  const int64_t nb = n_in / kQK8_0;
  const int64_t n_pairs = (n_tokens + 1) / 2;
  PackedPairBlock* packed = thread_scratch<PackedPairBlock>(static_cast<size_t>(n_pairs * nb));
  pack_token_pairs(
      pool, n_tokens,
      [&](int64_t t, int half, int64_t p) {
        pack_token(reinterpret_cast<const BlockQ8_0*>(act + t * act_stride), nb, half, packed + p * nb);
      },
      [&](int half, int64_t p) { clear_half(nb, half, packed + p * nb); });

  // A chunk of weight rows (~256 KiB) is packed once and stays in cache while every token tile
  // passes over it. For one token tile the chunk is walked in steps of kStepBlocks blocks, all
  // its row tiles per step, so that step's packed activations (~24 KiB) stay in L1; the register
  // tiles park their accumulators in between.
  constexpr int64_t kStepBlocks = 32;
  const int64_t chunk_rows =
      std::max<int64_t>(kTileRows, (static_cast<int64_t>(256 * 1024 / w_stride) / kTileRows) * kTileRows);
  const int64_t step_blocks = nb <= kStepBlocks * 3 / 2 ? nb : kStepBlocks;
  pool.parallel_chunks(
      n_out, balanced_chunk(n_out, kTileRows, pool.size(), chunk_rows / kTileRows),
      [&](int64_t row_begin, int64_t row_end) {
        const int64_t chunk_tiles = chunk_rows / kTileRows;
        const size_t qs_bytes = static_cast<size_t>(chunk_rows * nb * 32);
        const size_t d_bytes = (static_cast<size_t>(chunk_rows * nb) * sizeof(float) + 63) / 64 * 64;
        const size_t state_bytes = static_cast<size_t>(chunk_tiles) * kTileRows * kTilePairs * 16 * sizeof(float);
        uint8_t* scratch = thread_scratch_lines<WeightChunkTag>(qs_bytes + d_bytes + state_bytes);
        uint8_t* w_qs = scratch;
        float* w_d = reinterpret_cast<float*>(scratch + qs_bytes);
        auto* state = reinterpret_cast<float*>(scratch + qs_bytes + d_bytes);  // 64-byte aligned
        for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk_rows) {
          const int64_t c1 = std::min(c0 + chunk_rows, row_end);
          pack_weight_rows(weights + c0 * w_stride, w_stride, c1 - c0, nb, w_qs, w_d);
          for (int64_t p0 = 0; p0 < n_pairs; p0 += kTilePairs) {
            const int pairs = static_cast<int>(std::min<int64_t>(kTilePairs, n_pairs - p0));
            for (int64_t b0 = 0; b0 < nb; b0 += step_blocks) {
              const int64_t b1 = std::min(b0 + step_blocks, nb);
              for (int64_t r0 = c0; r0 < c1; r0 += kTileRows) {
                const int rows = static_cast<int>(std::min<int64_t>(kTileRows, c1 - r0));
                kernel_for(rows, pairs)(w_qs + (r0 - c0) * nb * 32, w_d + (r0 - c0) * nb, packed + p0 * nb, nb, b0, b1,
                                        state + (r0 - c0) / kTileRows * kTileRows * kTilePairs * 16, y + r0, y_stride,
                                        2 * p0, n_tokens);
              }
            }
          }
        }
      });
}

#else
bool q8_0_gemm_available() { return false; }
void q8_0_gemm(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t, ThreadPool&) {}
#endif

}  // namespace agentkv
