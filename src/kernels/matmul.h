// y = W x for a batch of activation rows: GEMV when n_tokens == 1 (decode), tiled GEMM for prefill.
// Activations are converted once per row to vec_dot_type(W.type), as ggml does.
#pragma once
#include <cstdint>

#include "agentkv/ggml_type.h"
#include "kernels/threadpool.h"

namespace agentkv {

// A 2-D weight in ggml orientation: n_out rows, each of n_in elements of `type`.
struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0;   // ne[0]
  int64_t n_out = 0;  // ne[1]
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;  // ggml_row_size(type, n_in)
};

// Which of llama.cpp's kernels each activation row gets for the weights it repacks on x86 (q4_K
// with a multiple of 8 rows), whose GEMM and GEMV kernels round differently (docs/quant-types.md):
// kBatch as its MUL_MAT (rows 0 .. n - n % 4 of the call in groups of 4 by the GEMM kernel, the
// rest by the GEMV kernel); kEachRowAlone as its MUL_MAT_ID (expert matrices: every row by GEMV).
// (Its repacked mxfp4 kernels round alike in both: the grouping changes nothing there.)
enum class RowGrouping { kBatch, kEachRowAlone };

// x: n_tokens rows of n_in floats (row stride x_stride floats); y: n_tokens rows of n_out floats
// (row stride y_stride floats).
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool& pool, RowGrouping grouping = RowGrouping::kBatch);

// Copies row `row` of w into dst as floats (embedding lookup).
void get_row(const WeightMatrix& w, int64_t row, float* dst);

}  // namespace agentkv
