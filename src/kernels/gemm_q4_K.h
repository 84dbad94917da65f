// Register-blocked q4_K x q8_K matrix multiply for prefill, keeping both of llama.cpp's q4_K
// float orders bit for bit (quant.h): tokens [0, n_grouped) get the repacked GEMM kernel's order
// (row_group_dot_fn: one FMA per 64 weights), the others the GEMV kernel's (vec_dot_fn: one FMA
// per superblock). Sixteen weight rows share a 512-bit register (eight a 256-bit one at the AVX2
// level), one row per lane, so each lane is one output's scalar accumulator, exactly as in the dot
// products.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/threadpool.h"

namespace agentkv {

// Whether the blocked kernel runs at the active CPU level (AVX2 or above); if not, use vec_dot.
bool q4_K_gemm_available();

// y[t * y_stride + r] for r < n_out, t < n_tokens: row_group_dot_fn(Q4_K) numerics for
// t < n_grouped (a multiple of 4), vec_dot_fn(Q4_K) numerics for the rest. weights: n_out rows of
// n_in / 256 q4_K blocks, w_stride bytes apart; act: n_tokens rows of q8_K blocks, act_stride bytes
// apart. Rows are split across the pool. Requires q4_K_gemm_available().
void q4_K_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
               size_t act_stride, int64_t n_tokens, int64_t n_grouped, float* y, int64_t y_stride,
               ThreadPool& pool);

}  // namespace agentkv
