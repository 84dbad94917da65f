// Rows of floats to IEEE half, exactly as fp32_to_fp16 (agentkv/fp16.h) converts one value: round to
// nearest even, overflow to infinity, subnormals kept, NaN as 0x7E00 with the sign. Uses F16C's
// vcvtps2ph where the active CPU level has it (the K/V rows of every prefill token are stored this
// way), the portable conversion elsewhere.
#pragma once
#include <cstdint>

namespace agentkv {

void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);

}  // namespace agentkv
