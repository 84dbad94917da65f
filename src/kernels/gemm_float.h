// Batched y = W x for F16 / F32 weights in the float order of llama.cpp's AVX-512 build, which
// hands such products (>= 2 activation rows, rows a multiple of 4, row length a multiple of 16) to
// llamafile's tinyBLAS: every output is ONE 16-lane fused multiply-add chain over 16-element steps
// of the row, then _mm512_reduce_add_ps. F16 weights meet the activations rounded to f16 first
// (ggml converts them to vec_dot_type). Decode and shapes tinyBLAS refuses keep the vec_dot order
// (ggml_vec_dot_f16 / _f32), as llama.cpp does.
#pragma once
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/threadpool.h"

namespace agentkv {

// Whether matmul should take float_gemm for this product: an AVX-512 level is active, the weight
// is F16 or F32, n_tokens >= 2, n_out % 4 == 0 and n_in % 16 == 0. (MUL_MAT_ID, i.e. expert
// matrices, never reaches tinyBLAS in llama.cpp: the caller only asks for RowGrouping::kBatch.)
bool float_gemm_applies(const WeightMatrix& w, int64_t n_tokens);

// x: n_tokens rows of n_in floats (stride x_stride); y: n_tokens rows of n_out floats (stride
// y_stride). Requires float_gemm_applies(w, n_tokens); output rows split across the pool; each
// thread widens 768 KiB panels of its rows to f32 once per call and runs register tiles of 4 rows x
// up to 6 tokens over k blocks of at most 1024 (bit-identical to the unblocked chain). Keeps a
// per-thread scratch of the widened panel and an aligned copy of the activations.
void float_gemm(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
                int64_t y_stride, ThreadPool& pool);

}  // namespace agentkv
