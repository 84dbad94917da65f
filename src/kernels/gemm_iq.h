// i-quant x q8_K matrix multiply for prefill (the i-quant share of the "dynamic" GGUF
// quantizations: iq4_xs, iq3_s, iq3_xxs, iq2_s, iq2_xs, iq2_xxs). Every output is bit-identical
// to vec_dot_fn(type) on the same weight row and activation row, at every level. The per-dot
// kernels decode each weight superblock (grid lookups, signs, scales) once per token; this kernel
// decodes a chunk of weight rows once and applies it to every token.
#pragma once
#include <cstddef>
#include <cstdint>

#include "agentkv/ggml_type.h"
#include "kernels/threadpool.h"

namespace agentkv {

// Whether a blocked kernel runs for `type` at the active CPU level (AVX-512 VNNI, or AVX2).
bool iq_gemm_available(GgmlType type);
// The fewest tokens for which the blocked kernel beats the per-dot loop: 2 for iq4_xs (decoded
// with vector code); 24 for the grid types, whose rows are decoded through iq_unpack (on Zen 4,
// one thread: 0.4-0.5 x the per-dot loop at 7 tokens, 4.7-7.9 x at 512; break-even near 15).
int64_t iq_gemm_min_tokens(GgmlType type);

// y[t * y_stride + r] = dot(weight row r, activation row t) for r < n_out, t < n_tokens. weights:
// n_out rows of n_in / 256 blocks of `type`, w_stride bytes apart; act: n_tokens rows of q8_K
// blocks, act_stride bytes apart. Rows are split across the pool. Requires iq_gemm_available(type).
void iq_gemm(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
             size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

}  // namespace agentkv
