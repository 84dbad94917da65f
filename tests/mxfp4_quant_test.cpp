// The mxfp4 weight type against ggml's own vectors in tests/data/quant (made by
// tests/reference/mxfp4_reference.c): quantization byte for byte, dequantization bit for bit, q8_0
// activations byte for byte, vec_dot bit for bit at every CPU level (ggml_vec_dot_mxfp4_q8_0's x86
// order at the SIMD levels, its generic order at the scalar one), and matmul bit for bit with
// llama.cpp's repacked mxfp4 kernels at every level; then the GEMV / GEMM against the per-row
// kernel over many shapes, and round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_mxfp4.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "kernels/threadpool.h"
#include "binary_files.h"
#include "quant_gemm_test_util.h"

namespace agentkv {
namespace {

const std::string kDataDir = std::string(AGENTKV_SOURCE_DIR) + "/tests/data/quant/";

using test::as_floats;
using test::read_file;

struct Reference {
  int64_t n_rows = 0, n_per_row = 0;
  nlohmann::json entry;      // index.json's "mxfp4"
  std::vector<float> input;  // the fixture's rows
  std::vector<uint8_t> act;  // the input rows in q8_0, as ggml-cpu's from_float wrote them
};

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    const auto bytes = read_file(kDataDir + "index.json");
    const auto index = nlohmann::json::parse(bytes.begin(), bytes.end());
    r.n_rows = index.at("n_rows");
    r.n_per_row = index.at("n_per_row");
    r.entry = index.at("mxfp4");
    r.input = as_floats(read_file(kDataDir + "input_f32.bin"));
    r.act = read_file(kDataDir + "q8_0.act.bin");
    return r;
  }();
  return ref;
}

size_t row_size(int64_t n) { return ggml_row_size(GgmlType::MXFP4, n); }
size_t act_row_size(int64_t n) { return ggml_row_size(GgmlType::Q8_0, n); }

void expect_same_floats(const float* got, const float* want, int64_t n, const std::string& what) {
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (fp32_to_bits(got[i]) != fp32_to_bits(want[i]) && mismatches++ < 3)
      ADD_FAILURE() << what << ": element " << i << ": " << got[i] << " vs ggml " << want[i];
  }
  EXPECT_EQ(mismatches, 0) << what;
}

TEST(Mxfp4, BlockLayoutIsGgmls) {
  const GgmlTypeInfo* info = ggml_type_info(39);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->type, GgmlType::MXFP4);
  EXPECT_EQ(info->name, "mxfp4");
  EXPECT_EQ(info->block_size, 32);
  EXPECT_EQ(info->type_size, 17u);
  EXPECT_TRUE(info->quantized);
  EXPECT_FALSE(info->agentkv_only) << "GGUF files carry it";
  EXPECT_EQ(ggml_type_from_name("MXFP4"), GgmlType::MXFP4);
  EXPECT_EQ(vec_dot_type(GgmlType::MXFP4), GgmlType::Q8_0);
  const auto& e = reference().entry;
  EXPECT_EQ(e.at("ggml_type_id").get<uint32_t>(), 39u);
  EXPECT_EQ(e.at("block_size").get<int64_t>(), 32);
  EXPECT_EQ(e.at("type_size").get<size_t>(), 17u);
  EXPECT_EQ(e.at("row_size").get<size_t>(), row_size(reference().n_per_row));
  EXPECT_EQ(e.at("vec_dot_type").get<std::string>(), "q8_0");
}

TEST(Mxfp4, HalfScaleIsGgmlsE8M0Half) {
  EXPECT_EQ(fp32_to_bits(mxfp4_half_scale(0)), 0x00200000u);  // 2^-128
  EXPECT_EQ(fp32_to_bits(mxfp4_half_scale(1)), 0x00400000u);  // 2^-127
  for (int e = 2; e < 256; ++e) EXPECT_EQ(mxfp4_half_scale(static_cast<uint8_t>(e)), std::ldexp(1.f, e - 128)) << e;
}

TEST(Mxfp4, QuantizeMatchesGgmlByteForByte) {
  const auto& ref = reference();
  const auto want = read_file(kDataDir + "mxfp4.quant.bin");
  ASSERT_EQ(want.size(), row_size(ref.n_per_row) * ref.n_rows);
  std::vector<uint8_t> got(want.size());
  quantize_row(GgmlType::MXFP4, ref.input.data(), got.data(), ref.n_rows * ref.n_per_row);
  EXPECT_EQ(got, want);
  // The quantizer's corners: ties between levels, zeros, powers of two and their neighbours, tiny
  // and huge magnitudes (exponents that ggml's float-to-byte conversion wraps).
  const auto edge = as_floats(read_file(kDataDir + "mxfp4.edge_input_f32.bin"));
  const auto edge_want = read_file(kDataDir + "mxfp4.edge_input.quant.bin");
  const int64_t blocks = ref.entry.at("edge_input_blocks");
  ASSERT_EQ(edge.size(), static_cast<size_t>(blocks * 32));
  ASSERT_EQ(edge_want.size(), static_cast<size_t>(blocks * 17));
  std::vector<uint8_t> edge_got(edge_want.size());
  quantize_row(GgmlType::MXFP4, edge.data(), edge_got.data(), blocks * 32);
  for (int64_t b = 0; b < blocks; ++b)
    EXPECT_EQ(std::memcmp(edge_got.data() + 17 * b, edge_want.data() + 17 * b, 17), 0)
        << "edge block " << b << ": exponent " << int{edge_got[17 * b]} << " vs ggml " << int{edge_want[17 * b]};
}

TEST(Mxfp4, DequantizeMatchesGgmlBitForBit) {
  const struct {
    const char* quant;
    const char* dequant;
  } sets[] = {{"mxfp4.quant.bin", "mxfp4.dequant_f32.bin"},
              {"mxfp4.random.quant.bin", "mxfp4.random.dequant_f32.bin"},
              {"mxfp4.edge.quant.bin", "mxfp4.edge.dequant_f32.bin"}};  // every exponent 0..255
  for (const auto& s : sets) {
    const auto q = read_file(kDataDir + s.quant);
    const auto want = as_floats(read_file(kDataDir + s.dequant));
    ASSERT_EQ(q.size() % 17, 0u);
    const int64_t n = static_cast<int64_t>(q.size() / 17 * 32);
    ASSERT_EQ(want.size(), static_cast<size_t>(n)) << s.quant;
    std::vector<float> got(n);
    dequantize_row(GgmlType::MXFP4, q.data(), got.data(), n);
    expect_same_floats(got.data(), want.data(), n, s.quant);
  }
}

TEST(Mxfp4, ActivationsAreGgmlsQ8_0) {
  const auto& ref = reference();
  const size_t act_row = act_row_size(ref.n_per_row);
  const auto random_act = read_file(kDataDir + "q8_0.random_act.bin");
  const auto random_x = as_floats(read_file(kDataDir + "mxfp4.random_act_f32.bin"));
  ASSERT_EQ(ref.act.size(), act_row * ref.n_rows);
  ASSERT_EQ(random_act.size(), act_row * ref.n_rows);
  std::vector<uint8_t> got(act_row);
  for (int64_t r = 0; r < ref.n_rows; ++r) {
    quantize_activation_row(GgmlType::Q8_0, ref.input.data() + r * ref.n_per_row, got.data(), ref.n_per_row);
    EXPECT_EQ(std::memcmp(got.data(), ref.act.data() + r * act_row, act_row), 0) << "row " << r;
    quantize_activation_row(GgmlType::Q8_0, random_x.data() + r * ref.n_per_row, got.data(), ref.n_per_row);
    EXPECT_EQ(std::memcmp(got.data(), random_act.data() + r * act_row, act_row), 0) << "random row " << r;
  }
}

// ggml-cpu's x86 kernel (blocks in pairs into two 8-lane accumulators) is what the SIMD levels
// reproduce; the scalar level is ggml's generic kernel (one running sum), so it is held to ggml's
// values within float rounding and to its own order exactly (computed here block by block).
float generic_order_dot(int64_t n, const uint8_t* w, const uint8_t* a) {
  const auto* x = reinterpret_cast<const BlockMXFP4*>(w);
  const auto* y = reinterpret_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    int isum = 0;
    for (int j = 0; j < 16; ++j)
      isum += y[b].qs[j] * kMXFP4Values[x[b].qs[j] & 0xF] + y[b].qs[j + 16] * kMXFP4Values[x[b].qs[j] >> 4];
    volatile float term = fp16_to_fp32(y[b].d) * mxfp4_half_scale(x[b].e) * static_cast<float>(isum);
    sum += term;
  }
  return sum;
}

void check_dots(CpuLevel level, const std::vector<uint8_t>& q, size_t w_stride, int64_t n_w, const std::vector<uint8_t>& act,
                size_t a_stride, int64_t n_act, int64_t n, const float* want, const std::string& what) {
  const VecDotFn dot = vec_dot_fn(GgmlType::MXFP4, level);
  for (int64_t w = 0; w < n_w; ++w)
    for (int64_t a = 0; a < n_act; ++a) {
      const uint8_t* wr = q.data() + w * w_stride;
      const uint8_t* ar = act.data() + a * a_stride;
      const float got = dot(n, wr, ar), ggml = want[w * n_act + a];
      const std::string where = what + " at " + std::string(cpu_level_name(level)) + ": n " + std::to_string(n) +
                                ", row " + std::to_string(w) + " x act " + std::to_string(a);
      if (level == CpuLevel::Scalar) {
        EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(generic_order_dot(n, wr, ar))) << where;
        double magnitude = 0;
        std::vector<float> wf(n), af(n);
        dequantize_row(GgmlType::MXFP4, wr, wf.data(), n);
        dequantize_row(GgmlType::Q8_0, ar, af.data(), n);
        for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(static_cast<double>(wf[i]) * af[i]);
        EXPECT_NEAR(got, ggml, 4e-6 * magnitude) << where;
      } else {
        EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(ggml)) << where << ": " << got << " vs ggml " << ggml;
      }
    }
}

TEST(Mxfp4, DotMatchesGgmlBitForBitAtEveryLevel) {
  const auto& ref = reference();
  const auto q = read_file(kDataDir + "mxfp4.quant.bin");
  const auto want = as_floats(read_file(kDataDir + "mxfp4.dot_f32.bin"));
  const auto want_odd = as_floats(read_file(kDataDir + "mxfp4.dot_odd_f32.bin"));
  const auto lengths = ref.entry.at("odd_lengths").get<std::vector<int64_t>>();
  const int64_t pairs = ref.n_rows * ref.n_rows;
  ASSERT_EQ(want.size(), static_cast<size_t>(pairs));
  ASSERT_EQ(want_odd.size(), lengths.size() * pairs);
  const size_t w_stride = row_size(ref.n_per_row), a_stride = act_row_size(ref.n_per_row);
  for (CpuLevel level : test::machine_cpu_levels()) {
    check_dots(level, q, w_stride, ref.n_rows, ref.act, a_stride, ref.n_rows, ref.n_per_row, want.data(), "fixture rows");
    for (size_t i = 0; i < lengths.size(); ++i)  // odd block counts: the last block goes alone
      check_dots(level, q, w_stride, ref.n_rows, ref.act, a_stride, ref.n_rows, lengths[i], want_odd.data() + i * pairs,
                 "fixture rows (prefix)");
  }
}

TEST(Mxfp4, RandomBlocksMatchGgmlBitForBitAtEveryLevel) {
  const auto& ref = reference();
  const int64_t n_random = ref.entry.at("random_rows");
  const auto q = read_file(kDataDir + "mxfp4.random.quant.bin");
  const auto act = read_file(kDataDir + "q8_0.random_act.bin");
  const auto want = as_floats(read_file(kDataDir + "mxfp4.random.dot_f32.bin"));
  ASSERT_EQ(q.size(), row_size(ref.n_per_row) * n_random);
  ASSERT_EQ(want.size(), static_cast<size_t>(n_random * ref.n_rows));
  for (CpuLevel level : test::machine_cpu_levels())
    check_dots(level, q, row_size(ref.n_per_row), n_random, act, act_row_size(ref.n_per_row), ref.n_rows, ref.n_per_row,
               want.data(), "random blocks");
}

TEST(Mxfp4, EverySimdLevelHasItsOwnKernel) {
  const VecDotFn scalar = vec_dot_fn(GgmlType::MXFP4, CpuLevel::Scalar);
  if (detected_cpu_level() >= CpuLevel::Avx2) {
    EXPECT_NE(vec_dot_fn(GgmlType::MXFP4, CpuLevel::Avx2), scalar);
  }
  if (detected_cpu_level() >= CpuLevel::Avx512 && cpu_features().avx512_vnni) {
    EXPECT_NE(vec_dot_fn(GgmlType::MXFP4, CpuLevel::Avx512), vec_dot_fn(GgmlType::MXFP4, CpuLevel::Avx2));
  }
}

// llama.cpp's own mul_mat of an mxfp4 matrix in its CPU_REPACK buffer (GEMM for 4 tokens at a time,
// GEMV for the rest), against matmul, at every level, one or two threads, both row groupings.
TEST(Mxfp4, MatmulMatchesLlamaCppRepackedKernelsAtEveryLevel) {
  const auto& mm = reference().entry.at("matmul");
  const int64_t n_in = mm.at("n_in"), n_out = mm.at("n_out");
  const auto tokens = mm.at("tokens").get<std::vector<int64_t>>();
  const auto w = read_file(kDataDir + "mxfp4.matmul_w.quant.bin");
  const auto x = as_floats(read_file(kDataDir + "mxfp4.matmul_act_f32.bin"));
  const auto want = as_floats(read_file(kDataDir + "mxfp4.matmul_out_f32.bin"));
  ASSERT_EQ(w.size(), row_size(n_in) * n_out);
  ASSERT_TRUE(uses_repacked_order(GgmlType::MXFP4, n_out));
  const WeightMatrix m{GgmlType::MXFP4, n_in, n_out, w.data(), row_size(n_in)};
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (CpuLevel level : test::machine_cpu_levels()) {
      test::ScopedCpuLevel scoped(level);
      for (RowGrouping grouping : {RowGrouping::kBatch, RowGrouping::kEachRowAlone}) {
        size_t at = 0;
        for (int64_t n : tokens) {
          ASSERT_LE(at + n * n_out, want.size());
          std::vector<float> y(n * n_out);
          matmul(m, x.data(), n, n_in, y.data(), n_out, pool, grouping);
          expect_same_floats(y.data(), want.data() + at, n * n_out,
                             std::string(cpu_level_name(level)) + ", " + std::to_string(n) + " tokens, " +
                                 std::to_string(threads) + " threads");
          at += n * n_out;
        }
        EXPECT_EQ(at, want.size());
      }
    }
  }
}

// Weights from normal rows with an outlier each; activations normal with one large value a row.
struct Problem {
  int64_t n_in, n_out, n_tokens;
  test::QuantRows w;
  std::vector<float> x;
  std::vector<uint8_t> act;
};

Problem make_problem(int64_t n_in, int64_t n_out, int64_t n_tokens, size_t pad, std::mt19937& rng) {
  Problem p{n_in, n_out, n_tokens, test::make_k_quant_weights(GgmlType::MXFP4, n_in, n_out, pad, rng), {}, {}};
  p.x = test::make_k_quant_activations(n_in, n_tokens, n_in, rng);
  p.act.resize(act_row_size(n_in) * n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize_activation_row(GgmlType::Q8_0, p.x.data() + t * n_in, p.act.data() + t * act_row_size(n_in), n_in);
  return p;
}

// Every output of the GEMV / GEMM is the portable per-row kernel's, over row counts off the 16-row
// group, token counts across the GEMV / GEMM switch and the token tiles, and one or two threads;
// nothing lands in y's padding.
TEST(Mxfp4, MatmulKernelsGiveThePerRowChainBits) {
  if (!mxfp4_matmul_available()) GTEST_SKIP() << "no SIMD level on this machine";
  const VecDotFn chain = repacked_dot_fn(GgmlType::MXFP4);
  ASSERT_NE(chain, nullptr);
  struct Shape {
    int64_t n_in, n_out, n_tokens;
  };
  const Shape shapes[] = {{32, 8, 1},   {64, 8, 2},    {96, 16, 3},  {480, 24, 4},  {2880, 40, 1}, {2880, 8, 5},
                          {512, 48, 9}, {160, 72, 17}, {32, 24, 33}, {1024, 56, 12}, {480, 16, 64}};
  std::mt19937 rng(3);
  for (CpuLevel level : test::machine_cpu_levels()) {
    if (level == CpuLevel::Scalar) continue;
    test::ScopedCpuLevel scoped(level);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (const Shape& s : shapes) {
        const Problem p = make_problem(s.n_in, s.n_out, s.n_tokens, 7, rng);
        const int64_t y_stride = s.n_out + 3;
        std::vector<float> y(s.n_tokens * y_stride, -7.f);
        mxfp4_matmul(p.w.bytes.data(), p.w.stride, s.n_out, s.n_in, p.act.data(), act_row_size(s.n_in), s.n_tokens,
                     y.data(), y_stride, pool);
        for (int64_t t = 0; t < s.n_tokens; ++t)
          for (int64_t r = 0; r < y_stride; ++r) {
            const std::string where = std::string(cpu_level_name(level)) + " " + std::to_string(s.n_in) + "x" +
                                      std::to_string(s.n_out) + ", " + std::to_string(s.n_tokens) + " tokens, " +
                                      std::to_string(threads) + " threads, row " + std::to_string(r) + " token " +
                                      std::to_string(t);
            if (r >= s.n_out) {
              ASSERT_EQ(y[t * y_stride + r], -7.f) << "wrote into the y padding, " << where;
              continue;
            }
            const float want = chain(s.n_in, p.w.row(r), p.act.data() + t * act_row_size(s.n_in));
            ASSERT_EQ(fp32_to_bits(y[t * y_stride + r]), fp32_to_bits(want)) << where;
          }
      }
    }
  }
}

// matmul: the repacked order for a multiple of 8 rows, ggml's vec_dot otherwise; a token in a
// batch gets the bits it gets alone; the result is near a double-precision reference.
TEST(Mxfp4, MatmulPicksTheOrderByRowCount) {
  ThreadPool pool(2);
  std::mt19937 rng(9);
  for (CpuLevel level : test::machine_cpu_levels()) {
    test::ScopedCpuLevel scoped(level);
    for (int64_t n_out : {16, 21}) {
      const int64_t n_in = 256, n_tokens = 6;
      const Problem p = make_problem(n_in, n_out, n_tokens, 0, rng);
      const WeightMatrix m{GgmlType::MXFP4, n_in, n_out, p.w.bytes.data(), p.w.stride};
      std::vector<float> y(n_tokens * n_out);
      matmul(m, p.x.data(), n_tokens, n_in, y.data(), n_out, pool);
      const VecDotFn dot = n_out % 8 == 0 ? repacked_dot_fn(GgmlType::MXFP4) : vec_dot_fn(GgmlType::MXFP4, level);
      std::vector<float> wf(n_in), af(n_in);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const uint8_t* a = p.act.data() + t * act_row_size(n_in);
        dequantize_row(GgmlType::Q8_0, a, af.data(), n_in);
        for (int64_t r = 0; r < n_out; ++r) {
          EXPECT_EQ(fp32_to_bits(y[t * n_out + r]), fp32_to_bits(dot(n_in, p.w.row(r), a)))
              << cpu_level_name(level) << " n_out " << n_out << " t " << t << " r " << r;
          dequantize_row(GgmlType::MXFP4, p.w.row(r), wf.data(), n_in);
          double sum = 0, magnitude = 0;
          for (int64_t i = 0; i < n_in; ++i) {
            sum += static_cast<double>(wf[i]) * af[i];
            magnitude += std::fabs(static_cast<double>(wf[i]) * af[i]);
          }
          EXPECT_NEAR(y[t * n_out + r], sum, 1e-6 * magnitude);
        }
      }
      test::expect_batch_equals_one_token_at_a_time(m, p.x, n_tokens, n_in, n_out, pool);
    }
  }
}

// ---- round trips ----

TEST(Mxfp4, RoundTripErrorIsBounded) {
  std::mt19937 rng(4);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(64 * 32), y(x.size());
  for (auto& v : x) v = dist(rng);
  std::vector<uint8_t> q(row_size(static_cast<int64_t>(x.size())));
  quantize_row(GgmlType::MXFP4, x.data(), q.data(), static_cast<int64_t>(x.size()));
  dequantize_row(GgmlType::MXFP4, q.data(), y.data(), static_cast<int64_t>(y.size()));
  double err = 0, energy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    energy += static_cast<double>(x[i]) * x[i];
  }
  std::printf("mxfp4 relative RMS error on Gaussian rows: %.4f\n", std::sqrt(err / energy));
  EXPECT_LT(std::sqrt(err / energy), 0.2);
  // Every element lands at most half a level step away (the largest step, 8 to 12 half-scales d, is
  // 4 d), except above the top level: the exponent puts amax in [8 d, 16 d), so up to 4 d is clipped.
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float d = mxfp4_half_scale(q[b * 17]);
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(x[32 * b + j]), err = std::fabs(x[32 * b + j] - y[32 * b + j]);
      EXPECT_LE(err, ax > 12 * d ? ax - 12 * d : 2 * d) << b << " " << j;
      EXPECT_LT(ax, 16 * d);
    }
  }
  // Values already on the grid of a block whose largest code is 8 or 12 come back exactly.
  std::vector<float> back(y.size());
  std::vector<uint8_t> q2(q.size());
  quantize_row(GgmlType::MXFP4, y.data(), q2.data(), static_cast<int64_t>(y.size()));
  dequantize_row(GgmlType::MXFP4, q2.data(), back.data(), static_cast<int64_t>(back.size()));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(y[32 * b + j]));
    if (amax < 8 * mxfp4_half_scale(q[b * 17])) continue;
    for (int j = 0; j < 32; ++j) EXPECT_EQ(back[32 * b + j], y[32 * b + j]) << "block " << b;
  }
}

// Single-thread matmul (activation conversion included) at gpt-oss-20b's expert shape and one that
// stays in L2, as tests/reference/mxfp4_bench.c times llama.cpp's (run with
// --gtest_also_run_disabled_tests; docs/quant-types.md "mxfp4" has both).
TEST(Mxfp4, DISABLED_ThroughputReport) {
  ThreadPool one_thread(1);
  std::mt19937 rng(5);
  for (int64_t n_out : {2880, 256}) {
    const int64_t n_in = 2880;
    const Problem p = make_problem(n_in, n_out, 256, 0, rng);
    const WeightMatrix m{GgmlType::MXFP4, n_in, n_out, p.w.bytes.data(), p.w.stride};
    std::vector<float> y(256 * n_out);
    for (int64_t n_tokens : {1, 2, 4, 8, 16, 64, 256}) {
      const int reps = n_tokens >= 64 ? 2 : 20;
      const double s = test::best_thread_seconds(5, [&] {
        for (int k = 0; k < reps; ++k) matmul(m, p.x.data(), n_tokens, n_in, y.data(), n_out, one_thread);
      }) / reps;
      std::printf("agentkv mxfp4 [%lld x %lld] x %lld tokens at %s: %.3f ms (%.1f GMAC/s)\n", static_cast<long long>(n_in),
                  static_cast<long long>(n_out), static_cast<long long>(n_tokens),
                  std::string(cpu_level_name(active_cpu_level())).c_str(), s * 1e3, 1e-9 * n_in * n_out * n_tokens / s);
    }
  }
}

}  // namespace
}  // namespace agentkv
