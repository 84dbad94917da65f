// iq4_xs x q8_K matrix multiply for prefill (the i-quant share of the "dynamic" GGUF quantizations).
// Every output is bit-identical to vec_dot_fn(GgmlType::IQ4_XS) on the same weight row and
// activation row, at every level. The per-dot kernel decodes each weight superblock (nibbles ->
// table levels -> magnitudes and signs, six-bit scales) once per token; this kernel decodes a chunk
// of weight rows once and applies it to every token.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/threadpool.h"

namespace agentkv {

// Whether a blocked kernel runs at the active CPU level (AVX-512 VNNI, or AVX2); if not, use vec_dot.
bool iq4_xs_gemm_available();

// y[t * y_stride + r] = dot(weight row r, activation row t) for r < n_out, t < n_tokens. weights:
// n_out rows of n_in / 256 iq4_xs blocks, w_stride bytes apart; act: n_tokens rows of q8_K blocks,
// act_stride bytes apart. Rows are split across the pool. Requires iq4_xs_gemm_available().
void iq4_xs_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                 size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

}  // namespace agentkv
