#include "memory/kv_row_convert.h"

#include <vector>

#include "kernels/quant.h"

namespace agentkv::memory {

void convert_kv_row(GgmlType from, const uint8_t* src, GgmlType to, uint8_t* dst, int64_t n) {
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(n));
  dequantize_row(from, src, scratch.data(), n);
  quantize_row(to, scratch.data(), dst, n);
}

void dequantize_kv_row(GgmlType type, const uint8_t* src, float* dst, int64_t n) { dequantize_row(type, src, dst, n); }

void quantize_kv_row(GgmlType type, const float* src, uint8_t* dst, int64_t n) { quantize_row(type, src, dst, n); }

}  // namespace agentkv::memory
