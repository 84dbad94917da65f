// Register-blocked q6_K x q8_K matrix multiply for prefill. Every output is bit-identical to
// vec_dot_fn(GgmlType::Q6_K) on the same rows (llama.cpp's x86 float order: per superblock eight
// exact int32 lanes, one FMA each, then hsum_float_8); the tiling only adds reuse, as in
// gemm_q8_0.h (two tokens per 512-bit register, a tile of weight rows x token pairs; at the AVX2
// level one row and token per 256-bit register).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/threadpool.h"

namespace agentkv {

// Whether the blocked kernel runs at the active CPU level (AVX2 or above); if not, use vec_dot.
bool q6_K_gemm_available();

// y[t * y_stride + r] = dot(weight row r, activation row t) for r < n_out, t < n_tokens.
// weights: n_out rows of n_in / 256 q6_K blocks, w_stride bytes apart; act: n_tokens rows of q8_K
// blocks (quantize_activation_row output), act_stride bytes apart. n_in is a multiple of 256.
// Rows are split across the pool. Requires q6_K_gemm_available().
void q6_K_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
               size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

}  // namespace agentkv
