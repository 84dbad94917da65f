// ggml's quantized block layouts, byte for byte (ggml-common.h). Every struct is packed by
// construction (only uint8/int8/uint16/int16/float members in an order with no padding), and the
// static_asserts pin the sizes that GGUF files depend on.
#pragma once
#include <cstdint>
#include <cstring>

namespace agentkv {

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;
constexpr int kQK4_NL = 32;
constexpr int kQK_MXFP4 = 32;
constexpr int kQKTQ = 64;         // block of the TurboQuant-family KV types tq4 / tq3
constexpr int kQK_K = 256;       // super-block size of the K-quants
constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of q4_K / q5_K

using f16_bits = uint16_t;  // IEEE half, stored as raw bits

// d * (q - 8), q in 0..15; element j in low nibble of qs[j], element j+16 in the high nibble.
struct BlockQ4_0 {
  f16_bits d;
  uint8_t qs[kQK4_0 / 2];
};
// d * q + m
struct BlockQ4_1 {
  f16_bits d;
  f16_bits m;
  uint8_t qs[kQK4_1 / 2];
};
// d * (q - 16), q 5 bits: low 4 bits as in q4_0, bit 4 of element j is bit j of qh.
struct BlockQ5_0 {
  f16_bits d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
struct BlockQ5_1 {
  f16_bits d;
  f16_bits m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
struct BlockQ8_0 {
  f16_bits d;
  int8_t qs[kQK8_0];
};
// Activation format of the _1 types: s = d * sum(qs).
struct BlockQ8_1 {
  f16_bits d;
  f16_bits s;
  int8_t qs[kQK8_1];
};
// Non-linear 4-bit: d * kIQ4NLValues[q].
struct BlockIQ4_NL {
  f16_bits d;
  uint8_t qs[kQK4_NL / 2];
};

// OCP microscaling FP4 (gpt-oss's expert weights): e is an E8M0 exponent (scale 2^(e - 127)), q a
// 4-bit E2M1 code; element j in the low nibble of qs[j], element j+16 in the high nibble.
// Value: mxfp4_half_scale(e) * kMXFP4Values[q] (the values are doubled, the scale halved).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK_MXFP4 / 2];
};

// agentkv's TurboQuant-family KV types (quant_tq.cpp): d * kTQ4Levels[q], q a 4-bit codebook index;
// element j in the low nibble of qs[j], element j+32 in the high nibble (64 elements, 34 bytes).
struct BlockTQ4 {
  f16_bits d;
  uint8_t qs[kQKTQ / 2];
};
// d * kTQ3Levels[q], q 3 bits: low 2 bits of element j at bits 2*(j/16) of qs[j % 16], bit 2 of
// element j at bit j of the little-endian 64-bit qh (64 elements, 26 bytes).
struct BlockTQ3 {
  f16_bits d;
  uint8_t qs[kQKTQ / 4];
  uint8_t qh[kQKTQ / 8];
};

// 16 sub-blocks of 16: scale (low nibble) and min (high nibble) per sub-block, 2-bit quants.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  f16_bits d;
  f16_bits dmin;
};
// 16 sub-blocks of 16: 6-bit signed scales (offset 32), 2 low bits in qs, high bit in hmask.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  f16_bits d;
};
// 8 sub-blocks of 32: 6-bit scale and min each (packed in 12 bytes), 4-bit quants.
struct BlockQ4_K {
  f16_bits d;
  f16_bits dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  f16_bits d;
  f16_bits dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16: int8 scales, 6-bit quants (offset 32): 4 low bits in ql, 2 high in qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  f16_bits d;
};
// Activation format of the K-quants: float scale, and sums of each group of 16 quants.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockTQ4) == 34);
static_assert(sizeof(BlockTQ3) == 26);
// ---- i-quants (ggml's iq2_xxs ... iq4_xs), 256 elements; grids in kernels/iq_grids.h ----
// iq2_xxs: per 32 elements two u32 (as qs[4 * ib32 ..]): the first holds 4 grid indices (bytes,
// kIQ2XXSGrid, 8 magnitudes each), the second 4 x 7 sign bits (kIQ2KSigns) and a 4-bit scale
// ls in bits 28..31. Value: d * (0.5 + ls) / 4 * grid * sign.
struct BlockIQ2_XXS {
  f16_bits d;
  uint16_t qs[kQK_K / 8];
};
// iq2_xs: qs[4 * ib32 + l] = 9-bit kIQ2XSGrid index | 7-bit sign index << 9; scales[ib32]: a
// nibble per 16 elements. Value: d * (0.5 + ls) / 4 * grid * sign.
struct BlockIQ2_XS {
  f16_bits d;
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};
// iq2_s: qs[0..31] low 8 bits of the 10-bit kIQ2SGrid indices (2 high bits per index in qh[ib32]),
// qs[32..63] one plain sign byte per 8 elements; scales as iq2_xs.
struct BlockIQ2_S {
  f16_bits d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
// iq3_xxs: qs[0..63] kIQ3XXSGrid indices (4 magnitudes each), then per 32 elements a u32 of
// 4 x 7 sign bits and a 4-bit scale ls in bits 28..31. Value: d * (0.5 + ls) / 2 * grid * sign.
struct BlockIQ3_XXS {
  f16_bits d;
  uint8_t qs[3 * kQK_K / 8];
};
// iq3_s: 9-bit kIQ3SGrid indices (low 8 bits in qs, bit 8 in qh: bit k of qh[ib32] for index
// k of its 32 elements), a plain sign byte per 8 elements, a nibble scale per 32 elements (two
// per byte). Value: d * (1 + 2 * ls) * grid * sign.
struct BlockIQ3_S {
  f16_bits d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
// iq4_xs: iq4_nl's levels with a 6-bit scale per 32 elements (low 4 bits in scales_l, a nibble
// per group; high 2 bits in scales_h, 2 per group), offset 32; qs as iq4_nl per 32 elements.
// Value: d * (ls - 32) * kIQ4NLValues[q].
struct BlockIQ4_XS {
  f16_bits d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};

static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ4_XS) == 136);

// The 16 levels of iq4_nl (ggml's kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The E2M1 values of mxfp4 codes 0..15 doubled, so that they are integers (ggml's kvalues_mxfp4):
// 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, times 2.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half the E8M0 scale 2^(e - 127), i.e. 2^(e - 128) (ggml's GGML_E8M0_TO_FP32_HALF): the float with
// exponent field e - 1 for e >= 2, the subnormals 2^-128 and 2^-127 for e = 0 and 1. e = 255 gives
// 2^127 (E8M0's NaN code is not special-cased, as in ggml).
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The tq codebooks (quant_tq.cpp: kTQ4Codebook / kTQ3Codebook) as int8 levels, round(c * 127 /
// max |c|), so that the dot products with q8_0 activations are integer (as iq4_nl's).
// Dequantization is d * level; the quantizer picks among these levels, i.e. the codebook actually
// used is the int8-rounded one scaled by d. tq4's has a zero level (9th of 16), tq3's has none.
inline constexpr int8_t kTQ4Levels[16] = {-127, -97, -77, -61, -47, -34, -22, -11,
                                          0,    13,  25,  39,  54,  71,  92,  122};
inline constexpr int8_t kTQ3Levels[8] = {-127, -79, -45, -14, 14, 45, 79, 127};

}  // namespace agentkv
