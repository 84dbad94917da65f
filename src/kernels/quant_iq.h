// Internal to src/kernels: ggml's i-quant weight types iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s and
// iq4_xs (256-element superblocks, dot products against q8_K). One superblock's meaning is
// written once, as its unpacked form (IqSuperblock: signed integer magnitudes and 4/6-bit scale
// codes); dequantization, the scalar dot products and the tests all read that form, the SIMD
// kernels (quant_iq_dot_avx2.cpp / _avx512.cpp) read the blocks directly and are held to it.
//
// Dot-product float order: llama.cpp's x86 kernels (ggml-cpu/arch/x86/quants.c, the AVX2 code
// that its AVX2 and AVX-512 builds both run for these types) keep 8 int32 lanes per superblock —
// lane l sums element 4l..4l+3 of every group of 32, times its group's integer scale — add them
// to 8 float lanes with one fused multiply-add by d = d_w * d_q8 per superblock, reduce the lanes
// with hsum_float_8 and scale the sum by a power of two (1/8 for iq2, 1/4 for iq3_xxs). Integer
// sums are exact, so every level here reproduces ggml's result bit for bit.
#pragma once
#include <cstdint>

#include "agentkv/ggml_type.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

namespace agentkv::quant_detail {

// One superblock unpacked: element e is q[e] * integer_scale(ls[e / 16]) * d (up to the type's
// power-of-two factor), q[e] carrying the element's sign.
struct IqSuperblock {
  int8_t q[kQK_K];
  uint8_t ls[kQK_K / 16];  // the stored scale code of each 16 elements (4 bits; iq4_xs 6 bits)
  float d;                 // the block's f16 d
};

bool is_iq_type(GgmlType type);
// Unpacks superblock `ib` of a row of `type` (one of the six above).
void iq_unpack(GgmlType type, const void* row, int64_t ib, IqSuperblock* out);
// The integer scale a scale code stands for in the dot product (2 ls + 1; iq4_xs: ls - 32).
int iq_integer_scale(GgmlType type, int ls);
// The power of two the dot product's lane sum is multiplied by (0.125 iq2, 0.25 iq3_xxs, else 1).
float iq_dot_factor(GgmlType type);

void dequantize_iq(GgmlType type, const void* src, float* dst, int64_t n);
// Quantizers (quant_iq_quantize.cpp): valid blocks with low error, not ggml's exact search.
void quantize_iq(GgmlType type, const float* src, void* dst, int64_t n);

// Dot-product kernels per level (nullptr: none at that level, or not an i-quant type).
VecDotFn scalar_iq_vec_dot(GgmlType type);
VecDotFn avx2_iq_vec_dot(GgmlType type);
VecDotFn avx512_iq_vec_dot(GgmlType type);

}  // namespace agentkv::quant_detail
