// mxfp4 x q8_0 matrix multiply (gpt-oss's expert matrices) in the float order of llama.cpp's
// repacked mxfp4_8x8 kernels, which its x86 build (with AVX2) runs for every mxfp4 matrix with a
// multiple of 8 rows, in MUL_MAT (GEMM for groups of 4 tokens, GEMV for the rest) and MUL_MAT_ID
// (GEMV) alike: per output one fused multiply-add chain over the blocks,
//   acc = fma(float(exact integer block sum), half_scale(w.e) * fp16(a.d), acc).
// Every output is bit-identical to repacked_dot_fn(MXFP4) (quant.h) on its row, at any token count
// and thread count. One to five tokens: a GEMV over 8 rows at a time (the rows' integer lane sums
// reduced into one register whose lane r is row r's chain); more: a GEMM that decodes a group of
// rows once (values + 12, unsigned, in the layout llama.cpp repacks into: lane r of register k holds
// elements 4k..4k+3 of row r) and applies it to every token, 8 rows per register with vpmaddubsw
// (AVX2), 16 with vpdpbusd (AVX-512 VNNI). The + 12 is taken back exactly with -12 * sum(a) per block.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/threadpool.h"

namespace agentkv {

// Whether mxfp4_matmul runs at the active CPU level (AVX2 or above).
bool mxfp4_matmul_available();

// y[t * y_stride + r] = repacked_dot_fn(MXFP4)(n_in, weight row r, activation row t) for r < n_out,
// t < n_tokens. weights: n_out rows of n_in / 32 mxfp4 blocks, w_stride bytes apart; act: n_tokens
// rows of q8_0 blocks (quantize_activation_row output), act_stride bytes apart. n_out is a multiple
// of 8, n_in of 32. Rows are split across the pool. Requires mxfp4_matmul_available().
void mxfp4_matmul(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                  size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

}  // namespace agentkv
