// Register-blocked q8_0 x q8_0 matrix multiply for prefill. Every output is bit-identical to
// vec_dot_fn(GgmlType::Q8_0) on the same weight row and activation row (llama.cpp's x86 float
// order: per block one FMA into 8 lanes, then hsum_float_8), so callers may pick it or the
// per-dot path freely. The speed comes from reuse, not from a different arithmetic: a tile of
// weight rows meets a tile of tokens with every weight block loaded once per tile, two tokens
// sharing one 512-bit register (each half an independent 8-lane accumulator). Without VNNI, an
// AVX2 kernel (gemm_q8_0_avx2.cpp) with the same bits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/threadpool.h"

namespace agentkv {

// Whether a blocked kernel runs at the active CPU level (AVX-512 VNNI, or AVX2); if not, use vec_dot.
bool q8_0_gemm_available();

// y[t * y_stride + r] = dot(weight row r, activation row t) for r < n_out, t < n_tokens.
// weights: n_out rows of n_in / 32 q8_0 blocks, w_stride bytes apart; act: n_tokens rows of q8_0
// blocks (quantize_activation_row output), act_stride bytes apart. n_in is a multiple of 32.
// Rows are split across the pool. Meant for n_tokens >= 2 (one token goes through gemv_rows,
// gemv.h). Requires q8_0_gemm_available().
void q8_0_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
               size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

}  // namespace agentkv
