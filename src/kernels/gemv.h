// Single-token matrix-vector product (decode, and a few tokens at once): several weight rows at once, with software
// prefetch ahead of the row stream. Every output is bit-identical to vec_dot_fn(type) on its
// row (llama.cpp's per-row float order; rows only share loads of the activation and registers,
// each keeps its own accumulation chain), so matmul may use it or the per-row loop freely.
#pragma once
#include <cstddef>
#include <cstdint>

#include "agentkv/ggml_type.h"

namespace agentkv {

// Whether gemv_rows has a multi-row kernel for this weight type at the active CPU level
// (q8_0, q4_K, q6_K with AVX-512 VNNI; q4_K with AVX2); if not, use vec_dot row by row.
bool gemv_available(GgmlType type);

// Whether one token should take gemv_rows rather than vec_dot row by row on this machine: the
// q8_0 and q6_K AVX-512 VNNI groups read their rows interleaved, a stride apart, which AMD's
// prefetcher serves ~1.5 x slower than one row at a time (Zen 4); elsewhere gemv_available.
bool gemv_preferred(GgmlType type);

// Rows a thread's share should be a multiple of (the kernels' row group).
int64_t gemv_row_grain(GgmlType type);

// y[r] = vec_dot(type, n_in, weights + r * w_stride, act) for r in [row_begin, row_end).
// act: one activation row in vec_dot_type(type) (quantize_activation_row output). n_in is a
// multiple of the type's block size. Requires gemv_available(type).
void gemv_rows(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
               int64_t row_begin, int64_t row_end, float* y);

// Small batches (multi-sequence decode): each row group is read once for all the tokens.
// The largest token count worth gemv_batch_rows for this type at the active CPU level (beyond it
// the prefill GEMMs are faster); 0 where there is no batch kernel (q8_0, q6_K, q4_K with AVX-512
// VNNI). q4_K's kernel has vec_dot numerics: matmul gives it no row-group (kBatch, 4+ tokens) work.
int64_t gemv_batch_max_tokens(GgmlType type);

// y[t * y_stride + r] = vec_dot(type, n_in, weights + r * w_stride, act + t * act_stride) for rows
// r in [row_begin, row_end) and tokens t in [0, n_tokens), bit for bit. act: n_tokens activation
// rows in vec_dot_type(type). Any type and token count (without a batch kernel: the vec_dot loop).
void gemv_batch_rows(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act,
                     size_t act_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end, float* y,
                     int64_t y_stride);

}  // namespace agentkv
