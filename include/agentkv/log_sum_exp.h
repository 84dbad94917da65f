// Log-sum-exp of a logits row, for log-probabilities outside the forward pass (the quality and
// tier benchmarks compare runs by them): the kernels' own, so every caller rounds alike.
#pragma once
#include <cstdint>

namespace agentkv {

// log(sum(exp(x))) of n floats, accumulated in double; the row is not modified.
float logits_log_sum_exp(const float* logits, int64_t n);

}  // namespace agentkv
