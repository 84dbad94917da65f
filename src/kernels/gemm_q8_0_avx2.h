// Internal to the q8_0 GEMM (gemm_q8_0.cpp picks it): the AVX2 kernel, for CPUs without AVX-512
// VNNI. Same contract and the same bits as q8_0_gemm (gemm_q8_0.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/threadpool.h"

namespace agentkv {

// Whether the AVX2 level (or higher) is active, which q8_0_gemm_avx2 needs.
bool q8_0_gemm_avx2_available();

void q8_0_gemm_avx2(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                    size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

}  // namespace agentkv
