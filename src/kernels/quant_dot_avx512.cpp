#include "kernels/quant_kernels.h"
namespace agentkv::quant_detail {
VecDotFn avx512_vec_dot(GgmlType) { return nullptr; }
}  // namespace agentkv::quant_detail
