// Quant formats against ggml's own bytes (../shared/fixtures/quant), plus dot-product kernels:
// scalar kernels against a double-precision dot of the dequantized rows, and every SIMD level
// against the scalar kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "binary_files.h"
#include "fixtures.h"

namespace agentkv {
namespace {

const std::string kQuantDir = std::string(AGENTKV_FIXTURES_DIR) + "/quant/";

using test::as_floats;
using test::read_file;

struct FixtureType {
  GgmlType type;
  std::string name;
  size_t row_size;
};

struct Fixtures {
  int64_t n_rows = 0, n_per_row = 0;
  std::vector<float> input;
  std::vector<FixtureType> types;
};

const Fixtures& fixtures() {
  static const Fixtures fx = [] {
    Fixtures f;
    const auto bytes = read_file(kQuantDir + "index.json");
    const auto index = nlohmann::json::parse(bytes.begin(), bytes.end());
    f.n_rows = index.at("n_rows");
    f.n_per_row = index.at("n_per_row");
    f.input = as_floats(read_file(kQuantDir + index.at("input").get<std::string>()));
    for (const auto& t : index.at("types")) {
      const auto* info = ggml_type_info(t.at("ggml_type_id").get<uint32_t>());
      EXPECT_NE(info, nullptr) << t.dump();
      if (!info) continue;
      EXPECT_EQ(info->name, t.at("type").get<std::string>());
      EXPECT_EQ(static_cast<size_t>(t.at("row_size")), ggml_row_size(info->type, f.n_per_row));
      f.types.push_back({info->type, t.at("type"), t.at("row_size")});
    }
    return f;
  }();
  return fx;
}

TEST(QuantFixtures, IndexCoversTheWeightTypes) {
  AGENTKV_NEEDS_FIXTURES();
  const auto& fx = fixtures();
  EXPECT_EQ(fx.input.size(), static_cast<size_t>(fx.n_rows * fx.n_per_row));
  EXPECT_EQ(fx.types.size(), 13u);
}

TEST(QuantFixtures, DequantizeMatchesGgmlBitForBit) {
  AGENTKV_NEEDS_FIXTURES();
  const auto& fx = fixtures();
  for (const auto& t : fx.types) {
    const auto q = read_file(kQuantDir + t.name + ".quant.bin");
    const auto want = as_floats(read_file(kQuantDir + t.name + ".dequant_f32.bin"));
    ASSERT_EQ(q.size(), t.row_size * fx.n_rows) << t.name;
    ASSERT_EQ(want.size(), fx.input.size()) << t.name;
    std::vector<float> got(fx.n_per_row);
    for (int64_t r = 0; r < fx.n_rows; ++r) {
      dequantize_row(t.type, q.data() + r * t.row_size, got.data(), fx.n_per_row);
      const float* w = want.data() + r * fx.n_per_row;
      int mismatches = 0;
      for (int64_t i = 0; i < fx.n_per_row; ++i) mismatches += fp32_to_bits(got[i]) != fp32_to_bits(w[i]);
      EXPECT_EQ(mismatches, 0) << t.name << " row " << r;
    }
  }
}

TEST(QuantFixtures, QuantizeReproducesGgmlBytes) {
  AGENTKV_NEEDS_FIXTURES();
  const auto& fx = fixtures();
  for (const auto& t : fx.types) {
    const auto want = read_file(kQuantDir + t.name + ".quant.bin");
    std::vector<uint8_t> got(t.row_size * fx.n_rows);
    for (int64_t r = 0; r < fx.n_rows; ++r)
      quantize_row(t.type, fx.input.data() + r * fx.n_per_row, got.data() + r * t.row_size, fx.n_per_row);
    size_t differing = 0;
    for (size_t i = 0; i < got.size(); ++i) differing += got[i] != want[i];
    EXPECT_EQ(differing, 0u) << t.name << ": " << differing << " of " << got.size() << " bytes differ";
  }
}

// q8_0 activation quantization (ggml-cpu on x86) rounds half to even with scale 127/amax; the
// reference quantizer rounds half away from zero with 1/(amax/127). amax = 127 makes both scales 1.
TEST(QuantActivation, Q8_0RoundsHalfToEvenUnlikeReference) {
  float x[32] = {};
  x[0] = 127.f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  BlockQ8_0 ref, act;
  quantize_row(GgmlType::Q8_0, x, &ref, 32);
  quantize_activation_row(GgmlType::Q8_0, x, &act, 32);
  EXPECT_EQ(ref.d, act.d);
  EXPECT_EQ(ref.qs[0], 127);
  EXPECT_EQ(ref.qs[1], 3);
  EXPECT_EQ(ref.qs[2], -4);
  EXPECT_EQ(ref.qs[3], 1);
  EXPECT_EQ(act.qs[0], 127);
  EXPECT_EQ(act.qs[1], 2);
  EXPECT_EQ(act.qs[2], -4);
  EXPECT_EQ(act.qs[3], 0);
}

TEST(QuantActivation, Q8_1StoresScaledSumOfQuants) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(64);
  for (auto& v : x) v = dist(rng);
  BlockQ8_1 y[2];
  quantize_activation_row(GgmlType::Q8_1, x.data(), y, 64);
  for (const auto& b : y) {
    int sum = 0;
    for (int8_t q : b.qs) sum += q;
    EXPECT_EQ(b.s, fp32_to_fp16(fp16_to_fp32(b.d) * static_cast<float>(sum)) ) << "s uses the unrounded d";
  }
}

TEST(QuantActivation, Q8_KGroupSumsAndScale) {
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(512);
  for (auto& v : x) v = dist(rng);
  BlockQ8_K y[2];
  quantize_activation_row(GgmlType::Q8_K, x.data(), y, 512);
  for (int b = 0; b < 2; ++b) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[b].qs[16 * g + l];
      EXPECT_EQ(y[b].bsums[g], sum);
    }
    std::vector<float> back(256);
    dequantize_row(GgmlType::Q8_K, &y[b], back.data(), 256);
    for (int i = 0; i < 256; ++i) EXPECT_NEAR(back[i], x[256 * b + i], 0.5f * std::fabs(y[b].d) + 1e-7f);
  }
}

TEST(QuantErrors, RefusesBadLengthsAndTypes) {
  float x[64] = {};
  uint8_t buf[512];
  EXPECT_THROW(quantize_row(GgmlType::Q4_0, x, buf, 40), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_K, buf, x, 64), Error);
  EXPECT_THROW(vec_dot(GgmlType::Q8_0, 48, buf, buf), Error);
  EXPECT_THROW(vec_dot_type(GgmlType::Q8_K), Error);
  EXPECT_THROW(vec_dot_type(GgmlType::I32), Error);
  EXPECT_THROW(quantize_row(GgmlType::I8, x, buf, 32), Error);
  EXPECT_THROW(vec_dot(GgmlType::Q8_1, 32, buf, buf), Error);
}

TEST(QuantActivation, VecDotTypesFollowGgml) {
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q5_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::IQ4_NL), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::MXFP4), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q8_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_1), GgmlType::Q8_1);
  EXPECT_EQ(vec_dot_type(GgmlType::Q5_1), GgmlType::Q8_1);
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    EXPECT_EQ(vec_dot_type(t), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::F16), GgmlType::F16);
  EXPECT_EQ(vec_dot_type(GgmlType::BF16), GgmlType::BF16);
  EXPECT_EQ(vec_dot_type(GgmlType::F32), GgmlType::F32);
}

// ---- dot products ----

const GgmlType kDotTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

struct DotCase {
  std::vector<uint8_t> w, a;
  std::vector<float> w_deq, a_deq;
};

DotCase make_case(GgmlType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> w(n), a(n);
  for (auto& v : w) v = dist(rng);
  for (auto& v : a) v = dist(rng) * 3.f;
  // A few outliers, as real activations have.
  for (int k = 0; k < 4; ++k) a[rng() % n] *= 20.f;
  const GgmlType act = vec_dot_type(type);
  DotCase c;
  c.w.resize(ggml_row_size(type, n));
  c.a.resize(ggml_row_size(act, n));
  quantize_row(type, w.data(), c.w.data(), n);
  quantize_activation_row(act, a.data(), c.a.data(), n);
  c.w_deq.resize(n);
  c.a_deq.resize(n);
  dequantize_row(type, c.w.data(), c.w_deq.data(), n);
  dequantize_row(act, c.a.data(), c.a_deq.data(), n);
  return c;
}

// Dot products are compared relative to sum |w_i a_i|: the scale at which float summation order
// can move a result.
double magnitude(const DotCase& c) {
  double m = 0;
  for (size_t i = 0; i < c.w_deq.size(); ++i) m += std::fabs(static_cast<double>(c.w_deq[i]) * c.a_deq[i]);
  return m;
}

// Double-precision dot of the dequantized rows. For q4_1 / q5_1, ggml multiplies each block's min
// by the q8_1 block's stored s (d * sum of quants, rounded to fp16) instead of summing the
// dequantized activations, so the reference does the same.
double reference_dot(GgmlType type, const DotCase& c) {
  const int64_t n = static_cast<int64_t>(c.w_deq.size());
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(c.w_deq[i]) * c.a_deq[i];
  if (type != GgmlType::Q4_1 && type != GgmlType::Q5_1) return sum;
  const auto* act = reinterpret_cast<const BlockQ8_1*>(c.a.data());
  for (int64_t b = 0; b < n / 32; ++b) {
    // Both q4_1 and q5_1 blocks start with d, m as fp16.
    uint16_t m_bits;
    std::memcpy(&m_bits, c.w.data() + b * ggml_type_info(type).type_size + 2, 2);
    const double m = fp16_to_fp32(m_bits);
    double a_sum = 0;
    for (int j = 0; j < 32; ++j) a_sum += c.a_deq[32 * b + j];
    sum += m * (fp16_to_fp32(act[b].s) - a_sum);
  }
  return sum;
}

std::vector<int64_t> lengths_for(GgmlType type) {
  if (ggml_type_info(type).block_size == 256) return {256, 512, 1280, 4096};
  return {32, 96, 256, 544, 4096};
}

TEST(VecDot, ScalarMatchesDequantizedDoubleDot) {
  for (GgmlType type : kDotTypes) {
    for (int64_t n : lengths_for(type)) {
      const DotCase c = make_case(type, n, static_cast<uint32_t>(n) * 31 + static_cast<uint32_t>(type));
      const double want = reference_dot(type, c);
      const float got = vec_dot_fn(type, CpuLevel::Scalar)(n, c.w.data(), c.a.data());
      EXPECT_NEAR(got, want, 1e-5 * magnitude(c) + 1e-6) << ggml_type_name(type) << " n=" << n;
    }
  }
}

TEST(VecDot, EverySimdLevelMatchesScalar) {
  const CpuLevel top = detected_cpu_level();
  std::printf("detected CPU level: %s (vnni %d, bf16 %d)\n", std::string(cpu_level_name(top)).c_str(),
              cpu_features().avx512_vnni, cpu_features().avx512_bf16);
  for (GgmlType type : kDotTypes) {
    for (int64_t n : lengths_for(type)) {
      const DotCase c = make_case(type, n, static_cast<uint32_t>(n) * 17 + static_cast<uint32_t>(type));
      const float scalar = vec_dot_fn(type, CpuLevel::Scalar)(n, c.w.data(), c.a.data());
      for (CpuLevel level : {CpuLevel::Avx2, CpuLevel::Avx512}) {
        if (level > top) continue;
        const float simd = vec_dot_fn(type, level)(n, c.w.data(), c.a.data());
        EXPECT_NEAR(simd, scalar, 1e-5 * magnitude(c) + 1e-6)
            << ggml_type_name(type) << " n=" << n << " level " << cpu_level_name(level);
      }
    }
  }
}

// llama.cpp's float order for the K-quants it runs on x86 (see quant_dot_scalar.cpp), written out
// independently of the kernels: q4_K as its repacked GEMV kernel (one fused multiply-add per
// superblock) and GEMM kernel (one per 64 weights), q6_K as its AVX2 vec_dot (8 int32 lanes, lane m
// holding weights 4m..4m+3 of every 32, fused multiply-add per lane, fixed reduction tree).
float spec_q4_K(const DotCase& c, int64_t n, bool grouped) {
  const auto* x = reinterpret_cast<const BlockQ4_K*>(c.w.data());
  const auto* y = reinterpret_cast<const BlockQ8_K*>(c.a.data());
  float acc = 0, acc_min = 0;
  for (int64_t b = 0; b < n / 256; ++b) {
    int scale[8], min[8];
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = x[b].scales;
      scale[j] = j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      min[j] = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    int dot[4] = {0, 0, 0, 0}, mins[4] = {0, 0, 0, 0};
    for (int e = 0; e < 256; ++e) {
      const int sub = e / 32;  // weight e: nibble (e / 32) % 2 of byte 32 * (e / 64) + e % 32
      const int byte = x[b].qs[32 * (e / 64) + e % 32];
      const int q = (sub % 2) ? byte >> 4 : byte & 0xF;
      dot[e / 64] += scale[sub] * q * y[b].qs[e];
    }
    for (int g = 0; g < 16; ++g) mins[g / 4] += min[g / 2] * y[b].bsums[g];
    const float d = fp16_to_fp32(x[b].d) * y[b].d, dmin = fp16_to_fp32(x[b].dmin) * y[b].d;
    if (grouped) {
      for (int j = 0; j < 4; ++j) {
        acc = std::fma(static_cast<float>(dot[j]), d, acc);
        acc_min = std::fma(static_cast<float>(mins[j]), dmin, acc_min);
      }
    } else {
      acc = std::fma(static_cast<float>(dot[0] + dot[1] + dot[2] + dot[3]), d, acc);
      acc_min = std::fma(static_cast<float>(mins[0] + mins[1] + mins[2] + mins[3]), dmin, acc_min);
    }
  }
  return acc - acc_min;
}

float spec_q6_K(const DotCase& c, int64_t n) {
  const auto* x = reinterpret_cast<const BlockQ6_K*>(c.w.data());
  const auto* y = reinterpret_cast<const BlockQ8_K*>(c.a.data());
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t b = 0; b < n / 256; ++b) {
    int sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int e = 0; e < 256; ++e) {
      // Weight e of a 128-half: low nibble of ql[l] / ql[l+32] for quarters 0 / 1, high nibble for
      // 2 / 3; two high bits from qh[l] at shift 2 * quarter (l = e % 32).
      const int half = e / 128, quarter = (e % 128) / 32, l = e % 32;
      const int low = x[b].ql[64 * half + l + 32 * (quarter % 2)];
      const int q = ((quarter < 2 ? low & 0xF : low >> 4) | (((x[b].qh[32 * half + l] >> (2 * quarter)) & 3) << 4)) - 32;
      sums[(e % 32) / 4] += x[b].scales[e / 16] * q * y[b].qs[e];
    }
    const float d = y[b].d * fp16_to_fp32(x[b].d);
    for (int m = 0; m < 8; ++m) lane[m] = std::fma(d, static_cast<float>(sums[m]), lane[m]);
  }
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

TEST(VecDot, KQuantsFollowLlamaCppFloatOrderOnEveryLevel) {
  for (int64_t n : {int64_t{256}, int64_t{768}, int64_t{4096}}) {
    for (uint32_t seed = 0; seed < 20; ++seed) {
      const DotCase q4 = make_case(GgmlType::Q4_K, n, seed * 7 + 1);
      const DotCase q6 = make_case(GgmlType::Q6_K, n, seed * 7 + 2);
      const float want_gemv = spec_q4_K(q4, n, false), want_gemm = spec_q4_K(q4, n, true);
      const float want_q6 = spec_q6_K(q6, n);
      for (CpuLevel level : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512}) {
        if (level > detected_cpu_level()) continue;
        const std::string where = "n=" + std::to_string(n) + " seed " + std::to_string(seed) + " level " +
                                  std::string(cpu_level_name(level));
        EXPECT_EQ(fp32_to_bits(vec_dot_fn(GgmlType::Q4_K, level)(n, q4.w.data(), q4.a.data())), fp32_to_bits(want_gemv))
            << "q4_K " << where;
        // The row-group kernel on four copies of the same activation row.
        const size_t row = q4.a.size();
        std::vector<uint8_t> rows(4 * row);
        for (int r = 0; r < 4; ++r) std::memcpy(rows.data() + r * row, q4.a.data(), row);
        float out[kRowGroupSize];
        row_group_dot_fn(GgmlType::Q4_K, level)(n, q4.w.data(), rows.data(), row, out);
        for (int r = 0; r < kRowGroupSize; ++r)
          EXPECT_EQ(fp32_to_bits(out[r]), fp32_to_bits(want_gemm)) << "q4_K row group " << where << " row " << r;
        EXPECT_EQ(fp32_to_bits(vec_dot_fn(GgmlType::Q6_K, level)(n, q6.w.data(), q6.a.data())), fp32_to_bits(want_q6))
            << "q6_K " << where;
      }
    }
  }
  EXPECT_EQ(row_group_dot_fn(GgmlType::Q8_0), nullptr);  // one numeric behaviour for other types
}

TEST(VecDot, ActiveLevelHonoursOverride) {
  const CpuLevel before = active_cpu_level();
  EXPECT_EQ(set_cpu_level(CpuLevel::Scalar), CpuLevel::Scalar);
  EXPECT_EQ(vec_dot_fn(GgmlType::Q8_0), vec_dot_fn(GgmlType::Q8_0, CpuLevel::Scalar));
  EXPECT_EQ(set_cpu_level(CpuLevel::Avx512), detected_cpu_level());
  set_cpu_level(before);
  CpuLevel parsed;
  EXPECT_TRUE(parse_cpu_level("AVX2", &parsed));
  EXPECT_EQ(parsed, CpuLevel::Avx2);
  EXPECT_FALSE(parse_cpu_level("sse9", &parsed));
}

}  // namespace
}  // namespace agentkv
