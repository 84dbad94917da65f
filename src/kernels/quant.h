// Weight and KV element formats: ggml's block layouts, reference (de)quantizers and dot products.
// Numerics follow ggml: a dot product takes the weight row in its own type and the activation
// row already converted to vec_dot_type(weight type) (Q8_0 for the _0 types, iq4_nl, mxfp4 and
// agentkv's tq4 / tq3 KV types, Q8_1 for the _1 types, Q8_K for K-quants, F16 for F16, BF16 for BF16, F32
// for F32).
// Block structs: kernels/quant_blocks.h. Layouts and dispatch: docs/quant-types.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "agentkv/ggml_type.h"
#include "kernels/dispatch.h"

namespace agentkv {

// Activation type a weight type's dot product takes. Throws agentkv::Error for types that have
// no dot product (q8_1, q8_K, the integer and f64 types).
GgmlType vec_dot_type(GgmlType weight_type);

// Exactly ggml's dequantize_row_* (must reproduce ../shared/fixtures/quant bit for bit).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
// ggml's reference quantizers (quantize_row_*_ref); n must be a multiple of the block size.
// Supported: every type in ggml_type.h except the integer/f64 ones.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);
// Converts an activation row to act_type (= vec_dot_type of some weight) the way ggml-cpu does on
// x86 before a matrix multiply: q8_0 / q8_1 use ggml-cpu's AVX arithmetic (scale 127/amax, round
// half to even), which differs from quantize_row's _ref rounding in rare last-bit cases; every
// other type is quantize_row. Deterministic: the same bytes on every CPU level.
void quantize_activation_row(GgmlType act_type, const float* src, void* dst, int64_t n);

// A dot-product kernel: n elements, n a multiple of the weight type's block size.
using VecDotFn = float (*)(int64_t n, const void* weight_row, const void* act_row);

// Dot product of a weight row (type) and an activation row in vec_dot_type(type); n elements.
// Runtime-dispatched (AVX-512 VNNI / AVX2 / scalar); all paths agree to float rounding, and for
// q4_K / q6_K bit for bit (llama.cpp's x86 float order, docs/quant-types.md).
float vec_dot(GgmlType type, int64_t n, const void* weight_row, const void* act_row);
// The kernel vec_dot uses at the active CPU level (look it up once, call it many times).
VecDotFn vec_dot_fn(GgmlType type);
// The kernel of one level (clamped to the CPU's), for tests and benchmarks comparing paths.
VecDotFn vec_dot_fn(GgmlType type, CpuLevel level);

// llama.cpp on x86 repacks q4_K matrices whose row count is a multiple of 8 and multiplies them with
// a GEMM kernel for activation rows in groups of 4 (rows 0 .. n - n % 4 of a batch) and a GEMV kernel
// for the rest; the two round differently. vec_dot_fn(Q4_K) follows the GEMV kernel; a RowGroupDotFn
// follows the GEMM kernel for one weight row against the 4 activation rows of a group (act_rows,
// then every act_stride bytes), writing out[0..3]. nullptr for types with one numeric behaviour.
// Every CPU level returns the same bits as the scalar kernel.
inline constexpr int kRowGroupSize = 4;
using RowGroupDotFn = void (*)(int64_t n, const void* weight_row, const void* act_rows, size_t act_stride, float* out);
RowGroupDotFn row_group_dot_fn(GgmlType type);
RowGroupDotFn row_group_dot_fn(GgmlType type, CpuLevel level);
// Whether matmul multiplies whole groups of 4 activation rows of this weight with row_group_dot_fn.
bool uses_row_group_kernel(GgmlType type, int64_t n_out);

// llama.cpp on x86 (with AVX2) also repacks mxfp4 matrices whose row count is a multiple of 8, and
// its repacked GEMV and GEMM kernels (so its MUL_MAT and MUL_MAT_ID alike) share one float order
// that differs from ggml_vec_dot_mxfp4_q8_0's (vec_dot_fn): per output one fused multiply-add chain
// over the blocks, acc = fma(float(block sum), half_scale(w.e) * fp16(a.d), acc). matmul gives such
// matrices that order at every level (kernels/gemm_mxfp4.h, for any number of tokens);
// uses_repacked_order says when, repacked_dot_fn is the order's portable per-row kernel (nullptr
// for other types).
bool uses_repacked_order(GgmlType type, int64_t n_out);
VecDotFn repacked_dot_fn(GgmlType type);

}  // namespace agentkv
