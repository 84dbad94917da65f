// agentkv's TurboQuant-family KV cache types tq4 / tq3 (docs/quant-types.md, "TurboQuant-family
// KV types"): blocks of 64 already Hadamard-rotated elements (so ~Gaussian), one f16 scale d and a
// 4- or 3-bit index per element into a Lloyd-Max codebook of N(0,1) (tq4's constrained to hold a
// zero), stored as int8 levels (kTQ4Levels / kTQ3Levels) so that the K dot product with q8_0
// activations is integer.
// Scalar reference code; the AVX2 dot products are in quant_dot_avx2.cpp.
#include <algorithm>
#include <cmath>

#include "kernels/quant_kernels.h"

namespace agentkv::quant_detail {

// Lloyd-Max quantizers of the standard normal, from Lloyd's algorithm on the Gaussian density run
// to convergence (centroid of each cell = (phi(a) - phi(b)) / (Phi(b) - Phi(a)), boundaries the
// midpoints); tq_quant_test recomputes them. tq4's keeps its 9th level at 0 (Lloyd's step skips
// it): 1 % more MSE on N(0,1) than the symmetric 16-level quantizer, but K rows with a zero level
// cost ~25 % less KL on the trained model (docs/quant-types.md, "Codebooks").
const double kTQ4Codebook[16] = {-2.780762, -2.126971, -1.684442, -1.330896, -1.025597, -0.749287,
                                 -0.490882, -0.242994, 0.0,       0.273857,  0.554764,  0.851134,
                                 1.174879,  1.546057,  2.006474,  2.680866};
const double kTQ3Codebook[8] = {-2.151946, -1.343909, -0.756005, -0.245094, 0.245094, 0.756005, 1.343909, 2.151946};

namespace {

// The index nearest_level_index gives for every 2v in [-254, 254): the number of midpoints at or
// below it. The doubled midpoints levels[k - 1] + levels[k] are integers in [-253, 253], so
// "mid <= 2v" is "mid <= floor(2v)": one lookup per element, exact.
struct IndexTable {
  uint8_t at[508];
  explicit IndexTable(const int8_t* levels, int n) {
    for (int f = -254; f < 254; ++f) {
      int idx = 0;
      for (int k = 1; k < n; ++k) idx += levels[k - 1] + levels[k] <= f;
      at[f + 254] = static_cast<uint8_t>(idx);
    }
  }
};

const IndexTable& index_table(const int8_t* levels, int n) {
  static const IndexTable tq4(kTQ4Levels, 16), tq3(kTQ3Levels, 8);
  return levels == kTQ4Levels ? tq4 : tq3;
}

// Picks levels for 64 elements against scale d (d = 0: every index n/2, dequantized as 0): the
// index nearest_level_index gives, by table (the search runs this 19 times per block; a binary
// search's data-dependent branches made a block cost 15 us).
void pick(const float* x, float d, const int8_t* levels, int n, uint8_t* q) {
  const float id = d != 0.f ? 1.f / d : 0.f;
  const IndexTable& table = index_table(levels, n);
  for (int j = 0; j < kQKTQ; ++j) {
    const float v = id * x[j];
    const float v2 = v + v;
    if (v2 >= 254.f) {
      q[j] = static_cast<uint8_t>(n - 1);
    } else if (v2 >= -254.f) {
      q[j] = table.at[static_cast<int>(std::floor(v2)) + 254];
    } else {
      q[j] = 0;  // below every midpoint, or NaN (no comparison holds)
    }
  }
}

// Sum of x * L and L * L for the picked levels. x * L is summed in 8 interleaved partial sums
// added in a fixed tree (written out, so every build and CPU level rounds the same way and the
// loop vectorizes); L * L is a sum of integers, exact in float.
void fit(const float* x, const uint8_t* q, const int8_t* levels, float* sumqx, float* sumq2) {
  float part[8] = {};
  int32_t l2 = 0;
  for (int j = 0; j < kQKTQ; j += 8) {
    for (int k = 0; k < 8; ++k) {
      const int32_t l = levels[q[j + k]];
      part[k] += static_cast<float>(l) * x[j + k];
      l2 += l * l;
    }
  }
  *sumqx = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  *sumq2 = static_cast<float>(l2);
}

// The scale of one block (see TqScale); levels[0] is -127, the int8 image of -c_max (c_max the
// codebook's largest magnitude).
float block_scale(const float* x, const int8_t* levels, int n, double c_max, TqScale how) {
  constexpr float kLevelMax = 127.f;
  float sumx2 = 0.f;
  for (int j = 0; j < kQKTQ; ++j) sumx2 += x[j] * x[j];
  if (!(sumx2 > 0.f)) return 0.f;
  // x / rms ~ N(0, 1): codebook value c is level c * 127 / c_max, so d = rms * c_max / 127.
  const float d_rms = std::sqrt(sumx2 / kQKTQ) * static_cast<float>(c_max) / kLevelMax;
  if (how == TqScale::Rms) return d_rms;
  uint8_t q[kQKTQ];
  float sumqx, sumq2;
  if (how == TqScale::NormCorrected) {
    pick(x, d_rms, levels, n, q);
    fit(x, q, levels, &sumqx, &sumq2);
    return std::sqrt(sumx2 / sumq2);
  }
  // Search: levels picked at 17 trial scales d_rms * (1 + t / 16), t = -8..8, and at amax / 127
  // (the block's largest element on the outermost level: blocks with an outlier, e.g. unrotated
  // rows), each refit by least squares (d = sum(xL) / sum(L^2), error sum(x^2) - sum(xL)^2 /
  // sum(L^2)); the best fit wins.
  float amax = 0.f;
  for (int j = 0; j < kQKTQ; ++j) amax = std::max(amax, std::fabs(x[j]));
  float best_d = d_rms, best = -1.f;
  for (int t = -8; t <= 9; ++t) {
    const float trial = t <= 8 ? d_rms * (1.f + static_cast<float>(t) / 16.f) : amax / kLevelMax;
    pick(x, trial, levels, n, q);
    fit(x, q, levels, &sumqx, &sumq2);
    if (sumq2 > 0.f && sumqx > 0.f && sumqx * sumqx / sumq2 > best) {
      best = sumqx * sumqx / sumq2;
      best_d = sumqx / sumq2;
    }
  }
  return best_d;
}

// The stored f16 scale, and the levels re-picked against it (the nearest levels for the scale
// dequantization will use).
float stored_scale(const float* x, const int8_t* levels, int n, double c_max, TqScale how, f16_bits* d_out,
                   uint8_t* q) {
  *d_out = fp32_to_fp16(block_scale(x, levels, n, c_max, how));
  const float d = f16(*d_out);
  pick(x, d, levels, n, q);
  return d;
}

}  // namespace

void quantize_tq4(const float* x, BlockTQ4* y, int64_t n, TqScale how) {
  for (int64_t i = 0; i < n / kQKTQ; ++i, x += kQKTQ) {
    uint8_t q[kQKTQ];
    stored_scale(x, kTQ4Levels, 16, -kTQ4Codebook[0], how, &y[i].d, q);
    for (int j = 0; j < kQKTQ / 2; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 32] << 4));
  }
}

void quantize_tq3(const float* x, BlockTQ3* y, int64_t n, TqScale how) {
  for (int64_t i = 0; i < n / kQKTQ; ++i, x += kQKTQ) {
    uint8_t q[kQKTQ];
    stored_scale(x, kTQ3Levels, 8, -kTQ3Codebook[0], how, &y[i].d, q);
    uint64_t qh = 0;
    for (int j = 0; j < kQKTQ / 4; ++j) y[i].qs[j] = 0;
    for (int j = 0; j < kQKTQ; ++j) {
      y[i].qs[j % 16] = static_cast<uint8_t>(y[i].qs[j % 16] | ((q[j] & 3) << (2 * (j / 16))));
      qh |= static_cast<uint64_t>(q[j] >> 2) << j;
    }
    std::memcpy(y[i].qh, &qh, 8);
  }
}

void dequantize_tq4(const BlockTQ4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKTQ; ++i, y += kQKTQ) {
    const float d = f16(x[i].d);
    for (int j = 0; j < kQKTQ / 2; ++j) {
      y[j] = d * static_cast<float>(kTQ4Levels[x[i].qs[j] & 0xF]);
      y[j + 32] = d * static_cast<float>(kTQ4Levels[x[i].qs[j] >> 4]);
    }
  }
}

int tq3_index(const BlockTQ3& b, int j) {
  return ((b.qs[j % 16] >> (2 * (j / 16))) & 3) | (((b.qh[j / 8] >> (j % 8)) & 1) << 2);
}

void dequantize_tq3(const BlockTQ3* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKTQ; ++i, y += kQKTQ) {
    const float d = f16(x[i].d);
    uint64_t qh;
    std::memcpy(&qh, x[i].qh, 8);
    for (int k = 0; k < 4; ++k) {  // elements 16k .. 16k + 15 (tq3_index, unrolled per group)
      for (int j = 0; j < 16; ++j) {
        const int idx = ((x[i].qs[j] >> (2 * k)) & 3) | static_cast<int>(((qh >> (16 * k + j)) & 1) << 2);
        y[16 * k + j] = d * static_cast<float>(kTQ3Levels[idx]);
      }
    }
  }
}

// K . q with q in q8_0 (two q8_0 blocks per tq block): exact int32 dot per 32 elements, scaled by
// d_tq * d_q8 and summed in float, the 32-element halves in order (the AVX2 kernel's grouping).
float tq4_dot_ref(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockTQ4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t ib = 0; ib < n / kQKTQ; ++ib) {
    const float d = f16(x[ib].d);
    int isum[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      isum[0] += y[2 * ib].qs[j] * kTQ4Levels[x[ib].qs[j] & 0xF];
      isum[1] += y[2 * ib + 1].qs[j] * kTQ4Levels[x[ib].qs[j] >> 4];
    }
    for (int h = 0; h < 2; ++h) sum += (d * f16(y[2 * ib + h].d)) * static_cast<float>(isum[h]);
  }
  return sum;
}

float tq3_dot_ref(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockTQ3*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t ib = 0; ib < n / kQKTQ; ++ib) {
    const float d = f16(x[ib].d);
    for (int h = 0; h < 2; ++h) {
      int isum = 0;
      for (int j = 0; j < 32; ++j) isum += y[2 * ib + h].qs[j] * kTQ3Levels[tq3_index(x[ib], 32 * h + j)];
      sum += (d * f16(y[2 * ib + h].d)) * static_cast<float>(isum);
    }
  }
  return sum;
}

}  // namespace agentkv::quant_detail
