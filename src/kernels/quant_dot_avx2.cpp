#include "kernels/quant_kernels.h"
namespace agentkv::quant_detail {
VecDotFn avx2_vec_dot(GgmlType) { return nullptr; }
}  // namespace agentkv::quant_detail
