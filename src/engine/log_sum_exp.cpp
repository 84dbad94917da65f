#include "agentkv/log_sum_exp.h"

#include "kernels/ops.h"

namespace agentkv {

float logits_log_sum_exp(const float* logits, int64_t n) { return log_sum_exp(logits, n); }

}  // namespace agentkv
