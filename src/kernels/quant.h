// Weight and KV element formats: ggml's block layouts, reference (de)quantizers and dot products.
// Numerics follow ggml: a dot product takes the weight row in its own type and the activation
// row already converted to vec_dot_type(weight type) (Q8_0 for the _0 types and iq4_nl, Q8_1 for
// the _1 types, Q8_K for K-quants, F16 for F16, BF16 for BF16, F32 for F32).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace agentkv {

GgmlType vec_dot_type(GgmlType weight_type);

// Exactly ggml's dequantize_row_* (must reproduce ../shared/fixtures/quant bit for bit).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
// ggml's reference quantizers (quantize_row_*_ref); n must be a multiple of the block size.
// Supported: every type in ggml_type.h except the integer/f64 ones.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);
// Dot product of a weight row (type) and an activation row in vec_dot_type(type); n elements.
// Runtime-dispatched (AVX-512 VNNI / AVX2 / scalar); all paths agree to float rounding.
float vec_dot(GgmlType type, int64_t n, const void* weight_row, const void* act_row);

}  // namespace agentkv
