// Internal to src/kernels: SIMD forms of the activation quantizers that run before every quantized
// matmul (q8_0 / q8_1 as ggml-cpu's x86 code rounds them, and q8_K). They write exactly the bytes
// of the scalar code in quant_simple.cpp / quant_kquants.cpp, which stays the portable fallback and
// the reference; quantize_q8_0_activation, quantize_q8_1_activation and quantize_q8_K dispatch here.
#pragma once
#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/quant_blocks.h"

namespace agentkv::quant_detail {

using QuantizeQ8_0Fn = void (*)(const float* x, BlockQ8_0* y, int64_t n);
using QuantizeQ8_1Fn = void (*)(const float* x, BlockQ8_1* y, int64_t n);
using QuantizeQ8_KFn = void (*)(const float* x, BlockQ8_K* y, int64_t n);

struct ActivationQuantizers {
  QuantizeQ8_0Fn q8_0 = nullptr;
  QuantizeQ8_1Fn q8_1 = nullptr;
  QuantizeQ8_KFn q8_K = nullptr;
};

// The SIMD quantizers of one CPU level (call with a level the CPU has, e.g. active_cpu_level());
// all nullptr for CpuLevel::Scalar and on non-x86 builds, where the scalar code runs.
ActivationQuantizers simd_activation_quantizers(CpuLevel level);

}  // namespace agentkv::quant_detail
