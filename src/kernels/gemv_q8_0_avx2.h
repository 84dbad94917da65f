// Internal to the decode GEMV (gemv.cpp picks it): the q8_0 multi-row kernel for the AVX2 level
// (CPUs without AVX-512 VNNI). Same contract and bits as gemv_rows for q8_0 (gemv.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace agentkv {

// Whether the AVX2 level (or higher) is active, which q8_0_gemv_rows_avx2 needs.
bool q8_0_gemv_avx2_available();

// Rows a thread's share should be a multiple of.
constexpr int64_t kQ8_0GemvAvx2Rows = 4;

void q8_0_gemv_rows_avx2(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, int64_t row_begin,
                         int64_t row_end, float* y);

}  // namespace agentkv
