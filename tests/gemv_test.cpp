// Decode GEMV (kernels/gemv.h: matmul with one token, and the batch GEMV for a few tokens, as in
// multi-sequence decode): every output must carry exactly the bits of
// the per-row dot product vec_dot_fn(type) (llama.cpp's float order, itself checked against
// llama.cpp data in quant_test / gemm_*_test), for any row count (groups and leftover rows), row
// range, padded row stride, token count (1..9: whole and partial register tiles of token pairs),
// padded activation / output strides, thread count, and for extreme quants and scales.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_q4_K.h"
#include "kernels/gemm_q6_K.h"
#include "kernels/gemm_q8_0.h"
#include "kernels/gemv.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "kernels/threadpool.h"

namespace agentkv {
namespace {

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K};
// One-token tests also cover f16 (its GEMV is the AVX2 level's; several f16 tokens take the float GEMM).
const GgmlType kOneTokenTypes[] = {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16};

struct Matrix {
  GgmlType type;
  int64_t n_in = 0, n_out = 0;
  size_t stride = 0;
  std::vector<uint8_t> bytes;
  const uint8_t* row(int64_t r) const { return bytes.data() + static_cast<size_t>(r) * stride; }
  WeightMatrix view() const { return WeightMatrix{type, n_in, n_out, bytes.data(), stride}; }
};

// Overwrites the fp16 scale at byte `offset` of every block with a finite value.
void set_scales(Matrix& m, size_t block_bytes, size_t offset, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-0.02f, 0.02f);
  for (int64_t r = 0; r < m.n_out; ++r) {
    uint8_t* row = m.bytes.data() + r * m.stride;
    for (size_t at = 0; at + block_bytes <= ggml_row_size(m.type, m.n_in); at += block_bytes) {
      const uint16_t h = fp32_to_fp16(dist(rng));
      std::memcpy(row + at + offset, &h, 2);
    }
  }
}

// Even rows: quantized from normal floats (what real files hold). Odd rows: random bytes with
// finite scales, which reach the extreme quants, 6-bit scales and mins the quantizer rarely emits.
Matrix make_matrix(GgmlType type, int64_t n_in, int64_t n_out, size_t pad, std::mt19937& rng) {
  Matrix m{type, n_in, n_out, ggml_row_size(type, n_in) + pad, {}};
  m.bytes.resize(m.stride * n_out);
  for (auto& b : m.bytes) b = static_cast<uint8_t>(rng());
  Matrix raw = m;
  switch (type) {
    case GgmlType::Q8_0: set_scales(raw, sizeof(BlockQ8_0), offsetof(BlockQ8_0, d), rng); break;
    case GgmlType::Q4_K:
      set_scales(raw, sizeof(BlockQ4_K), offsetof(BlockQ4_K, d), rng);
      set_scales(raw, sizeof(BlockQ4_K), offsetof(BlockQ4_K, dmin), rng);
      break;
    case GgmlType::Q6_K: set_scales(raw, sizeof(BlockQ6_K), offsetof(BlockQ6_K, d), rng); break;
    case GgmlType::F16: {  // random finite halves, down to subnormals
      std::uniform_real_distribution<float> mag(-20.f, 3.f);
      for (int64_t r = 0; r < n_out; ++r) {
        for (int64_t j = 0; j < n_in; ++j) {
          const uint16_t h = fp32_to_fp16((rng() % 2 ? 1.f : -1.f) * std::exp2(mag(rng)));
          std::memcpy(raw.bytes.data() + r * raw.stride + 2 * j, &h, 2);
        }
      }
      break;
    }
    default: break;
  }
  std::normal_distribution<float> dist(0.f, 0.05f);
  std::vector<float> x(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    if (r % 2 == 1) {
      std::memcpy(m.bytes.data() + r * m.stride, raw.row(r), m.stride);
      continue;
    }
    for (auto& v : x) v = dist(rng);
    quantize_row(type, x.data(), m.bytes.data() + r * m.stride, n_in);
  }
  return m;
}

std::vector<float> make_activation(int64_t n_in, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(n_in);
  for (auto& v : x) v = dist(rng);
  x[rng() % n_in] *= 30.f;  // an outlier, as real activations have
  return x;
}

std::vector<uint8_t> convert(GgmlType type, const std::vector<float>& x) {
  const GgmlType act_type = vec_dot_type(type);
  std::vector<uint8_t> act(ggml_row_size(act_type, static_cast<int64_t>(x.size())));
  quantize_activation_row(act_type, x.data(), act.data(), static_cast<int64_t>(x.size()));
  return act;
}

std::string describe(GgmlType type, int64_t n_in, int64_t n_out, int threads, int64_t row) {
  return std::string(ggml_type_name(type)) + " " + std::to_string(n_in) + "x" + std::to_string(n_out) + " threads " +
         std::to_string(threads) + " row " + std::to_string(row);
}

// Runs fn() at each SIMD level the machine has (AVX2 and AVX-512 have kernels of their own), then
// restores the level.
template <class Fn>
void at_each_simd_level(const Fn& fn) {
  const CpuLevel before = active_cpu_level();
  for (CpuLevel level : {CpuLevel::Avx2, CpuLevel::Avx512}) {
    if (set_cpu_level(level) != level) continue;
    SCOPED_TRACE(std::string("level ") + std::string(cpu_level_name(level)));
    fn();
  }
  set_cpu_level(before);
}

TEST(Gemv, AvailableAtAvx2AndAbove) {
  const CpuLevel before = active_cpu_level();
  for (CpuLevel level : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512}) {
    set_cpu_level(level);
    const bool simd = active_cpu_level() >= CpuLevel::Avx2;
    EXPECT_EQ(gemv_available(GgmlType::Q8_0), avx512_vnni_active() || active_cpu_level() == CpuLevel::Avx2);
    EXPECT_EQ(gemv_available(GgmlType::Q4_K), simd);
    EXPECT_EQ(gemv_available(GgmlType::Q6_K), avx512_vnni_active() || active_cpu_level() == CpuLevel::Avx2);
    EXPECT_EQ(gemv_available(GgmlType::F16), avx512_vnni_active() || active_cpu_level() == CpuLevel::Avx2);
    EXPECT_FALSE(gemv_available(GgmlType::Q5_K));
    // One token takes the kernel wherever it exists, except AMD's AVX-512 q8_0 / q6_K (row by row).
    for (GgmlType type : kOneTokenTypes) {
      const bool row_by_row = avx512_vnni_active() && cpu_features().amd && (type == GgmlType::Q8_0 || type == GgmlType::Q6_K);
      EXPECT_EQ(gemv_preferred(type), gemv_available(type) && !row_by_row) << ggml_type_name(type);
    }
  }
  set_cpu_level(before);
}

// matmul with one token against vec_dot row by row.
TEST(Gemv, MatmulOneTokenEqualsPerRowDotBitForBit) {
  at_each_simd_level([] {
  std::mt19937 rng(17);
  const int64_t row_counts[] = {1, 3, 7, 8, 13, 37, 67};
  for (GgmlType type : kOneTokenTypes) {
    for (int64_t n_in : {int64_t{1024}, int64_t{3072}, int64_t{256}, type == GgmlType::F16 ? int64_t{1000} : int64_t{512}}) {
      for (int64_t n_out : row_counts) {
        const Matrix m = make_matrix(type, n_in, n_out, n_out % 2 == 1 ? 0 : 12, rng);
        const std::vector<float> x = make_activation(n_in, rng);
        const std::vector<uint8_t> act = convert(type, x);
        const VecDotFn dot = vec_dot_fn(type);
        for (int threads : {1, 2}) {
          ThreadPool pool(threads);
          std::vector<float> y(n_out + 1, -7.f);
          matmul(m.view(), x.data(), 1, n_in, y.data(), n_out, pool);
          for (int64_t r = 0; r < n_out; ++r) {
            const float want = dot(n_in, m.row(r), act.data());
            ASSERT_EQ(fp32_to_bits(y[r]), fp32_to_bits(want)) << describe(type, n_in, n_out, threads, r);
          }
          EXPECT_EQ(y[n_out], -7.f) << "wrote past the output, " << describe(type, n_in, n_out, threads, n_out);
        }
      }
    }
  }
  });
}

// gemv_rows on ranges that start and end off the row groups (a thread's share), the prefetch
// never reading outside the matrix (the last rows of an exactly-sized allocation).
TEST(Gemv, RowRangesEqualPerRowDot) {
  at_each_simd_level([] {
  std::mt19937 rng(23);
  for (GgmlType type : kOneTokenTypes) {
    if (!gemv_available(type)) continue;
    const int64_t n_in = 1024, n_out = 101;
    const Matrix m = make_matrix(type, n_in, n_out, 0, rng);
    const std::vector<uint8_t> act = convert(type, make_activation(n_in, rng));
    const VecDotFn dot = vec_dot_fn(type);
    for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 101}, {5, 6}, {3, 90}, {17, 101}, {40, 40}}) {
      std::vector<float> y(n_out, -7.f);
      gemv_rows(type, m.bytes.data(), m.stride, n_in, act.data(), begin, end, y.data());
      for (int64_t r = 0; r < n_out; ++r) {
        const std::string where = describe(type, n_in, n_out, 1, r) + " range " + std::to_string(begin) + ".." +
                                  std::to_string(end);
        if (r < begin || r >= end) {
          EXPECT_EQ(y[r], -7.f) << "wrote outside the range, " << where;
        } else {
          EXPECT_EQ(fp32_to_bits(y[r]), fp32_to_bits(dot(n_in, m.row(r), act.data()))) << where;
        }
      }
    }
  }
  });
}

// n_tokens activation rows of n_in floats, x_stride floats apart (the padding holds garbage).
std::vector<float> make_activations(int64_t n_in, int64_t n_tokens, int64_t x_stride, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(x_stride * n_tokens), 1e30f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const std::vector<float> row = make_activation(n_in, rng);
    std::copy(row.begin(), row.end(), x.begin() + t * x_stride);
  }
  return x;
}

// The rows converted to vec_dot_type(type), packed (ggml_row_size apart).
std::vector<uint8_t> convert_rows(GgmlType type, const std::vector<float>& x, int64_t n_in, int64_t n_tokens,
                                  int64_t x_stride) {
  const GgmlType act_type = vec_dot_type(type);
  const size_t row = ggml_row_size(act_type, n_in);
  std::vector<uint8_t> act(row * static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) quantize_activation_row(act_type, x.data() + t * x_stride, act.data() + t * row, n_in);
  return act;
}

// matmul with 1..9, 17, 32, 33 tokens against vec_dot per (row, token): q8_0 takes the batch GEMV
// up to gemv_batch_max_tokens (32) and its GEMM beyond, q6_K likewise (16), q4_K (every row alone,
// so vec_dot numerics) likewise (6); all must equal the per-dot loop.
TEST(Gemv, MatmulFewTokensEqualsPerRowDotBitForBit) {
  at_each_simd_level([] {
  std::mt19937 rng(31);
  const int64_t row_counts[] = {1, 7, 8, 13, 37};
  for (GgmlType type : kTypes) {
    const RowGrouping grouping = type == GgmlType::Q4_K ? RowGrouping::kEachRowAlone : RowGrouping::kBatch;
    for (int64_t n_in : {256, 1024}) {
      for (int64_t n_out : row_counts) {
        const Matrix m = make_matrix(type, n_in, n_out, n_out % 2 == 1 ? 0 : 12, rng);
        const VecDotFn dot = vec_dot_fn(type);
        const size_t act_row = ggml_row_size(vec_dot_type(type), n_in);
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 32, 33}) {
          const int64_t x_stride = n_in + (n_tokens % 2) * 5, y_stride = n_out + (n_tokens % 3) * 3;
          const std::vector<float> x = make_activations(n_in, n_tokens, x_stride, rng);
          const std::vector<uint8_t> act = convert_rows(type, x, n_in, n_tokens, x_stride);
          for (int threads : {1, 2}) {
            ThreadPool pool(threads);
            std::vector<float> y(static_cast<size_t>(y_stride * n_tokens), -7.f);
            matmul(m.view(), x.data(), n_tokens, x_stride, y.data(), y_stride, pool, grouping);
            for (int64_t t = 0; t < n_tokens; ++t) {
              for (int64_t r = 0; r < y_stride; ++r) {
                const float got = y[t * y_stride + r];
                const std::string where = describe(type, n_in, n_out, threads, r) + " token " + std::to_string(t) +
                                          " of " + std::to_string(n_tokens);
                if (r >= n_out) {
                  ASSERT_EQ(got, -7.f) << "wrote into the output padding, " << where;
                } else {
                  ASSERT_EQ(fp32_to_bits(got), fp32_to_bits(dot(n_in, m.row(r), act.data() + t * act_row))) << where;
                }
              }
            }
          }
        }
      }
    }
  }
  });
}

// gemv_batch_rows itself on ranges that start and end off the row groups, with padded activation
// and output strides; nothing outside the range written; the prefetch stays inside the matrix.
TEST(Gemv, BatchRowRangesEqualPerRowDot) {
  at_each_simd_level([] {
  std::mt19937 rng(37);
  for (GgmlType type : kTypes) {
    const int64_t n_in = 512, n_out = 53;
    const Matrix m = make_matrix(type, n_in, n_out, 0, rng);
    const VecDotFn dot = vec_dot_fn(type);
    for (int64_t n_tokens : {2, 3, 8, 9, 11}) {
      const std::vector<float> x = make_activations(n_in, n_tokens, n_in, rng);
      const std::vector<uint8_t> packed = convert_rows(type, x, n_in, n_tokens, n_in);
      // Activation rows 40 bytes apart beyond their size.
      const size_t act_row = ggml_row_size(vec_dot_type(type), n_in), act_stride = act_row + 40;
      std::vector<uint8_t> act(act_stride * static_cast<size_t>(n_tokens), 0xAB);
      for (int64_t t = 0; t < n_tokens; ++t) std::memcpy(act.data() + t * act_stride, packed.data() + t * act_row, act_row);
      const int64_t y_stride = n_out + 2;
      for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 53}, {5, 6}, {3, 50}, {17, 53}, {40, 40}}) {
        std::vector<float> y(static_cast<size_t>(y_stride * n_tokens), -7.f);
        gemv_batch_rows(type, m.bytes.data(), m.stride, n_in, act.data(), act_stride, n_tokens, begin, end, y.data(),
                        y_stride);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < y_stride; ++r) {
            const std::string where = describe(type, n_in, n_out, 1, r) + " token " + std::to_string(t) + " of " +
                                      std::to_string(n_tokens) + " range " + std::to_string(begin) + ".." +
                                      std::to_string(end);
            const float got = y[t * y_stride + r];
            if (r < begin || r >= end) {
              ASSERT_EQ(got, -7.f) << "wrote outside the range, " << where;
            } else {
              ASSERT_EQ(fp32_to_bits(got), fp32_to_bits(dot(n_in, m.row(r), act.data() + t * act_stride))) << where;
            }
          }
        }
      }
    }
  }
  });
}

TEST(Gemv, BatchMaxTokens) {
  EXPECT_EQ(gemv_batch_max_tokens(GgmlType::Q8_0) >= 4, avx512_vnni_active());
  EXPECT_EQ(gemv_batch_max_tokens(GgmlType::Q6_K) >= 2, active_cpu_level() >= CpuLevel::Avx2);
  EXPECT_EQ(gemv_batch_max_tokens(GgmlType::Q4_K) >= 2, active_cpu_level() >= CpuLevel::Avx2);
  EXPECT_EQ(gemv_batch_max_tokens(GgmlType::Q5_K), 0);
}

// Every CPU level's matmul gives 1..8 tokens what that level's vec_dot gives them (the GEMVs apply
// only where they are available; elsewhere matmul keeps its GEMMs or the per-row loop).
TEST(Gemv, EveryCpuLevelMatchesItsDot) {
  std::mt19937 rng(29);
  const CpuLevel before = active_cpu_level();
  for (CpuLevel level : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512}) {
    set_cpu_level(level);
    ThreadPool pool(2);
    for (GgmlType type : kTypes) {
      const int64_t n_in = 2048, n_out = 29;
      const Matrix m = make_matrix(type, n_in, n_out, 0, rng);
      const RowGrouping grouping = type == GgmlType::Q4_K ? RowGrouping::kEachRowAlone : RowGrouping::kBatch;
      const size_t act_row = ggml_row_size(vec_dot_type(type), n_in);
      for (int64_t n_tokens : {1, 2, 5, 8}) {
        const std::vector<float> x = make_activations(n_in, n_tokens, n_in, rng);
        const std::vector<uint8_t> act = convert_rows(type, x, n_in, n_tokens, n_in);
        std::vector<float> y(static_cast<size_t>(n_out * n_tokens));
        matmul(m.view(), x.data(), n_tokens, n_in, y.data(), n_out, pool, grouping);
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t r = 0; r < n_out; ++r)
            EXPECT_EQ(fp32_to_bits(y[t * n_out + r]), fp32_to_bits(vec_dot_fn(type)(n_in, m.row(r), act.data() + t * act_row)))
                << cpu_level_name(active_cpu_level()) << " " << describe(type, n_in, n_out, 2, r) << " token " << t
                << " of " << n_tokens;
      }
    }
  }
  set_cpu_level(before);
}


// Not a check: a decode microbenchmark. Run it with
//   tests/gemv_test --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
// The matrices of one Qwen3-0.6B token in sequence (28 layers x q, k, v, o, gate, up, down, then
// the 1024 x 151936 output), far larger than the caches; per-row loop (the old decode path) vs
// matmul's GEMV, alternated, best of several passes: wall time and the calling thread's CPU time.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double wall_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Random bytes with finite scales, fast enough for ~600 MB.
Matrix fast_matrix(GgmlType type, int64_t n_in, int64_t n_out, std::mt19937_64& rng) {
  Matrix m{type, n_in, n_out, ggml_row_size(type, n_in), {}};
  m.bytes.resize(m.stride * n_out);
  for (size_t i = 0; i + 8 <= m.bytes.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(m.bytes.data() + i, &v, 8);
  }
  const auto fix = [&](size_t block_bytes, size_t offset) {
    const uint16_t h = fp32_to_fp16(0.01f);
    for (size_t at = offset; at + 2 <= m.bytes.size(); at += block_bytes) std::memcpy(m.bytes.data() + at, &h, 2);
  };
  if (type == GgmlType::Q8_0) fix(sizeof(BlockQ8_0), offsetof(BlockQ8_0, d));
  if (type == GgmlType::Q4_K) fix(sizeof(BlockQ4_K), offsetof(BlockQ4_K, d)), fix(sizeof(BlockQ4_K), offsetof(BlockQ4_K, dmin));
  if (type == GgmlType::Q6_K) fix(sizeof(BlockQ6_K), offsetof(BlockQ6_K, d));
  return m;
}

TEST(Gemv, DISABLED_ThroughputReport) {
  const char* only = std::getenv("GEMV_BENCH_TYPE");
  for (GgmlType type : kTypes) {
    if (only && std::string(only) != ggml_type_name(type)) continue;
    std::mt19937_64 rng(1);
    std::vector<Matrix> mats;
    size_t total = 0;
    const std::pair<int64_t, int64_t> layer[] = {{1024, 2048}, {1024, 1024}, {1024, 1024}, {2048, 1024},
                                                 {1024, 3072}, {1024, 3072}, {3072, 1024}};
    // q4_K's 28 layers are ~320 MB, which a 480 MB L3 might partly hold: repeat the layers until
    // the set is at least 600 MB.
    while (total < (size_t{600} << 20)) {
      for (int l = 0; l < 28; ++l) {
        for (const auto& [n_in, n_out] : layer) {
          mats.push_back(fast_matrix(type, n_in, n_out, rng));
          total += mats.back().bytes.size();
        }
      }
      if (mats.size() == 28 * 7) {
        mats.push_back(fast_matrix(type, 1024, 151936, rng));
        total += mats.back().bytes.size();
      }
    }
    std::mt19937 bench_rng(5);
    std::vector<float> x = make_activation(3072, bench_rng);
    std::vector<float> y(151936);
    const VecDotFn dot = vec_dot_fn(type);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      double best_wall[2] = {1e9, 1e9}, best_cpu[2] = {1e9, 1e9};
      for (int pass = 0; pass < 10; ++pass) {
        const int which = pass % 2;  // 0: per-row loop, 1: matmul (GEMV)
        const double w0 = wall_seconds(), c0 = thread_cpu_seconds();
        for (const Matrix& m : mats) {
          if (which == 1) {
            matmul(m.view(), x.data(), 1, m.n_in, y.data(), m.n_out, pool);
          } else {
            const std::vector<uint8_t> act = convert(type, std::vector<float>(x.begin(), x.begin() + m.n_in));
            pool.parallel_for(
                m.n_out,
                [&](int64_t b, int64_t e) {
                  for (int64_t r = b; r < e; ++r) y[r] = dot(m.n_in, m.row(r), act.data());
                },
                16);
          }
        }
        best_wall[which] = std::min(best_wall[which], wall_seconds() - w0);
        best_cpu[which] = std::min(best_cpu[which], thread_cpu_seconds() - c0);
      }
      for (int which : {0, 1})
        std::printf("%-5s %s threads %d: %7.1f ms wall (%5.1f GB/s), %7.1f ms thread CPU, %zu MB\n",
                    std::string(ggml_type_name(type)).c_str(), which == 0 ? "per-row" : "gemv   ", threads, best_wall[which] * 1e3,
                    static_cast<double>(total) / best_wall[which] * 1e-9, best_cpu[which] * 1e3, total >> 20);
    }
    // Cache-resident: one 1024 x 3072 and one 3072 x 1024 matrix over and over, 1 thread.
    ThreadPool pool(1);
    for (const Matrix* m : {&mats[4], &mats[6]}) {
      double best[2] = {1e9, 1e9};
      for (int rep = 0; rep < 100; ++rep) {
        const int which = rep % 2;
        const double c0 = thread_cpu_seconds();
        if (which == 1) {
          matmul(m->view(), x.data(), 1, m->n_in, y.data(), m->n_out, pool);
        } else {
          const std::vector<uint8_t> a = convert(type, std::vector<float>(x.begin(), x.begin() + m->n_in));
          for (int64_t r = 0; r < m->n_out; ++r) y[r] = dot(m->n_in, m->row(r), a.data());
        }
        best[which] = std::min(best[which], thread_cpu_seconds() - c0);
      }
      std::printf("%-5s %5lld x %5lld cache-resident, 1 thread CPU: per-row %.3f ms, gemv %.3f ms (%.1f vs %.1f GB/s)\n",
                  std::string(ggml_type_name(type)).c_str(), static_cast<long long>(m->n_in),
                  static_cast<long long>(m->n_out), best[0] * 1e3, best[1] * 1e3,
                  static_cast<double>(m->bytes.size()) / best[0] * 1e-9, static_cast<double>(m->bytes.size()) / best[1] * 1e-9);
    }
  }
}

// Not a check: the multi-sequence decode microbenchmark (q8_0, or GEMV_BATCH_TYPE=q6_K / q4_K). Run it with
//   tests/gemv_test --gtest_also_run_disabled_tests --gtest_filter='*BatchThroughput*'
// The same Qwen3-0.6B matrix sequence as above (~630 MB), n tokens per matmul: the batch GEMV
// (gemv_batch_rows on the pool) vs q8_0_gemm / q6_K_gemm (the prefill path, which matmul took for every
// n >= 2 before), alternated, best of several passes; GEMV_BATCH_THREADS picks the thread count
// (default 2), GEMV_BATCH_TOKENS a single token count.
TEST(Gemv, DISABLED_BatchThroughputReport) {
  const char* type_name = std::getenv("GEMV_BATCH_TYPE");
  const std::string wanted = type_name ? type_name : "q8_0";
  const GgmlType type = wanted == "q6_K" ? GgmlType::Q6_K : wanted == "q4_K" ? GgmlType::Q4_K : GgmlType::Q8_0;
  const bool have_gemm = type == GgmlType::Q8_0 ? q8_0_gemm_available()
                         : type == GgmlType::Q4_K ? q4_K_gemm_available()
                                                  : q6_K_gemm_available();
  if (!have_gemm) GTEST_SKIP() << "no " << wanted << " GEMM at the active CPU level";
  std::mt19937_64 rng(1);
  std::vector<Matrix> mats;
  size_t total = 0;
  const std::pair<int64_t, int64_t> layer[] = {{1024, 2048}, {1024, 1024}, {1024, 1024}, {2048, 1024},
                                               {1024, 3072}, {1024, 3072}, {3072, 1024}};
  for (int l = 0; l < 28; ++l) {
    for (const auto& [n_in, n_out] : layer) {
      mats.push_back(fast_matrix(type, n_in, n_out, rng));
      total += mats.back().bytes.size();
    }
  }
  mats.push_back(fast_matrix(type, 1024, 151936, rng));
  total += mats.back().bytes.size();
  const int threads = std::getenv("GEMV_BATCH_THREADS") ? std::atoi(std::getenv("GEMV_BATCH_THREADS")) : 2;
  std::vector<int64_t> token_counts = {1, 2, 3, 4, 6, 8, 12, 16};
  if (const char* only = std::getenv("GEMV_BATCH_TOKENS")) token_counts = {std::atoll(only)};
  ThreadPool pool(threads);
  std::mt19937 bench_rng(5);
  const int64_t max_tokens = 64;
  const std::vector<float> x = make_activations(3072, max_tokens, 3072, bench_rng);
  std::vector<float> y(static_cast<size_t>(151936 * max_tokens));
  std::vector<uint8_t> act;
  for (int64_t n : token_counts) {
    double best_wall[2] = {1e9, 1e9}, best_cpu[2] = {1e9, 1e9};
    for (int pass = 0; pass < 6; ++pass) {
      const int which = pass % 2;  // 0: q8_0_gemm, 1: batch GEMV (the single-token GEMV for n = 1)
      const double w0 = wall_seconds(), c0 = thread_cpu_seconds();
      for (const Matrix& m : mats) {
        // As matmul does: the activations converted first (part of both timings).
        act = convert_rows(type, x, m.n_in, n, 3072);
        const size_t act_stride = ggml_row_size(vec_dot_type(type), m.n_in);
        if (which == 0) {
          if (type == GgmlType::Q8_0) {
            q8_0_gemm(m.bytes.data(), m.stride, m.n_out, m.n_in, act.data(), act_stride, n, y.data(), m.n_out, pool);
          } else if (type == GgmlType::Q4_K) {  // vec_dot numerics for every token, as the batch GEMV
            q4_K_gemm(m.bytes.data(), m.stride, m.n_out, m.n_in, act.data(), act_stride, n, 0, y.data(), m.n_out, pool);
          } else {
            q6_K_gemm(m.bytes.data(), m.stride, m.n_out, m.n_in, act.data(), act_stride, n, y.data(), m.n_out, pool);
          }
        } else if (n == 1) {
          pool.parallel_for(
              m.n_out, [&](int64_t b, int64_t e) { gemv_rows(type, m.bytes.data(), m.stride, m.n_in, act.data(), b, e, y.data()); },
              gemv_row_grain(type));
        } else {
          pool.parallel_for(
              m.n_out,
              [&](int64_t b, int64_t e) {
                gemv_batch_rows(type, m.bytes.data(), m.stride, m.n_in, act.data(), act_stride, n, b, e, y.data(), m.n_out);
              },
              gemv_row_grain(type));
        }
      }
      best_wall[which] = std::min(best_wall[which], wall_seconds() - w0);
      best_cpu[which] = std::min(best_cpu[which], thread_cpu_seconds() - c0);
    }
    for (int which : {0, 1})
      std::printf("%s %2lld tokens %s threads %d: %7.1f ms wall (%5.1f GB/s, %6.1f tok/s), %7.1f ms thread CPU, %zu MB\n",
                  std::string(ggml_type_name(type)).c_str(), static_cast<long long>(n), which == 0 ? "gemm" : "gemv", threads, best_wall[which] * 1e3,
                  static_cast<double>(total) / best_wall[which] * 1e-9, static_cast<double>(n) / best_wall[which],
                  best_cpu[which] * 1e3, total >> 20);
  }
}

}  // namespace
}  // namespace agentkv
