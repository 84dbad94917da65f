// q8_0 GEMM with AVX2 (no VNNI). Numerics per (row, token), identical to dot_q8_0 at the AVX2
// level (quant_dot_avx2.cpp):
//   lane[l] = fma(fp16(w.d) * fp16(a.d), float(sum_{k<4} w.qs[4l+k] * a.qs[4l+k]), lane[l])
// block after block, then hsum_ps. The integer sums take dot_s8s8's very instructions
// (maddubs(|w|, sign(a, w)), then madd by ones), so even their 16-bit pair sums are the same.
// What changes is reuse: a register tile of 4 weight rows x 3 tokens loads each weight block once
// for 3 tokens and each activation block once for 4 rows, |w| is taken once when the rows are
// packed, and the float scale products are formed 8 blocks per multiply ahead of the loop (the
// same single-rounded products), so the inner loop is 5 vector operations per (row, token, block).
#include "kernels/gemm_q8_0_avx2.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/dispatch.h"
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

// A weight block as the kernel reads it: maddubs' unsigned operand |w|, and w, whose signs are
// moved onto the activations.
struct alignas(64) PackedWeightBlock {
  uint8_t magnitude[32];
  int8_t qs[32];
};

// Scales are kept in rows of whole 8-float vectors (zero past the last block).
int64_t padded_blocks(int64_t nb) { return (nb + 7) / 8 * 8; }

// Activation rows re-laid once per call: 32-byte aligned quant blocks, scales as floats.
AGENTKV_AVX2 void pack_token(const BlockQ8_0* blocks, int64_t nb, int64_t nb_pad, int8_t* qs, float* d) {
  for (int64_t b = 0; b < nb; ++b) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(qs + 32 * b),
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].qs)));
    d[b] = half_to_float(blocks[b].d);
  }
  for (int64_t b = nb; b < nb_pad; ++b) d[b] = 0.f;
}

// A register tile's weight rows, re-laid while they are read from memory (once per chunk of tokens).
AGENTKV_AVX2 void pack_weight_rows(const uint8_t* w, size_t w_stride, int rows, int64_t nb, int64_t nb_pad,
                                   PackedWeightBlock* out, float* d) {
  for (int r = 0; r < rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(w + r * w_stride);
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].qs));
      PackedWeightBlock& p = out[r * nb + b];
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.magnitude), _mm256_sign_epi8(q, q));  // as dot_s8s8
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.qs), q);
      d[r * nb_pad + b] = half_to_float(blocks[b].d);
    }
    for (int64_t b = nb; b < nb_pad; ++b) d[r * nb_pad + b] = 0.f;
  }
}

// kRows x kTokens outputs over all nb blocks. w / w_d: the tile's packed rows (nb blocks, nb_pad
// scales apart); a_qs / a_d: the first token's packed blocks and scales (nb blocks, nb_pad
// scales apart); scale_products: room for kRows * kTokens * nb_pad floats.
template <int kRows, int kTokens>
AGENTKV_AVX2 void tile_kernel(const PackedWeightBlock* w, const float* w_d, const int8_t* a_qs, const float* a_d,
                              int64_t nb, int64_t nb_pad, float* scale_products, float* y, int64_t y_stride) {
  // fp16(w.d) * fp16(a.d) for every (row, token, block), 8 blocks per multiply.
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      float* out = scale_products + (r * kTokens + t) * nb_pad;
      for (int64_t b = 0; b < nb_pad; b += 8)
        _mm256_store_ps(out + b, _mm256_mul_ps(_mm256_load_ps(w_d + r * nb_pad + b), _mm256_load_ps(a_d + t * nb_pad + b)));
    }
  // The loops over rows and tokens are unrolled so the accumulators live in registers.
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kRows][kTokens];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const PackedWeightBlock& wb = w[r * nb + b];
      const __m256i magnitude = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb.magnitude));
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        const __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(a_qs + (t * nb + b) * 32));
        const __m256i signed_a = _mm256_sign_epi8(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(wb.qs)));
        const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_a), ones);
        const __m256 d = _mm256_broadcast_ss(scale_products + (r * kTokens + t) * nb_pad + b);
        acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t)
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) y[t * y_stride + r] = hsum_ps(acc[r][t]);
}

using TileKernel = void (*)(const PackedWeightBlock*, const float*, const int8_t*, const float*, int64_t, int64_t,
                            float*, float*, int64_t);

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
  const int64_t nb = n_in / kQK8_0;
  const int64_t nb_pad = padded_blocks(nb);
  const size_t a_qs_bytes = static_cast<size_t>(n_tokens * nb * 32);
  uint8_t* a_scratch = thread_scratch_lines<ActivationTag>(a_qs_bytes + static_cast<size_t>(n_tokens * nb_pad) * sizeof(float));
  auto* a_qs = reinterpret_cast<int8_t*>(a_scratch);
  auto* a_d = reinterpret_cast<float*>(a_scratch + a_qs_bytes);  // 32-byte aligned: a_qs_bytes is
  pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      pack_token(reinterpret_cast<const BlockQ8_0*>(act + t * act_stride), nb, nb_pad, a_qs + t * nb * 32,
                 a_d + t * nb_pad);
  });

  // A worker walks its rows one register tile at a time, the tile's packed blocks (<= 24 KiB for
  // 3072 inputs) staying in L1 while a chunk of tokens (~128 KiB of activations, in L2) passes
  // over them; each tile is packed again per chunk.
  const int64_t token_chunk = std::max<int64_t>(kTileTokens, (128 * 1024 / (nb * 32)) / kTileTokens * kTileTokens);
  pool.parallel_for(
      n_out,
      [&](int64_t row_begin, int64_t row_end) {
        const size_t w_bytes = static_cast<size_t>(kTileRows * nb) * sizeof(PackedWeightBlock);
        const size_t d_bytes = static_cast<size_t>(kTileRows * nb_pad) * sizeof(float);
        uint8_t* scratch =
            thread_scratch_lines<WeightTileTag>(w_bytes + d_bytes + static_cast<size_t>(kTileTokens) * d_bytes);
        auto* w_tile = reinterpret_cast<PackedWeightBlock*>(scratch);
        auto* w_d = reinterpret_cast<float*>(scratch + w_bytes);
        auto* scale_products = reinterpret_cast<float*>(scratch + w_bytes + d_bytes);
        for (int64_t c0 = 0; c0 < n_tokens; c0 += token_chunk) {
          const int64_t c1 = std::min(c0 + token_chunk, n_tokens);
          for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
            const int rows = static_cast<int>(std::min<int64_t>(kTileRows, row_end - r0));
            pack_weight_rows(weights + r0 * w_stride, w_stride, rows, nb, nb_pad, w_tile, w_d);
            for (int64_t t0 = c0; t0 < c1; t0 += kTileTokens) {
              const int tokens = static_cast<int>(std::min<int64_t>(kTileTokens, c1 - t0));
              kernel_for(rows, tokens)(w_tile, w_d, a_qs + t0 * nb * 32, a_d + t0 * nb_pad, nb, nb_pad, scale_products,
                                       y + t0 * y_stride + r0, y_stride);
            }
          }
        }
      },
      kTileRows);
}

#else
bool q8_0_gemm_avx2_available() { return false; }
void q8_0_gemm_avx2(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t,
                    ThreadPool&) {}
#endif

}  // namespace agentkv
