#include "kernels/matmul.h"
namespace agentkv {
void matmul(const WeightMatrix&, const float*, int64_t, int64_t, float*, int64_t, ThreadPool&) {}
void get_row(const WeightMatrix&, int64_t, float*) {}
}  // namespace agentkv
