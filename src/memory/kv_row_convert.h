// KV rows from one cache type to another: a windowed cache's hot rows and its tail
// (memory/kv_rows.h), and the rows readers outside attention see. The kernels' quantizers do
// the work; this is the one place in the memory layer that calls them, so a build of the memory
// alone (the fuzz targets, whose caches have no window) can leave it out.
#pragma once
#include <cstdint>

#include "agentkv/ggml_type.h"

namespace agentkv::memory {

// n elements of `from` at src as `to` at dst (dequantized, then quantized).
void convert_kv_row(GgmlType from, const uint8_t* src, GgmlType to, uint8_t* dst, int64_t n);
void dequantize_kv_row(GgmlType type, const uint8_t* src, float* dst, int64_t n);
void quantize_kv_row(GgmlType type, const float* src, uint8_t* dst, int64_t n);

}  // namespace agentkv::memory
