// matmul against a plain float reference (dequantized W, activations quantized and dequantized the
// way ggml does, double-precision dots), for every weight type, several token counts and every CPU
// level this machine has; plus get_row and the refusal of malformed shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

namespace agentkv {
namespace {

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                 GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                 GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

struct Problem {
  int64_t n_in, n_out, n_tokens, x_stride, y_stride;
  std::vector<uint8_t> w_bytes;
  std::vector<float> w_deq;  // n_out x n_in
  std::vector<float> x;      // n_tokens x x_stride
  WeightMatrix w;
};

Problem make_problem(GgmlType type, int64_t n_tokens, uint32_t seed) {
  Problem p;
  p.n_in = ggml_type_info(type).block_size == 256 ? 512 : 96;
  p.n_out = 37;  // not a multiple of the row tile
  p.n_tokens = n_tokens;
  p.x_stride = p.n_in + 5;
  p.y_stride = p.n_out + 3;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  const size_t row_bytes = ggml_row_size(type, p.n_in);
  p.w_bytes.resize(row_bytes * p.n_out);
  p.w_deq.resize(p.n_in * p.n_out);
  std::vector<float> row(p.n_in);
  for (int64_t r = 0; r < p.n_out; ++r) {
    for (auto& v : row) v = dist(rng) * 0.1f;
    quantize_row(type, row.data(), p.w_bytes.data() + r * row_bytes, p.n_in);
    dequantize_row(type, p.w_bytes.data() + r * row_bytes, p.w_deq.data() + r * p.n_in, p.n_in);
  }
  p.x.assign(n_tokens * p.x_stride, NAN);  // padding must never be read
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t i = 0; i < p.n_in; ++i) p.x[t * p.x_stride + i] = dist(rng);
  p.w = WeightMatrix{type, p.n_in, p.n_out, p.w_bytes.data(), row_bytes};
  return p;
}

// Reference y[t][r] and the magnitude sum |w a| it is compared at.
void reference(const Problem& p, int64_t t, int64_t r, double* value, double* magnitude) {
  const GgmlType act = vec_dot_type(p.w.type);
  std::vector<uint8_t> q(ggml_row_size(act, p.n_in));
  std::vector<float> a(p.n_in);
  quantize_activation_row(act, p.x.data() + t * p.x_stride, q.data(), p.n_in);
  dequantize_row(act, q.data(), a.data(), p.n_in);
  const float* w = p.w_deq.data() + r * p.n_in;
  double sum = 0, mag = 0;
  for (int64_t i = 0; i < p.n_in; ++i) {
    sum += static_cast<double>(w[i]) * a[i];
    mag += std::fabs(static_cast<double>(w[i]) * a[i]);
  }
  if (p.w.type == GgmlType::Q4_1 || p.w.type == GgmlType::Q5_1) {
    // ggml applies each block's min to the q8_1 block's stored s (fp16 of d * sum of quants).
    const auto* blocks = reinterpret_cast<const BlockQ8_1*>(q.data());
    const uint8_t* wrow = p.w_bytes.data() + r * p.w.row_bytes;
    const size_t block_bytes = ggml_type_info(p.w.type).type_size;
    for (int64_t b = 0; b < p.n_in / 32; ++b) {
      uint16_t m_bits;
      std::memcpy(&m_bits, wrow + b * block_bytes + 2, 2);  // d, m lead both block layouts
      double a_sum = 0;
      for (int j = 0; j < 32; ++j) a_sum += a[32 * b + j];
      sum += fp16_to_fp32(m_bits) * (fp16_to_fp32(blocks[b].s) - a_sum);
    }
  }
  *value = sum;
  *magnitude = mag;
}

class MatmulTest : public ::testing::Test {
 protected:
  void TearDown() override { set_cpu_level(level_before_); }
  const CpuLevel level_before_ = active_cpu_level();
  ThreadPool pool_{2};
};

TEST_F(MatmulTest, MatchesFloatReferenceForEveryTypeAndLevel) {
  for (CpuLevel level : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512}) {
    if (level > detected_cpu_level()) continue;
    ASSERT_EQ(set_cpu_level(level), level);
    for (GgmlType type : kWeightTypes) {
      for (int64_t n_tokens : {1, 3, 17}) {
        const Problem p = make_problem(type, n_tokens, static_cast<uint32_t>(type) * 100 + n_tokens);
        std::vector<float> y(n_tokens * p.y_stride, -12345.f);
        matmul(p.w, p.x.data(), n_tokens, p.x_stride, y.data(), p.y_stride, pool_);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < p.y_stride; ++r) {
            const float got = y[t * p.y_stride + r];
            if (r >= p.n_out) {
              ASSERT_EQ(got, -12345.f) << "wrote past n_out";
              continue;
            }
            double want, mag;
            reference(p, t, r, &want, &mag);
            ASSERT_NEAR(got, want, 1e-5 * mag + 1e-6)
                << ggml_type_name(type) << " level " << cpu_level_name(level) << " tokens " << n_tokens
                << " t=" << t << " r=" << r;
          }
        }
      }
    }
  }
}

// Tiling and threading only reorder whole dot products: each output equals a single vec_dot.
TEST_F(MatmulTest, EqualsIndividualDotProductsExactly) {
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16}) {
    const Problem p = make_problem(type, 17, 99);
    std::vector<float> y(17 * p.y_stride);
    matmul(p.w, p.x.data(), 17, p.x_stride, y.data(), p.y_stride, pool_);
    const GgmlType act = vec_dot_type(type);
    std::vector<uint8_t> q(ggml_row_size(act, p.n_in));
    for (int64_t t = 0; t < 17; ++t) {
      quantize_activation_row(act, p.x.data() + t * p.x_stride, q.data(), p.n_in);
      for (int64_t r = 0; r < p.n_out; ++r) {
        const float want = vec_dot(type, p.n_in, p.w_bytes.data() + r * p.w.row_bytes, q.data());
        ASSERT_EQ(y[t * p.y_stride + r], want) << ggml_type_name(type) << " t=" << t << " r=" << r;
      }
    }
  }
}

// llama.cpp multiplies a repacked q4_K weight (rows a multiple of 8) with a GEMM kernel for whole
// groups of 4 activation rows and a GEMV kernel for the rest, which round differently; matmul
// follows the same split, on every CPU level.
TEST_F(MatmulTest, Q4KWholeGroupsOfFourUseTheRowGroupKernel) {
  for (CpuLevel level : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512}) {
    if (level > detected_cpu_level()) continue;
    ASSERT_EQ(set_cpu_level(level), level);
    for (int64_t n_tokens : {1, 3, 4, 7, 9, 17}) {
      Problem p = make_problem(GgmlType::Q4_K, n_tokens, 40 + static_cast<uint32_t>(n_tokens));
      p.w.n_out = 32;  // a multiple of 8: llama.cpp would repack it
      std::vector<float> y(n_tokens * p.y_stride);
      matmul(p.w, p.x.data(), n_tokens, p.x_stride, y.data(), p.y_stride, pool_);
      const size_t act_row = ggml_row_size(GgmlType::Q8_K, p.n_in);
      std::vector<uint8_t> q(act_row * n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t)
        quantize_activation_row(GgmlType::Q8_K, p.x.data() + t * p.x_stride, q.data() + t * act_row, p.n_in);
      const int64_t grouped = n_tokens - n_tokens % 4;
      for (int64_t r = 0; r < p.w.n_out; ++r) {
        const uint8_t* wrow = p.w_bytes.data() + r * p.w.row_bytes;
        for (int64_t t = 0; t < n_tokens; ++t) {
          float want;
          if (t < grouped) {
            float group[kRowGroupSize];
            row_group_dot_fn(GgmlType::Q4_K)(p.n_in, wrow, q.data() + (t - t % 4) * act_row, act_row, group);
            want = group[t % 4];
          } else {
            want = vec_dot(GgmlType::Q4_K, p.n_in, wrow, q.data() + t * act_row);
          }
          ASSERT_EQ(y[t * p.y_stride + r], want) << cpu_level_name(level) << " tokens " << n_tokens << " t=" << t << " r=" << r;
        }
      }
      // As llama.cpp's MUL_MAT_ID: every row alone.
      matmul(p.w, p.x.data(), n_tokens, p.x_stride, y.data(), p.y_stride, pool_, RowGrouping::kEachRowAlone);
      for (int64_t r = 0; r < p.w.n_out; ++r)
        for (int64_t t = 0; t < n_tokens; ++t)
          ASSERT_EQ(y[t * p.y_stride + r],
                    vec_dot(GgmlType::Q4_K, p.n_in, p.w_bytes.data() + r * p.w.row_bytes, q.data() + t * act_row))
              << cpu_level_name(level) << " each row alone, tokens " << n_tokens << " t=" << t << " r=" << r;
    }
  }
}

TEST_F(MatmulTest, GetRowDequantizesOneRow) {
  for (GgmlType type : kWeightTypes) {
    const Problem p = make_problem(type, 1, 5);
    std::vector<float> row(p.n_in);
    for (int64_t r : {int64_t{0}, int64_t{17}, p.n_out - 1}) {
      get_row(p.w, r, row.data());
      for (int64_t i = 0; i < p.n_in; ++i)
        ASSERT_EQ(fp32_to_bits(row[i]), fp32_to_bits(p.w_deq[r * p.n_in + i])) << ggml_type_name(type);
    }
  }
}

TEST_F(MatmulTest, RefusesMalformedShapes) {
  Problem p = make_problem(GgmlType::Q4_K, 1, 3);
  std::vector<float> y(p.y_stride * 3), row(p.n_in);
  EXPECT_THROW(get_row(p.w, p.n_out, row.data()), Error);
  EXPECT_THROW(get_row(p.w, -1, row.data()), Error);
  WeightMatrix bad = p.w;
  bad.n_in = 100;  // not a multiple of 256
  EXPECT_THROW(matmul(bad, p.x.data(), 1, p.x_stride, y.data(), p.y_stride, pool_), Error);
  bad = p.w;
  bad.row_bytes = 10;
  EXPECT_THROW(matmul(bad, p.x.data(), 1, p.x_stride, y.data(), p.y_stride, pool_), Error);
  bad = p.w;
  bad.type = GgmlType::Q8_K;  // no dot product for this weight type
  bad.row_bytes = 0;
  EXPECT_THROW(matmul(bad, p.x.data(), 1, p.x_stride, y.data(), p.y_stride, pool_), Error);
  EXPECT_THROW(matmul(p.w, p.x.data(), 3, 10, y.data(), p.y_stride, pool_), Error);
}

}  // namespace
}  // namespace agentkv
