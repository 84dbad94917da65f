// Integer K.Q scores over int8-level keys (kernels/level_scores.h): every CPU level's kernel gives
// exactly the bits of the order written out below, for any row count (vector tails), key block
// size and extreme levels; and the portable unpacking gives the levels dequantize_row scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/level_scores.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "quant_gemm_test_util.h"

namespace agentkv {
namespace {

// The order, plainly: per q8_0 block an exact integer sum, fma-chained in block order, then scaled.
float expected_score(const BlockQ8_0* q, const int8_t* key, const float* key_scales, int64_t k_block, int64_t D,
                     float scale) {
  float s = 0.0f;
  for (int64_t b = 0; b < D / kQK8_0; ++b) {
    int32_t isum = 0;
    for (int64_t i = 0; i < kQK8_0; ++i) isum += int32_t{q[b].qs[i]} * int32_t{key[b * kQK8_0 + i]};
    s = std::fma(static_cast<float>(isum), fp16_to_fp32(q[b].d) * key_scales[b * kQK8_0 / k_block], s);
  }
  return s * scale;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(LevelScores, EveryLevelGivesTheOrdersBits) {
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_int_distribution<int> level(-128, 127);
  for (int64_t D : {int64_t{64}, int64_t{128}, int64_t{256}}) {
    for (int64_t k_block : {int64_t{32}, int64_t{64}}) {
      for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{40}, int64_t{128}}) {
        for (int64_t n_keys : {int64_t{8}, int64_t{64}}) {
          const int64_t nb = D / kQK8_0;
          std::vector<float> x(static_cast<size_t>(D));
          std::vector<BlockQ8_0> q(static_cast<size_t>(rows * nb));
          for (int64_t r = 0; r < rows; ++r) {
            for (auto& v : x) v = gauss(rng) * (r % 3 == 0 ? 100.0f : 0.01f);
            quantize_row(GgmlType::Q8_0, x.data(), reinterpret_cast<uint8_t*>(q.data() + r * nb), D);
          }
          std::vector<int8_t> keys(static_cast<size_t>(n_keys * D));
          for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int8_t>(i % 97 == 0 ? -128 : i % 89 == 0 ? 127 : level(rng));
          std::vector<float> key_scales(static_cast<size_t>(n_keys * (D / k_block)));
          for (auto& d : key_scales) d = std::fabs(gauss(rng)) * 0.02f;
          const float scale = 1.0f / std::sqrt(static_cast<float>(D));
          for (CpuLevel cpu : test::machine_cpu_levels()) {
            test::ScopedCpuLevel at(cpu);
            const std::string what = std::string(cpu_level_name(cpu)) + " D=" + std::to_string(D) +
                                     " k_block=" + std::to_string(k_block) + " rows=" + std::to_string(rows) +
                                     " keys=" + std::to_string(n_keys);
            LevelQueries lq;
            pack_level_queries(q.data(), rows, D, &lq);
            std::vector<uint8_t> handed(keys.size());
            for (size_t i = 0; i < keys.size(); ++i) handed[i] = static_cast<uint8_t>(keys[i]) ^ level_key_flip(lq);
            std::vector<float> out(static_cast<size_t>(n_keys * rows), NAN);
            level_scores(lq, handed.data(), key_scales.data(), k_block, n_keys, scale, out.data());
            for (int64_t j = 0; j < n_keys; ++j) {
              for (int64_t r = 0; r < rows; ++r) {
                const float want = expected_score(q.data() + r * nb, keys.data() + j * D,
                                                  key_scales.data() + j * (D / k_block), k_block, D, scale);
                ASSERT_TRUE(same_bits(out[static_cast<size_t>(j * rows + r)], want))
                    << what << " key " << j << " row " << r << ": " << out[static_cast<size_t>(j * rows + r)]
                    << " vs " << want;
              }
            }
          }
        }
      }
    }
  }
}

TEST(LevelScores, RefusesPartialKeyGroupsAndOddBlocks) {
  std::vector<BlockQ8_0> q(4);
  LevelQueries lq;
  pack_level_queries(q.data(), 1, 128, &lq);
  std::vector<uint8_t> keys(16 * 128);
  std::vector<float> scales(16 * 4), out(16);
  EXPECT_THROW(level_scores(lq, keys.data(), scales.data(), 64, 7, 1.0f, out.data()), Error);
  EXPECT_THROW(level_scores(lq, keys.data(), scales.data(), 128, 8, 1.0f, out.data()), Error);
  EXPECT_THROW(pack_level_queries(q.data(), 1, 48, &lq), Error);
}

// d * level is what dequantize_row gives, element for element.
TEST(LevelScores, UnpackedLevelsScaleToTheDequantizedRow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const int64_t n = 256;
  std::vector<float> x(n), deq(n);
  for (GgmlType type : {GgmlType::TQ4, GgmlType::TQ3, GgmlType::Q8_0}) {
    for (auto& v : x) v = gauss(rng);
    std::vector<uint8_t> row(ggml_row_size(type, n));
    quantize_row(type, x.data(), row.data(), n);
    dequantize_row(type, row.data(), deq.data(), n);
    const int64_t block = type == GgmlType::Q8_0 ? kQK8_0 : kQKTQ;
    std::vector<int8_t> levels(n);
    std::vector<float> scales(n / block);
    unpack_levels(type, row.data(), levels.data(), scales.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same_bits(scales[i / block] * static_cast<float>(levels[i]), deq[i]))
          << ggml_type_name(type) << " element " << i;
    }
  }
}

}  // namespace
}  // namespace agentkv
