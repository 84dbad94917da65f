// Batched y = W x for F16 / F32 weights in the float order of llama.cpp's x86 builds, which hand
// such products (>= 2 activation rows, rows a multiple of 4, row length a whole number of vectors)
// to llamafile's tinyBLAS: every output is ONE fused multiply-add chain over vector steps of the
// row, then a horizontal sum. AVX-512 build: 16 lanes, _mm512_reduce_add_ps (row length % 16);
// AVX2 build: 8 lanes, upper + lower 128 bits then (0 + 2) + (1 + 3) (row length % 8). agentkv's
// AVX-512 level follows the first, its AVX2 and scalar levels the second. F16 weights meet the
// activations rounded to f16 first (ggml converts them to vec_dot_type). Decode and shapes
// tinyBLAS refuses keep the vec_dot order (ggml_vec_dot_f16 / _f32), as llama.cpp does.
#pragma once
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/threadpool.h"

namespace agentkv {

// Whether matmul should take float_gemm for this product: the weight is F16 or F32, n_tokens >= 2,
// n_out % 4 == 0 and n_in % 16 == 0 (AVX-512 level) or n_in % 8 == 0 (AVX2 and scalar levels).
// (MUL_MAT_ID, i.e. expert matrices, never reaches tinyBLAS in llama.cpp: the caller only asks
// for RowGrouping::kBatch.)
bool float_gemm_applies(const WeightMatrix& w, int64_t n_tokens);

// x: n_tokens rows of n_in floats (stride x_stride); y: n_tokens rows of n_out floats (stride
// y_stride). Requires float_gemm_applies(w, n_tokens); output rows split across the pool; each
// thread widens panels of its rows to f32 once per call (AVX-512: 768 KiB, tiles of 4 rows x up to
// 6 tokens; AVX2: 320 KiB, tiles of 4 rows x up to 3 tokens; scalar: one row at a time) and runs
// the register tiles over k blocks of at most 1024 (bit-identical to the unblocked chain). Keeps
// a per-thread scratch of the widened panel and an aligned copy of the activations.
void float_gemm(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
                int64_t y_stride, ThreadPool& pool);

}  // namespace agentkv
