// Internal to src/kernels: the per-type functions behind quant.h's type-switched entry points.
// Scalar reference code lives in quant_simple.cpp / quant_kquants.cpp / quant_dot_scalar.cpp;
// SIMD dot products in quant_dot_avx2.cpp / quant_dot_avx512.cpp (each compiled for its own target).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "agentkv/fp16.h"
#include "agentkv/ggml_type.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

namespace agentkv::quant_detail {

// ggml's nearest_int: round half to even via the 1.5 * 2^23 trick (valid for |v| < 2^22).
inline int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  return static_cast<int>(fp32_to_bits(shifted) & 0x007fffffu) - 0x00400000;
}

inline float f16(f16_bits h) { return fp16_to_fp32(h); }

// Index of the level nearest to v among n sorted int8 levels (n a power of two: iq4_nl, tq4, tq3);
// a tie goes to the upper level. Compares 2v with the sum of two neighbouring levels (exact).
inline int nearest_level_index(const int8_t* levels, int n, float v) {
  const float v2 = v + v;
  int idx = 0;
  for (int step = n / 2; step > 0; step >>= 1) {
    const int j = idx + step;
    if (v2 >= static_cast<float>(levels[j - 1] + levels[j])) idx = j;
  }
  return idx;
}

// The exact integer dot of an mxfp4 block's (doubled) values with a q8_0 block's 32 quants.
inline int mxfp4_block_sum(const BlockMXFP4& x, const int8_t* q8) {
  int sum = 0;
  for (int j = 0; j < kQK_MXFP4 / 2; ++j)
    sum += q8[j] * kMXFP4Values[x.qs[j] & 0xF] + q8[j + 16] * kMXFP4Values[x.qs[j] >> 4];
  return sum;
}

// ggml_vec_dot_mxfp4_q8_0's last step on x86 for an odd block count (and every step of its generic
// kernel): the block's scale fp16(a.d) * half_scale(w.e), times the integer sum, rounded, then added
// (GCC's Zen tuning of llama.cpp's reference build does not fuse this loop-carried chain).
inline float mxfp4_add_block(float sum, const BlockMXFP4& x, const BlockQ8_0& y) {
  const float d = fp16_to_fp32(y.d) * mxfp4_half_scale(x.e);
  float term = d * static_cast<float>(mxfp4_block_sum(x, y.qs));
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(term));  // keep the product rounded on its own in the SIMD files too
#endif
  return sum + term;
}

// The float order of llama.cpp's repacked mxfp4 kernels (matmul's, docs/quant-types.md): one chain
// per output, acc = fma(float(integer block sum), half_scale(w.e) * fp16(a.d), acc), block after block.
inline float mxfp4_chain_step(float acc, int block_sum, uint8_t e, f16_bits act_d) {
  return std::fma(static_cast<float>(block_sum), mxfp4_half_scale(e) * fp16_to_fp32(act_d), acc);
}

// Unpacks the 6-bit scale and min of sub-block j (0..7) from q4_K / q5_K's 12 scale bytes.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Unpacks q3_K's sixteen 6-bit scales (still offset by 32) from its 12 scale bytes.
inline void q3k_scales(const uint8_t* packed, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>(low | (high << 4));
  }
}

// ---- reference quantizers (ggml's quantize_row_*_ref) and dequantizers, n elements ----
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n);
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n);
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n);
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t n);
void quantize_q2_K(const float* x, BlockQ2_K* y, int64_t n);
void quantize_q3_K(const float* x, BlockQ3_K* y, int64_t n);
void quantize_q4_K(const float* x, BlockQ4_K* y, int64_t n);
void quantize_q5_K(const float* x, BlockQ5_K* y, int64_t n);
void quantize_q6_K(const float* x, BlockQ6_K* y, int64_t n);
void quantize_q8_K(const float* x, BlockQ8_K* y, int64_t n);

// agentkv's TurboQuant-family KV types (quant_tq.cpp). The block scale d: Rms = the block's RMS
// mapped onto the codebook; Search = least-squares refits of the levels picked at 17 trial scales
// around it and at amax / 127, the best kept (the default); NormCorrected = levels picked at the
// RMS scale, d then set so the dequantized block keeps the block's L2 norm. The levels are always
// re-picked against the stored f16 d. Rms / NormCorrected exist for the measurements in
// docs/quant-types.md.
enum class TqScale { Rms, Search, NormCorrected };
extern const double kTQ4Codebook[16];  // 16-level Lloyd-Max codebook of N(0,1) with a zero level
extern const double kTQ3Codebook[8];   // 8-level Lloyd-Max codebook of N(0,1) (symmetric)
void quantize_tq4(const float* x, BlockTQ4* y, int64_t n, TqScale how = TqScale::Search);
void quantize_tq3(const float* x, BlockTQ3* y, int64_t n, TqScale how = TqScale::Search);
void dequantize_tq4(const BlockTQ4* x, float* y, int64_t n);
void dequantize_tq3(const BlockTQ3* x, float* y, int64_t n);
int tq3_index(const BlockTQ3& b, int j);  // the 3-bit index of element j (0..63)
float tq4_dot_ref(int64_t n, const void* w, const void* a);  // scalar K dot products, q8_0 activations
float tq3_dot_ref(int64_t n, const void* w, const void* a);

// ggml-cpu's x86 activation quantizers for q8_0 / q8_1 (scale 127/amax, round half to even):
// they differ from the _ref ones in the last bit, and llama.cpp uses them on x86.
void quantize_q8_0_activation(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_1_activation(const float* x, BlockQ8_1* y, int64_t n);

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t n);
void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t n);
void dequantize_q2_K(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_q3_K(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_q4_K(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_q5_K(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_q6_K(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_q8_K(const BlockQ8_K* x, float* y, int64_t n);

// ---- dot-product kernel tables, one per CPU level; nullptr where a level has no kernel ----
VecDotFn scalar_vec_dot(GgmlType type);
VecDotFn avx2_vec_dot(GgmlType type);
VecDotFn avx512_vec_dot(GgmlType type);
// Kernels for activation rows that ggml-cpu multiplies in groups of 4 (see row_group_dot_fn);
// nullptr where the type has no separate grouped numerics.
RowGroupDotFn scalar_row_group_dot(GgmlType type);
RowGroupDotFn avx2_row_group_dot(GgmlType type);
RowGroupDotFn avx512_row_group_dot(GgmlType type);
// The per-row kernel of the repacked mxfp4 order (quant.h repacked_dot_fn), portable.
float dot_mxfp4_chain(int64_t n, const void* w, const void* a);
// SIMD dequantizers with the scalar ones' bits (tq4 / tq3: the V rows attention reads); nullptr
// for the other types.
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
DequantizeFn avx2_dequantize(GgmlType type);

}  // namespace agentkv::quant_detail
