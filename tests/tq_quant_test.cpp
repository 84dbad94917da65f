// agentkv's TurboQuant-family KV types tq4 / tq3 (src/kernels/quant_tq.cpp, docs/quant-types.md):
// the codebooks recomputed by Lloyd's algorithm, exact bytes per element, quantize / dequantize
// against a reference written here, the K dot product against the dequantized rows, AVX2 against
// scalar, and the block-scale measurements the docs quote.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "agentkv/fp16.h"
#include "agentkv/ggml_type.h"
#include "kernels/dispatch.h"
#include "kernels/hadamard.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_kernels.h"

namespace agentkv {
namespace {
using quant_detail::TqScale;

struct TqType {
  GgmlType type;
  int levels;                // codebook size
  const int8_t* lut;         // int8 levels
  const double* codebook;    // the Lloyd-Max codebook, ascending
  int zero_at;               // index of the level Lloyd's algorithm keeps at 0, or -1
  size_t block_bytes;
};
const TqType kTq4{GgmlType::TQ4, 16, kTQ4Levels, quant_detail::kTQ4Codebook, 8, 34};
const TqType kTq3{GgmlType::TQ3, 8, kTQ3Levels, quant_detail::kTQ3Codebook, -1, 26};
const TqType kTqTypes[] = {kTq4, kTq3};

// Lloyd's algorithm on the N(0, 1) density: centroids (phi(a) - phi(b)) / (Phi(b) - Phi(a)) of
// the cells between midpoints, iterated to a fixed point; level zero_at (if any) stays at 0.
std::vector<double> lloyd_max_gaussian(int n, int zero_at) {
  auto phi = [](double x) { return std::isinf(x) ? 0.0 : std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  std::vector<double> c(n);
  for (int i = 0; i < n; ++i) c[i] = -3 + 6 * (i + 0.5) / n;
  for (int it = 0; it < 100000; ++it) {
    std::vector<double> b(n + 1);
    b[0] = -INFINITY;
    b[n] = INFINITY;
    for (int i = 1; i < n; ++i) b[i] = (c[i - 1] + c[i]) / 2;
    double change = 0;
    for (int i = 0; i < n; ++i) {
      const double next = i == zero_at ? 0.0 : (phi(b[i]) - phi(b[i + 1])) / (cdf(b[i + 1]) - cdf(b[i]));
      change = std::max(change, std::abs(next - c[i]));
      c[i] = next;
    }
    if (change < 1e-13) break;
  }
  return c;
}

TEST(TqQuant, CodebooksAreTheLloydMaxQuantizersOfTheStandardNormal) {
  for (const TqType& t : kTqTypes) {
    SCOPED_TRACE(ggml_type_name(t.type));
    const std::vector<double> c = lloyd_max_gaussian(t.levels, t.zero_at);
    double c_max = 0;
    for (int i = 0; i < t.levels; ++i) {
      EXPECT_NEAR(c[i], t.codebook[i], 1e-5) << i;
      c_max = std::max(c_max, std::abs(c[i]));
    }
    EXPECT_NEAR(c_max, -c[0], 1e-9);  // the quantizer's scale search assumes level 0 is -127
    // The int8 levels are round(c * 127 / c_max).
    for (int i = 0; i < t.levels; ++i) EXPECT_EQ(t.lut[i], static_cast<int>(std::lround(c[i] * 127 / c_max))) << i;
  }
  EXPECT_EQ(kTQ4Levels[8], 0);
}

TEST(TqQuant, TypeTableBytesPerElementAndPrivateIds) {
  for (const TqType& t : kTqTypes) {
    const auto& info = ggml_type_info(t.type);
    EXPECT_EQ(info.block_size, 64);
    EXPECT_EQ(info.type_size, t.block_bytes);
    EXPECT_TRUE(info.quantized);  // so the KV rotation applies to it
    EXPECT_TRUE(info.agentkv_only);
    EXPECT_GE(static_cast<uint32_t>(t.type), kAgentkvTypeBase);
    EXPECT_EQ(ggml_type_from_name(info.name), t.type);
    EXPECT_EQ(ggml_type_info(static_cast<uint32_t>(t.type)), &info);
  }
  EXPECT_EQ(ggml_type_name(GgmlType::TQ4), "tq4");
  EXPECT_EQ(ggml_type_info(uint32_t{0x4001}), nullptr);  // the retired first tq4 codebook
  EXPECT_EQ(ggml_type_name(GgmlType::TQ3), "tq3");
  // Bits per element including the f16 scale: 4.25 and 3.25, exactly, for every row width.
  for (int64_t n : {64, 128, 256, 4096}) {
    EXPECT_EQ(ggml_row_size(GgmlType::TQ4, n) * 8 * 4, static_cast<size_t>(n) * 17) << n;
    EXPECT_EQ(ggml_row_size(GgmlType::TQ3, n) * 8 * 4, static_cast<size_t>(n) * 13) << n;
  }
  for (const auto& other : {GgmlType::F32, GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::Q6_K})
    EXPECT_FALSE(ggml_type_info(other).agentkv_only);
}

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

// The index of element j, unpacked from the documented layout (quant_blocks.h) independently of
// quant_tq.cpp.
int ref_index(const TqType& t, const uint8_t* block, int j) {
  const uint8_t* qs = block + 2;
  if (t.levels == 16) return j < 32 ? (qs[j] & 0xF) : (qs[j - 32] >> 4);
  const uint8_t* qh = block + 2 + 16;
  return ((qs[j % 16] >> (2 * (j / 16))) & 3) | (((qh[j / 8] >> (j % 8)) & 1) << 2);
}

TEST(TqQuant, RoundTripMatchesTheReference) {
  for (const TqType& t : kTqTypes) {
    SCOPED_TRACE(ggml_type_name(t.type));
    constexpr int64_t n = 64 * 40;
    std::vector<float> x = gaussian(n, 5, 0.3f);
    for (int j = 0; j < 64; ++j) x[64 + j] = 0.f;   // an all-zero block
    x[200] = 25.f;                                   // an outlier
    std::vector<uint8_t> q(ggml_row_size(t.type, n));
    quantize_row(t.type, x.data(), q.data(), n);
    std::vector<float> y(n);
    dequantize_row(t.type, q.data(), y.data(), n);
    double err = 0, sum2 = 0;
    for (int64_t b = 0; b < n / 64; ++b) {
      const uint8_t* block = q.data() + b * t.block_bytes;
      uint16_t dbits;
      std::memcpy(&dbits, block, 2);
      const float d = fp16_to_fp32(dbits);
      for (int j = 0; j < 64; ++j) {
        const int64_t i = b * 64 + j;
        const int k = ref_index(t, block, j);
        ASSERT_EQ(y[i], d * static_cast<float>(t.lut[k])) << i;
        // The level is the nearest one for the stored scale.
        for (int other = 0; other < t.levels; ++other)
          ASSERT_LE(std::abs(x[i] - y[i]), std::abs(x[i] - d * t.lut[other]) * (1 + 1e-6f) + 1e-30f) << i;
        if (b == 3) continue;  // the outlier's block (not rotated here) is not Gaussian
        err += (x[i] - y[i]) * (x[i] - y[i]);
        sum2 += x[i] * x[i];
      }
    }
    for (int j = 0; j < 64; ++j) EXPECT_EQ(y[64 + j], 0.f);
    // Lloyd-Max MSE of N(0, 1): 0.009602 (16 levels, one at zero), 0.03455 (8 levels); the
    // per-block scale search does better on 64 samples (BlockScaleChoiceMeasurements).
    EXPECT_LT(err / sum2, t.levels == 16 ? 0.0096 : 0.0346);
    // The outlier's block: the least-squares scale may clip the outlier (tq3 has no zero level to
    // put 63 small elements on), but it still dominates its block.
    EXPECT_GT(y[200], 10.f);
  }
}

// Dot of the dequantized K row with the dequantized q8_0 activations, in double; *abs_sum gets
// the sum of |products|, the size float rounding is relative to.
double dequantized_dot(const TqType& t, const std::vector<uint8_t>& k, const std::vector<uint8_t>& q8, int64_t n,
                       double* abs_sum = nullptr) {
  std::vector<float> kf(n), qf(n);
  dequantize_row(t.type, k.data(), kf.data(), n);
  dequantize_row(GgmlType::Q8_0, q8.data(), qf.data(), n);
  double s = 0, a = 0;
  for (int64_t i = 0; i < n; ++i) {
    s += static_cast<double>(kf[i]) * qf[i];
    a += std::abs(static_cast<double>(kf[i]) * qf[i]);
  }
  if (abs_sum) *abs_sum = a;
  return s;
}

TEST(TqQuant, VecDotEqualsTheDotOfTheDequantizedRowsAtEveryLevel) {
  ASSERT_EQ(vec_dot_type(GgmlType::TQ4), GgmlType::Q8_0);
  ASSERT_EQ(vec_dot_type(GgmlType::TQ3), GgmlType::Q8_0);
  const CpuLevel before = active_cpu_level();
  for (const TqType& t : kTqTypes) {
    for (int64_t n : {64, 128, 576}) {
      for (uint32_t seed = 0; seed < 20; ++seed) {
        SCOPED_TRACE(std::string(ggml_type_name(t.type)) + " n=" + std::to_string(n) + " seed=" + std::to_string(seed));
        const std::vector<float> kx = gaussian(n, 100 + seed, 0.7f), qx = gaussian(n, 200 + seed, 2.f);
        std::vector<uint8_t> k(ggml_row_size(t.type, n)), q8(ggml_row_size(GgmlType::Q8_0, n));
        quantize_row(t.type, kx.data(), k.data(), n);
        quantize_activation_row(GgmlType::Q8_0, qx.data(), q8.data(), n);
        double scale = 0;
        const double want = dequantized_dot(t, k, q8, n, &scale);
        const float scalar = vec_dot_fn(t.type, CpuLevel::Scalar)(n, k.data(), q8.data());
        EXPECT_NEAR(scalar, want, 1e-6 * scale + 1e-6);
        for (CpuLevel level : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512}) {
          if (static_cast<int>(level) > static_cast<int>(detected_cpu_level())) continue;
          set_cpu_level(level);
          const float got = vec_dot(t.type, n, k.data(), q8.data());
          EXPECT_NEAR(got, want, 1e-6 * scale + 1e-6) << cpu_level_name(level);
          EXPECT_NEAR(got, scalar, 1e-6 * scale + 1e-6) << cpu_level_name(level);
        }
        set_cpu_level(before);
      }
    }
  }
  set_cpu_level(before);
}

TEST(TqQuant, Avx2KernelMatchesScalarOnExtremeBlocks) {
  if (detected_cpu_level() < CpuLevel::Avx2) GTEST_SKIP() << "no AVX2";
  for (const TqType& t : kTqTypes) {
    constexpr int64_t n = 256;
    // Every index at every position, and activations at +-127 (the int16 pair-sum bound).
    std::vector<uint8_t> k(ggml_row_size(t.type, n)), q8(ggml_row_size(GgmlType::Q8_0, n));
    std::mt19937 rng(9);
    for (auto& b : k) b = static_cast<uint8_t>(rng());
    for (int64_t b = 0; b < n / 64; ++b) {
      const uint16_t d = fp32_to_fp16(0.01f * static_cast<float>(b + 1));
      std::memcpy(k.data() + b * t.block_bytes, &d, 2);
    }
    auto* y = reinterpret_cast<BlockQ8_0*>(q8.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      y[b].d = fp32_to_fp16(0.02f);
      for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<int8_t>((j + b) % 3 == 0 ? -127 : 127);
    }
    const float scalar = vec_dot_fn(t.type, CpuLevel::Scalar)(n, k.data(), q8.data());
    const float avx2 = vec_dot_fn(t.type, CpuLevel::Avx2)(n, k.data(), q8.data());
    const double want = dequantized_dot(t, k, q8, n);
    EXPECT_NEAR(scalar, want, 1e-5 * std::abs(want) + 1e-3);
    EXPECT_NEAR(avx2, scalar, 1e-5 * std::abs(want) + 1e-3);
  }
}

TEST(TqQuant, DequantizeGivesTheScalarBitsAtEveryLevel) {
  const CpuLevel before = active_cpu_level();
  for (const TqType& t : kTqTypes) {
    constexpr int64_t n = 64 * 9;
    std::vector<uint8_t> q(ggml_row_size(t.type, n));
    std::mt19937 rng(21);
    for (auto& b : q) b = static_cast<uint8_t>(rng());  // every index pattern
    for (int64_t b = 0; b < n / 64; ++b) {
      const uint16_t d = fp32_to_fp16(0.37f * static_cast<float>(b) - 1.f);
      std::memcpy(q.data() + b * t.block_bytes, &d, 2);
    }
    set_cpu_level(CpuLevel::Scalar);
    std::vector<float> want(n);
    dequantize_row(t.type, q.data(), want.data(), n);
    for (int64_t b = 0; b < n / 64; ++b) {  // the scalar path against the documented layout
      uint16_t dbits;
      std::memcpy(&dbits, q.data() + b * t.block_bytes, 2);
      for (int j = 0; j < 64; ++j)
        ASSERT_EQ(want[b * 64 + j], fp16_to_fp32(dbits) * static_cast<float>(t.lut[ref_index(t, q.data() + b * t.block_bytes, j)]));
    }
    for (CpuLevel level : {CpuLevel::Avx2, CpuLevel::Avx512}) {
      if (static_cast<int>(level) > static_cast<int>(detected_cpu_level())) continue;
      set_cpu_level(level);
      std::vector<float> got(n);
      dequantize_row(t.type, q.data(), got.data(), n);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(float))) << cpu_level_name(level);
    }
  }
  set_cpu_level(before);
}

// Relative squared error sum (x - y)^2 / sum x^2.
double relative_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, sum2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    sum2 += static_cast<double>(x[i]) * x[i];
  }
  return err / sum2;
}

// The relative squared error of quantizing rows with one scale rule.
double relative_mse(const TqType& t, const std::vector<float>& x, TqScale how) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(ggml_row_size(t.type, n));
  std::vector<float> y(n);
  if (t.levels == 16) {
    quant_detail::quantize_tq4(x.data(), reinterpret_cast<BlockTQ4*>(q.data()), n, how);
  } else {
    quant_detail::quantize_tq3(x.data(), reinterpret_cast<BlockTQ3*>(q.data()), n, how);
  }
  dequantize_row(t.type, q.data(), y.data(), n);
  return relative_error(x, y);
}

// K-like rows: per-channel scales spread log-normally, a few outlier channels 10x, channel means,
// then the KV rotation (Hadamard in blocks of `rot`, random signs) as attention applies it.
std::vector<float> realish_rows(int64_t rows, int64_t width, int64_t rot, uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<float> spread(0.f, 0.8f);
  std::normal_distribution<float> unit(0.f, 1.f);
  std::vector<float> sigma(width), mean(width);
  for (int64_t c = 0; c < width; ++c) {
    sigma[c] = spread(rng) * (c % 37 == 3 ? 10.f : 1.f);
    mean[c] = 0.5f * sigma[c] * unit(rng);
  }
  HadamardRotation r{rot, hadamard_signs(seed + 1, rot)};
  std::vector<float> x(rows * width);
  for (int64_t i = 0; i < rows; ++i) {
    float* row = x.data() + i * width;
    for (int64_t c = 0; c < width; ++c) row[c] = mean[c] + sigma[c] * unit(rng);
    r.apply(row, width);
  }
  return x;
}

TEST(TqQuant, BlockScaleChoiceMeasurements) {
  // The numbers docs/quant-types.md quotes; the default (Search) must be the best of the three.
  struct Data {
    const char* name;
    std::vector<float> x;
  };
  const Data data[] = {
      {"gaussian", gaussian(64 * 4096, 77)},
      {"rotated K-like rows, H64", realish_rows(2048, 128, 64, 3)},
      {"rotated K-like rows, H128", realish_rows(2048, 128, 128, 4)},
  };
  for (const TqType& t : kTqTypes) {
    for (const Data& d : data) {
      const double rms = relative_mse(t, d.x, TqScale::Rms);
      const double search = relative_mse(t, d.x, TqScale::Search);
      const double norm = relative_mse(t, d.x, TqScale::NormCorrected);
      std::printf("%s %-28s relative MSE: rms %.5f  search %.5f  norm-corrected %.5f\n",
                  std::string(ggml_type_name(t.type)).c_str(), d.name, rms, search, norm);
      EXPECT_LE(search, rms) << d.name;
      EXPECT_LE(search, norm) << d.name;
    }
  }
  // For comparison: ggml's 4-bit KV types on the same data (blocks of 32, 4.5 bits per element).
  for (GgmlType other : {GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::Q8_0}) {
    for (const Data& d : data) {
      const int64_t n = static_cast<int64_t>(d.x.size());
      std::vector<uint8_t> q(ggml_row_size(other, n));
      std::vector<float> y(n);
      quantize_row(other, d.x.data(), q.data(), n);
      dequantize_row(other, q.data(), y.data(), n);
      std::printf("%s %-28s relative MSE: %.5f\n", std::string(ggml_type_name(other)).c_str(), d.name,
                  relative_error(d.x, y));
    }
  }
}

}  // namespace
}  // namespace agentkv
