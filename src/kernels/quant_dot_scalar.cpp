// Portable dot products, one per weight type, with the activation row in vec_dot_type(type).
// They follow ggml's generic kernels: exact integer sums per block, then the block's float scales
// (so the SIMD kernels only differ from these in float summation order). Float rows (f32, f16,
// bf16) take the lane order of llama.cpp's AVX2 build, not ggml's double-sum scalar loop; q4_K and
// q6_K fix the float order of the x86 kernels llama.cpp runs, and every SIMD level reproduces them
// bit for bit.
#include <cmath>
#include <vector>

#include "kernels/quant_kernels.h"

namespace agentkv::quant_detail {
namespace {

// Float rows follow the order of llama.cpp's AVX2 build (ggml_vec_dot_f32 / _f16 / _bf16 with
// GGML_F32_STEP 32), lane by lane, so this level gives the AVX2 level's bits and is held to the
// same llama.cpp reference (docs/performance.md). Element i of a 32-element step goes to lane i % 8
// of accumulator (i % 32) / 8.
// A product of two f16 (or two bf16) values is exact in float, so the fused step equals a plain
// multiply and add there (which the compiler may vectorise); f32 rows need the real fma.
template <class Load>
void float_lanes(int64_t np, Load load, float acc[4][8]) {
  for (int64_t i = 0; i < np; i += 32)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 8; ++l) {
        const int64_t e = i + 8 * k + l;
        if constexpr (Load::kExactProducts) {
          acc[k][l] += load.x(e) * load.y(e);
        } else {
          acc[k][l] = std::fma(load.x(e), load.y(e), acc[k][l]);
        }
      }
}

// GGML_F32x8_REDUCE: (acc0 + acc2) + (acc1 + acc3), 128-bit halves added, then two hadds.
float reduce_ggml_f32x8(const float acc[4][8]) {
  float v[8], t[4];
  for (int l = 0; l < 8; ++l) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  for (int l = 0; l < 4; ++l) t[l] = v[l] + v[l + 4];
  return (t[0] + t[1]) + (t[2] + t[3]);
}

// hsum_ps (and ggml_vec_dot_bf16's AVX2 reduction): halves added, then (0 + 2) + (1 + 3).
float hsum_8(const float v[8]) {
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = v[l] + v[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

struct F32Rows {
  static constexpr bool kExactProducts = false;
  const float* a;
  const float* b;
  float x(int64_t i) const { return a[i]; }
  float y(int64_t i) const { return b[i]; }
};
// fp16_to_fp32 of every half, for the scalar F16 dot (the bit arithmetic per element was most of
// the scalar level's decode time).
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = fp16_to_fp32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

struct F16Rows {
  static constexpr bool kExactProducts = true;
  const uint16_t* a;
  const uint16_t* b;
  const float* table = f16_table();
  float x(int64_t i) const { return table[a[i]]; }
  float y(int64_t i) const { return table[b[i]]; }
};
struct BF16Rows {
  static constexpr bool kExactProducts = true;
  const uint16_t* a;
  const uint16_t* b;
  float x(int64_t i) const { return bf16_to_fp32(a[i]); }
  float y(int64_t i) const { return bf16_to_fp32(b[i]); }
};

float dot_f32(int64_t n, const void* w, const void* a) {
  const F32Rows rows{static_cast<const float*>(w), static_cast<const float*>(a)};
  const int64_t np = n & ~int64_t{31};
  float acc[4][8] = {};
  float_lanes(np, rows, acc);
  float sum = reduce_ggml_f32x8(acc);
  for (int64_t i = np; i < n; ++i) {
    volatile float p = rows.x(i) * rows.y(i);  // rounded, as the AVX2 build's tail (no fusion)
    sum += p;
  }
  return sum;
}

float dot_f16(int64_t n, const void* w, const void* a) {
  const F16Rows rows{static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a)};
  const int64_t np = n & ~int64_t{31};
  float acc[4][8] = {};
  float_lanes(np, rows, acc);
  double sum = reduce_ggml_f32x8(acc);
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(rows.x(i) * rows.y(i));
  return static_cast<float>(sum);
}

float dot_bf16(int64_t n, const void* w, const void* a) {
  const BF16Rows rows{static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a)};
  const int64_t np = n & ~int64_t{31};
  float acc[4][8] = {};
  float_lanes(np, rows, acc);
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  double sum = hsum_8(v);
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(rows.x(i) * rows.y(i));
  return static_cast<float>(sum);
}

// ggml's hsum_float_8: lane l + lane l+4, then (0 + 2) + (1 + 3).
float hsum_float_8(const float lanes[8]) {
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// llama.cpp's x86 float order (ggml_vec_dot_q8_0_q8_0 and tinyBLAS's q8_0 GEMM both run it):
// eight float lanes, lane l accumulating fma(d, exact sum of products 4l..4l+3, lane) block
// after block, then ggml's hsum_float_8. Every CPU level and the q8_0 GEMM return these bits.
float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float lanes[8] = {};
  for (int64_t ib = 0; ib < n / kQK8_0; ++ib) {
    const float d = f16(x[ib].d) * f16(y[ib].d);
    for (int l = 0; l < 8; ++l) {
      int isum = 0;
      for (int k = 4 * l; k < 4 * l + 4; ++k) isum += x[ib].qs[k] * y[ib].qs[k];
      lanes[l] = std::fma(d, static_cast<float>(isum), lanes[l]);
    }
  }
  return hsum_float_8(lanes);
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t ib = 0; ib < n / kQK4_0; ++ib) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += ((x[ib].qs[j] & 0x0F) - 8) * y[ib].qs[j];
      isum += ((x[ib].qs[j] >> 4) - 8) * y[ib].qs[j + 16];
    }
    sum += static_cast<float>(isum) * f16(x[ib].d) * f16(y[ib].d);
  }
  return sum;
}

float dot_q4_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t ib = 0; ib < n / kQK4_1; ++ib) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (x[ib].qs[j] & 0x0F) * y[ib].qs[j];
      isum += (x[ib].qs[j] >> 4) * y[ib].qs[j + 16];
    }
    sum += (f16(x[ib].d) * f16(y[ib].d)) * static_cast<float>(isum) + f16(x[ib].m) * f16(y[ib].s);
  }
  return sum;
}

// 5-bit value j (0..31) of a q5 block: low nibble from qs, bit 4 from qh.
inline int q5_value(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return low | static_cast<int>(((qh >> j) & 1) << 4);
}

float dot_q5_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t ib = 0; ib < n / kQK5_0; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, 4);
    int isum = 0;
    for (int j = 0; j < kQK5_0; ++j) isum += (q5_value(x[ib].qs, qh, j) - 16) * y[ib].qs[j];
    sum += (f16(x[ib].d) * f16(y[ib].d)) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q5_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t ib = 0; ib < n / kQK5_1; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, 4);
    int isum = 0;
    for (int j = 0; j < kQK5_1; ++j) isum += q5_value(x[ib].qs, qh, j) * y[ib].qs[j];
    sum += (f16(x[ib].d) * f16(y[ib].d)) * static_cast<float>(isum) + f16(x[ib].m) * f16(y[ib].s);
  }
  return sum;
}

float dot_iq4_nl(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t ib = 0; ib < n / kQK4_NL; ++ib) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += y[ib].qs[j] * kIQ4NLValues[x[ib].qs[j] & 0xF];
      isum += y[ib].qs[j + 16] * kIQ4NLValues[x[ib].qs[j] >> 4];
    }
    sum += (f16(y[ib].d) * f16(x[ib].d)) * static_cast<float>(isum);
  }
  return sum;
}

// ggml_vec_dot_mxfp4_q8_0_generic: per block the exact integer sum, times fp16(a.d) * half_scale(w.e)
// rounded, added to one float sum.
float dot_mxfp4(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t ib = 0; ib < n / kQK_MXFP4; ++ib) sum = mxfp4_add_block(sum, x[ib], y[ib]);
  return sum;
}

// K-quants: weights are unpacked to int8 per super-block, each 16- or 32-element sub-block's
// integer dot is scaled by its integer sub-block scale, and mins use the q8_K group sums.
float dot_q2_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
    const float dall = y[i].d * f16(x[i].d);
    const float dmin = y[i].d * f16(x[i].dmin);
    int isum = 0;
    const int8_t* q8 = y[i].qs;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q2 = x[i].qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, q8 += 16) {
          const int sub = 8 * half + 2 * (shift / 2) + part;
          int sub_sum = 0;
          for (int l = 0; l < 16; ++l) sub_sum += q8[l] * ((q2[16 * part + l] >> shift) & 3);
          isum += (x[i].scales[sub] & 0xF) * sub_sum;
        }
      }
    }
    sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

float dot_q3_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t scales[16];
    q3k_scales(x[i].scales, scales);
    int isum = 0;
    for (int j = 0; j < kQK_K; ++j) {
      // Element j: plane (j % 128) / 32 of qs byte (j / 128) * 32 + j % 32, high bit j / 32 of hmask.
      const int plane = (j % 128) / 32;
      const int low = (x[i].qs[(j / 128) * 32 + j % 32] >> (2 * plane)) & 3;
      const int high = (x[i].hmask[j % 32] >> (j / 32)) & 1;
      isum += (scales[j / 16] - 32) * (low - (high ? 0 : 4)) * y[i].qs[j];
    }
    sum += f16(x[i].d) * y[i].d * static_cast<float>(isum);
  }
  return sum;
}

// Shared by q4_K and q5_K once the 256 weights are unpacked to 0..31.
float k4_superblock_dot(const uint8_t* q, const uint8_t* packed_scales, float d, float dmin,
                        const BlockQ8_K& y) {
  int isum = 0, summs = 0;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, packed_scales, &sc, &m);
    int sub = 0;
    for (int l = 0; l < 32; ++l) sub += q[32 * j + l] * y.qs[32 * j + l];
    isum += sc * sub;
    summs += m * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
  }
  return d * y.d * static_cast<float>(isum) - dmin * y.d * static_cast<float>(summs);
}

// q4_K in the float order of ggml-cpu's x86 q4_K_8x8 repacked kernels, which llama.cpp uses for
// every q4_K matrix with a multiple of 8 rows. Integer sums are exact; what matters is where they
// meet the float scales: the GEMV kernel (single activation rows) adds one fused multiply-add per
// 256-weight superblock, the GEMM kernel (activation rows in groups of 4) one per 64 weights, each
// into separate running sums for the scaled quants and for the mins, subtracted at the end.
// pair_dots[j] / pair_mins[j]: weights 64j..64j+63 (sub-blocks 2j and 2j+1).
void q4k_pair_sums(const BlockQ4_K& x, const BlockQ8_K& y, int pair_dots[4], int pair_mins[4]) {
  for (int j = 0; j < 4; ++j) {
    uint8_t sc_lo, m_lo, sc_hi, m_hi;
    k4_scale_min(2 * j, x.scales, &sc_lo, &m_lo);
    k4_scale_min(2 * j + 1, x.scales, &sc_hi, &m_hi);
    int lo = 0, hi = 0;
    for (int l = 0; l < 32; ++l) {
      lo += (x.qs[32 * j + l] & 0xF) * y.qs[64 * j + l];
      hi += (x.qs[32 * j + l] >> 4) * y.qs[64 * j + 32 + l];
    }
    pair_dots[j] = sc_lo * lo + sc_hi * hi;
    pair_mins[j] = m_lo * (y.bsums[4 * j] + y.bsums[4 * j + 1]) + m_hi * (y.bsums[4 * j + 2] + y.bsums[4 * j + 3]);
  }
}

float dot_q4_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0, acc_min = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int dots[4], mins[4];
    q4k_pair_sums(x[i], y[i], dots, mins);
    const int dot = dots[0] + dots[1] + dots[2] + dots[3];
    const int min = mins[0] + mins[1] + mins[2] + mins[3];
    acc = std::fma(static_cast<float>(dot), f16(x[i].d) * y[i].d, acc);
    acc_min = std::fma(static_cast<float>(min), f16(x[i].dmin) * y[i].d, acc_min);
  }
  return acc - acc_min;
}

float dot_q4_K_grouped(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0, acc_min = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int dots[4], mins[4];
    q4k_pair_sums(x[i], y[i], dots, mins);
    const float d = f16(x[i].d) * y[i].d, dmin = f16(x[i].dmin) * y[i].d;
    for (int j = 0; j < 4; ++j) {
      acc = std::fma(static_cast<float>(dots[j]), d, acc);
      acc_min = std::fma(static_cast<float>(mins[j]), dmin, acc_min);
    }
  }
  return acc - acc_min;
}

float dot_q5_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  uint8_t q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t h = x[i].qh[l];
        q[64 * j + l] = static_cast<uint8_t>((x[i].qs[32 * j + l] & 0xF) | (((h >> (2 * j)) & 1) << 4));
        q[64 * j + 32 + l] = static_cast<uint8_t>((x[i].qs[32 * j + l] >> 4) | (((h >> (2 * j + 1)) & 1) << 4));
      }
    }
    sum += k4_superblock_dot(q, x[i].scales, f16(x[i].d), f16(x[i].dmin), y[i]);
  }
  return sum;
}

// q6_K in the float order of ggml-cpu's x86 (AVX2) vec_dot, which llama.cpp uses for q6_K (not
// repacked on x86): per superblock, 8 integer lanes (lane m takes weights 4m..4m+3 of every group of
// 32), each lane scaled into its own float sum by a fused multiply-add; the 8 sums are reduced as
// ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)).
float dot_q6_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int8_t q[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      int8_t* out = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        out[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int e = 0; e < kQK_K; ++e) lanes[(e % 32) / 4] += x[i].scales[e / 16] * q[e] * y[i].qs[e];
    const float d = y[i].d * f16(x[i].d);
    for (int m = 0; m < 8; ++m) acc[m] = std::fma(d, static_cast<float>(lanes[m]), acc[m]);
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

}  // namespace

VecDotFn scalar_vec_dot(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return dot_f32;
    case GgmlType::F16: return dot_f16;
    case GgmlType::BF16: return dot_bf16;
    case GgmlType::Q8_0: return dot_q8_0;
    case GgmlType::Q4_0: return dot_q4_0;
    case GgmlType::Q4_1: return dot_q4_1;
    case GgmlType::Q5_0: return dot_q5_0;
    case GgmlType::Q5_1: return dot_q5_1;
    case GgmlType::IQ4_NL: return dot_iq4_nl;
    case GgmlType::MXFP4: return dot_mxfp4;
    case GgmlType::TQ4: return tq4_dot_ref;
    case GgmlType::TQ3: return tq3_dot_ref;
    case GgmlType::Q2_K: return dot_q2_K;
    case GgmlType::Q3_K: return dot_q3_K;
    case GgmlType::Q4_K: return dot_q4_K;
    case GgmlType::Q5_K: return dot_q5_K;
    case GgmlType::Q6_K: return dot_q6_K;
    default: return nullptr;
  }
}

namespace {
void dot4_q4_K_grouped(int64_t n, const void* w, const void* a, size_t a_stride, float* out) {
  for (int r = 0; r < kRowGroupSize; ++r) out[r] = dot_q4_K_grouped(n, w, static_cast<const uint8_t*>(a) + r * a_stride);
}
}  // namespace

RowGroupDotFn scalar_row_group_dot(GgmlType type) { return type == GgmlType::Q4_K ? dot4_q4_K_grouped : nullptr; }

float dot_mxfp4_chain(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc = 0;
  for (int64_t ib = 0; ib < n / kQK_MXFP4; ++ib) acc = mxfp4_chain_step(acc, mxfp4_block_sum(x[ib], y[ib].qs), x[ib].e, y[ib].d);
  return acc;
}

}  // namespace agentkv::quant_detail
