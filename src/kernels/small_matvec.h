// The product of a small dense float matrix and one vector, as tqc3's calibrated code applies its
// maps once per head and token (memory/kv_code.cpp): the memory layer is built for baseline
// x86-64, where this loop stayed scalar (2.4 % of a tqc3 decode step at d = 16,384).
#pragma once
#include <cstdint>

namespace agentkv {

// y = M^T x for M n x n, row-major: row i of M scaled by x[i], summed (y must not alias x).
void small_mat_t_vec(const float* m, const float* x, float* y, int64_t n);

}  // namespace agentkv
