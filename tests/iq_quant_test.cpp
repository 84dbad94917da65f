// The i-quant weight types (iq4_xs, iq3_s, iq3_xxs, iq2_xxs, iq2_xs, iq2_s) against ggml's own
// vectors in tests/data/quant (made by tests/reference/iq_quant_reference.c): dequantization bit
// for bit, q8_K activations byte for byte, dot products bit for bit at every CPU level; then our
// quantizers (valid blocks, bounded error) and matmul at every level against a float reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "kernels/threadpool.h"
#include "binary_files.h"
#include "quant_gemm_test_util.h"

namespace agentkv {
namespace {

const std::string kDataDir = std::string(AGENTKV_SOURCE_DIR) + "/tests/data/quant/";

const GgmlType kIqTypes[] = {GgmlType::IQ4_XS, GgmlType::IQ3_S, GgmlType::IQ3_XXS,
                             GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S};

using test::as_floats;
using test::read_file;

struct Reference {
  int64_t n_rows = 0, n_per_row = 0;
  std::vector<float> input;
  std::vector<uint8_t> act_q8_K;  // the input rows as ggml-cpu's from_float wrote them
};

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    const auto bytes = read_file(kDataDir + "index.json");
    const auto index = nlohmann::json::parse(bytes.begin(), bytes.end());
    r.n_rows = index.at("n_rows");
    r.n_per_row = index.at("n_per_row");
    r.input = as_floats(read_file(kDataDir + "input_f32.bin"));
    r.act_q8_K = read_file(kDataDir + "q8_K.act.bin");
    size_t listed = 0;
    for (const auto& t : index.at("types")) {
      const auto* info = ggml_type_info(t.at("ggml_type_id").get<uint32_t>());
      EXPECT_NE(info, nullptr) << t.dump();
      if (!info) continue;
      ++listed;
      EXPECT_EQ(info->name, t.at("type").get<std::string>());
      EXPECT_EQ(static_cast<size_t>(t.at("row_size")), ggml_row_size(info->type, r.n_per_row));
      EXPECT_EQ(info->type_size, t.at("type_size").get<size_t>());
      EXPECT_EQ(t.at("vec_dot_type").get<std::string>(), ggml_type_name(vec_dot_type(info->type)));
    }
    EXPECT_EQ(listed, std::size(kIqTypes));
    return r;
  }();
  return ref;
}

std::string name_of(GgmlType t) { return std::string(ggml_type_name(t)); }

TEST(IqTypes, BlockSizesAreGgmls) {
  const struct {
    GgmlType type;
    const char* name;
    uint32_t id;
    size_t bytes;
  } want[] = {{GgmlType::IQ2_XXS, "iq2_xxs", 16, 66}, {GgmlType::IQ2_XS, "iq2_xs", 17, 74},
              {GgmlType::IQ3_XXS, "iq3_xxs", 18, 98}, {GgmlType::IQ3_S, "iq3_s", 21, 110},
              {GgmlType::IQ2_S, "iq2_s", 22, 82},     {GgmlType::IQ4_XS, "iq4_xs", 23, 136}};
  for (const auto& w : want) {
    const GgmlTypeInfo* info = ggml_type_info(w.id);
    ASSERT_NE(info, nullptr) << w.name;
    EXPECT_EQ(info->type, w.type);
    EXPECT_EQ(info->name, w.name);
    EXPECT_EQ(info->block_size, 256);
    EXPECT_EQ(info->type_size, w.bytes);
    EXPECT_TRUE(info->quantized);
    EXPECT_FALSE(info->agentkv_only) << "GGUF files carry them";
    EXPECT_EQ(ggml_type_from_name(w.name), w.type);
    EXPECT_EQ(vec_dot_type(w.type), GgmlType::Q8_K);
  }
}

TEST(IqTypes, DequantizeMatchesGgmlBitForBit) {
  const auto& ref = reference();
  for (GgmlType type : kIqTypes) {
    const size_t row_size = ggml_row_size(type, ref.n_per_row);
    const auto q = read_file(kDataDir + name_of(type) + ".quant.bin");
    const auto want = as_floats(read_file(kDataDir + name_of(type) + ".dequant_f32.bin"));
    ASSERT_EQ(q.size(), row_size * ref.n_rows) << name_of(type);
    ASSERT_EQ(want.size(), ref.input.size()) << name_of(type);
    std::vector<float> got(ref.n_per_row);
    for (int64_t r = 0; r < ref.n_rows; ++r) {
      dequantize_row(type, q.data() + r * row_size, got.data(), ref.n_per_row);
      int mismatches = 0;
      for (int64_t i = 0; i < ref.n_per_row; ++i)
        mismatches += fp32_to_bits(got[i]) != fp32_to_bits(want[r * ref.n_per_row + i]);
      EXPECT_EQ(mismatches, 0) << name_of(type) << " row " << r;
    }
  }
}

TEST(IqTypes, ActivationsAreGgmlsQ8_K) {
  const auto& ref = reference();
  const size_t act_row = ggml_row_size(GgmlType::Q8_K, ref.n_per_row);
  ASSERT_EQ(ref.act_q8_K.size(), act_row * ref.n_rows);
  std::vector<uint8_t> got(act_row);
  for (int64_t r = 0; r < ref.n_rows; ++r) {
    quantize_activation_row(GgmlType::Q8_K, ref.input.data() + r * ref.n_per_row, got.data(), ref.n_per_row);
    EXPECT_EQ(std::memcmp(got.data(), ref.act_q8_K.data() + r * act_row, act_row), 0) << "row " << r;
  }
}

// Every weight row against every activation row, at every CPU level: ggml's float, bit for bit.
TEST(IqTypes, DotMatchesGgmlBitForBitAtEveryLevel) {
  const auto& ref = reference();
  const size_t act_row = ggml_row_size(GgmlType::Q8_K, ref.n_per_row);
  for (CpuLevel level : test::machine_cpu_levels()) {
    for (GgmlType type : kIqTypes) {
      const size_t row_size = ggml_row_size(type, ref.n_per_row);
      const auto q = read_file(kDataDir + name_of(type) + ".quant.bin");
      const auto want = as_floats(read_file(kDataDir + name_of(type) + ".dot_f32.bin"));
      ASSERT_EQ(want.size(), static_cast<size_t>(ref.n_rows * ref.n_rows));
      const VecDotFn dot = vec_dot_fn(type, level);
      for (int64_t w = 0; w < ref.n_rows; ++w)
        for (int64_t a = 0; a < ref.n_rows; ++a) {
          const float got = dot(ref.n_per_row, q.data() + w * row_size, ref.act_q8_K.data() + a * act_row);
          EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(want[w * ref.n_rows + a]))
              << name_of(type) << " at " << cpu_level_name(level) << ": row " << w << " x act " << a << ": " << got
              << " vs ggml " << want[w * ref.n_rows + a];
        }
    }
  }
}

// Random blocks (every code a block can hold, not only those a quantizer emits): ggml's
// dequantization, and against heavy-tailed activations ggml's dot, bit for bit, at every level.
TEST(IqTypes, RandomBlocksMatchGgmlBitForBitAtEveryLevel) {
  const auto& ref = reference();
  const int64_t n_random_rows = 16;
  const size_t act_row = ggml_row_size(GgmlType::Q8_K, ref.n_per_row);
  const auto act = read_file(kDataDir + "q8_K.random_act.bin");
  const auto act_f32 = as_floats(read_file(kDataDir + "random_act_f32.bin"));
  ASSERT_EQ(act.size(), act_row * ref.n_rows);
  std::vector<uint8_t> ours(act_row);
  for (int64_t r = 0; r < ref.n_rows; ++r) {
    quantize_activation_row(GgmlType::Q8_K, act_f32.data() + r * ref.n_per_row, ours.data(), ref.n_per_row);
    EXPECT_EQ(std::memcmp(ours.data(), act.data() + r * act_row, act_row), 0) << "activation row " << r;
  }
  for (CpuLevel level : test::machine_cpu_levels()) {
    for (GgmlType type : kIqTypes) {
      const size_t row_size = ggml_row_size(type, ref.n_per_row);
      const auto q = read_file(kDataDir + name_of(type) + ".random.quant.bin");
      const auto want = as_floats(read_file(kDataDir + name_of(type) + ".random.dot_f32.bin"));
      ASSERT_EQ(q.size(), row_size * n_random_rows);
      ASSERT_EQ(want.size(), static_cast<size_t>(n_random_rows * ref.n_rows));
      if (level == CpuLevel::Scalar) {  // dequantization has one path
        const auto deq = as_floats(read_file(kDataDir + name_of(type) + ".random.dequant_f32.bin"));
        ASSERT_EQ(deq.size(), static_cast<size_t>(n_random_rows * ref.n_per_row));
        std::vector<float> got(ref.n_per_row);
        for (int64_t w = 0; w < n_random_rows; ++w) {
          dequantize_row(type, q.data() + w * row_size, got.data(), ref.n_per_row);
          int mismatches = 0;
          for (int64_t i = 0; i < ref.n_per_row; ++i)
            mismatches += fp32_to_bits(got[i]) != fp32_to_bits(deq[w * ref.n_per_row + i]);
          EXPECT_EQ(mismatches, 0) << name_of(type) << " random row " << w;
        }
      }
      const VecDotFn dot = vec_dot_fn(type, level);
      for (int64_t w = 0; w < n_random_rows; ++w)
        for (int64_t a = 0; a < ref.n_rows; ++a) {
          const float got = dot(ref.n_per_row, q.data() + w * row_size, act.data() + a * act_row);
          EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(want[w * ref.n_rows + a]))
              << name_of(type) << " at " << cpu_level_name(level) << ": random row " << w << " x act " << a;
        }
    }
  }
}

// Random blocks (every bit pattern is a valid block) give the scalar kernel's bits at every level:
// the SIMD kernels must decode every index, sign and scale as the scalar code does.
TEST(IqTypes, SimdLevelsGiveTheScalarBitsOnRandomBlocks) {
  std::mt19937 rng(11);
  const int64_t n = 4 * 256;
  std::vector<float> x(n);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (auto& v : x) v = dist(rng);
  std::vector<uint8_t> act(ggml_row_size(GgmlType::Q8_K, n));
  quantize_activation_row(GgmlType::Q8_K, x.data(), act.data(), n);
  for (GgmlType type : kIqTypes) {
    std::vector<uint8_t> w(ggml_row_size(type, n));
    for (int trial = 0; trial < 20; ++trial) {
      for (auto& b : w) b = static_cast<uint8_t>(rng());
      // A finite, moderate d in every block (its first two bytes).
      for (size_t off = 0; off < w.size(); off += ggml_type_info(type).type_size) {
        const uint16_t d = fp32_to_fp16(0.001f * static_cast<float>(1 + rng() % 100));
        std::memcpy(w.data() + off, &d, 2);
      }
      const float want = vec_dot_fn(type, CpuLevel::Scalar)(n, w.data(), act.data());
      for (CpuLevel level : test::machine_cpu_levels()) {
        const float got = vec_dot_fn(type, level)(n, w.data(), act.data());
        EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(want)) << name_of(type) << " at " << cpu_level_name(level);
      }
    }
  }
}

// Each level runs its own kernel (a level without one would silently test another level's).
TEST(IqTypes, EveryLevelHasItsOwnKernel) {
  for (GgmlType type : kIqTypes) {
    const VecDotFn scalar = vec_dot_fn(type, CpuLevel::Scalar);
    if (detected_cpu_level() >= CpuLevel::Avx2) {
      EXPECT_NE(vec_dot_fn(type, CpuLevel::Avx2), scalar) << name_of(type);
    }
    if (detected_cpu_level() >= CpuLevel::Avx512 && cpu_features().avx512_vnni) {
      EXPECT_NE(vec_dot_fn(type, CpuLevel::Avx512), vec_dot_fn(type, CpuLevel::Avx2)) << name_of(type);
    }
  }
}

// ns per 256-element superblock of each level's dot product (run with --gtest_also_run_disabled_tests).
TEST(IqTypes, DISABLED_DotThroughputReport) {
  const int64_t n = 4096;
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  std::vector<uint8_t> act(ggml_row_size(GgmlType::Q8_K, n));
  quantize_activation_row(GgmlType::Q8_K, x.data(), act.data(), n);
  for (GgmlType type : kIqTypes) {
    std::vector<uint8_t> w(ggml_row_size(type, n));
    quantize_row(type, x.data(), w.data(), n);
    std::printf("%-8s", name_of(type).c_str());
    for (CpuLevel level : test::machine_cpu_levels()) {
      const VecDotFn dot = vec_dot_fn(type, level);
      volatile float sink = 0;
      const double s = test::best_thread_seconds(5, [&] {
        for (int rep = 0; rep < 200; ++rep) sink = sink + dot(n, w.data(), act.data());
      });
      std::printf("  %s %.1f ns", std::string(cpu_level_name(level)).c_str(), s / 200 / (n / 256) * 1e9);
    }
    std::printf("\n");
  }
}

// ---- our quantizers ----

double relative_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, energy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    energy += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / energy);
}

std::vector<float> round_trip(GgmlType type, const std::vector<float>& x, int64_t n_per_row) {
  const size_t row_size = ggml_row_size(type, n_per_row);
  std::vector<uint8_t> q(row_size);
  std::vector<float> y(x.size());
  for (size_t r = 0; r < x.size() / n_per_row; ++r) {
    quantize_row(type, x.data() + r * n_per_row, q.data(), n_per_row);
    dequantize_row(type, q.data(), y.data() + r * n_per_row, n_per_row);
  }
  return y;
}

// On ggml's input rows our quantizers' error is within a modest factor of ggml's own (which
// searches much harder; iq2_xxs / iq2_xs there with an all-ones importance matrix), and on
// Gaussian rows it is below a per-type bound (what a model file made by mkmodel gets).
TEST(IqTypes, QuantizerErrorIsNearGgmls) {
  const auto& ref = reference();
  const struct {
    GgmlType type;
    double gaussian_bound;
  } cases[] = {{GgmlType::IQ4_XS, 0.11}, {GgmlType::IQ3_S, 0.2},   {GgmlType::IQ3_XXS, 0.22},
               {GgmlType::IQ2_XXS, 0.4}, {GgmlType::IQ2_XS, 0.36}, {GgmlType::IQ2_S, 0.34}};
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> gaussian(16 * 1024);
  for (auto& v : gaussian) v = dist(rng);
  for (const auto& c : cases) {
    const double ours = relative_rms_error(ref.input, round_trip(c.type, ref.input, ref.n_per_row));
    const double ggml = relative_rms_error(ref.input, as_floats(read_file(kDataDir + name_of(c.type) + ".dequant_f32.bin")));
    const double gauss = relative_rms_error(gaussian, round_trip(c.type, gaussian, 1024));
    std::printf("%-8s relative RMS error: ours %.4f, ggml's %.4f (fixture rows); Gaussian rows %.4f\n",
                name_of(c.type).c_str(), ours, ggml, gauss);
    EXPECT_LT(ours, 1.3 * ggml) << name_of(c.type);
    EXPECT_LT(gauss, c.gaussian_bound) << name_of(c.type);
  }
}

TEST(IqTypes, QuantizerKeepsZerosAndScale) {
  for (GgmlType type : kIqTypes) {
    std::vector<float> zeros(512, 0.f);
    for (float v : round_trip(type, zeros, 512)) ASSERT_EQ(v, 0.f) << name_of(type);
    // One superblock of zeros beside a loud one: each has its own d.
    std::vector<float> x(512, 0.f);
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.f, 100.f);
    for (int i = 256; i < 512; ++i) x[i] = dist(rng);
    const auto y = round_trip(type, x, 512);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.f) << name_of(type);
    std::vector<float> loud(x.begin() + 256, x.end()), loud_y(y.begin() + 256, y.end());
    EXPECT_LT(relative_rms_error(loud, loud_y), 0.45) << name_of(type);
  }
}

// ---- matmul: GEMV (one token) and GEMM (several) at every level ----

TEST(IqTypes, MatmulMatchesFloatReferenceAtEveryLevel) {
  ThreadPool pool(2);
  const int64_t n_in = 512, n_out = 21;
  std::mt19937 rng(17);
  for (GgmlType type : kIqTypes) {
    test::QuantRows w = test::make_k_quant_weights(type, n_in, n_out, 8, rng);
    const WeightMatrix m{type, n_in, n_out, w.bytes.data(), w.stride};
    std::vector<float> w_deq(n_in * n_out);
    for (int64_t r = 0; r < n_out; ++r) dequantize_row(type, w.row(r), w_deq.data() + r * n_in, n_in);
    for (int64_t n_tokens : {1, 2, 5, 12}) {
      const int64_t x_stride = n_in + 3, y_stride = n_out + 2;
      const auto x = test::make_k_quant_activations(n_in, n_tokens, x_stride, rng);
      std::vector<float> want(n_tokens * n_out), magnitude(n_tokens * n_out);
      std::vector<uint8_t> q(ggml_row_size(GgmlType::Q8_K, n_in));
      std::vector<float> a(n_in);
      for (int64_t t = 0; t < n_tokens; ++t) {
        quantize_activation_row(GgmlType::Q8_K, x.data() + t * x_stride, q.data(), n_in);
        dequantize_row(GgmlType::Q8_K, q.data(), a.data(), n_in);
        for (int64_t r = 0; r < n_out; ++r) {
          double sum = 0, mag = 0;
          for (int64_t i = 0; i < n_in; ++i) {
            sum += static_cast<double>(w_deq[r * n_in + i]) * a[i];
            mag += std::fabs(static_cast<double>(w_deq[r * n_in + i]) * a[i]);
          }
          want[t * n_out + r] = static_cast<float>(sum);
          magnitude[t * n_out + r] = static_cast<float>(mag);
        }
      }
      std::vector<float> first;
      for (CpuLevel level : test::machine_cpu_levels()) {
        test::ScopedCpuLevel scoped(level);
        std::vector<float> y(n_tokens * y_stride, -7.f);
        matmul(m, x.data(), n_tokens, x_stride, y.data(), y_stride, pool);
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t r = 0; r < y_stride; ++r) {
            const float got = y[t * y_stride + r];
            if (r >= n_out) {
              ASSERT_EQ(got, -7.f) << "wrote past n_out";
              continue;
            }
            ASSERT_NEAR(got, want[t * n_out + r], 1e-5 * magnitude[t * n_out + r] + 1e-6)
                << name_of(type) << " at " << cpu_level_name(level) << ", " << n_tokens << " tokens, t=" << t << " r=" << r;
          }
        // Every level gives the same bits (the kernels share ggml's float order).
        std::vector<float> packed;
        for (int64_t t = 0; t < n_tokens; ++t) packed.insert(packed.end(), y.begin() + t * y_stride, y.begin() + t * y_stride + n_out);
        if (first.empty()) first = packed;
        for (size_t i = 0; i < packed.size(); ++i)
          ASSERT_EQ(fp32_to_bits(packed[i]), fp32_to_bits(first[i])) << name_of(type) << " at " << cpu_level_name(level);
        test::expect_batch_equals_one_token_at_a_time(m, x, n_tokens, x_stride, y_stride, pool);
      }
    }
  }
}

}  // namespace
}  // namespace agentkv
