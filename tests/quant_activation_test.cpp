// The SIMD activation quantizers (q8_0 / q8_1 in ggml-cpu's x86 rounding, q8_K) against the
// scalar reference: identical bytes on every CPU level the machine has, for rows of many
// magnitudes and for the corner cases of the reference (rounding ties, the first of two equal
// magnitudes deciding q8_K's sign, zero and -0 blocks, subnormals, scales that overflow).
// The scalar reference itself is held to llama.cpp by quant_test and the fidelity tests.
#include <gtest/gtest.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/quant_activation.h"
#include "kernels/quant_kernels.h"

namespace agentkv {
namespace {

using quant_detail::quantize_q8_0_activation;
using quant_detail::quantize_q8_1_activation;
using quant_detail::quantize_q8_K;

// ---- the three quantizers behind one interface ----------------------------------------------

enum class Act { Q8_0, Q8_1, Q8_K };

int block_elems(Act act) { return act == Act::Q8_K ? kQK_K : 32; }
size_t block_bytes(Act act) {
  switch (act) {
    case Act::Q8_0: return sizeof(BlockQ8_0);
    case Act::Q8_1: return sizeof(BlockQ8_1);
    case Act::Q8_K: return sizeof(BlockQ8_K);
  }
  return 0;
}
const char* act_name(Act act) { return act == Act::Q8_0 ? "q8_0" : act == Act::Q8_1 ? "q8_1" : "q8_K"; }

void quantize(Act act, const float* x, void* y, int64_t n) {
  switch (act) {
    case Act::Q8_0: return quantize_q8_0_activation(x, static_cast<BlockQ8_0*>(y), n);
    case Act::Q8_1: return quantize_q8_1_activation(x, static_cast<BlockQ8_1*>(y), n);
    case Act::Q8_K: return quantize_q8_K(x, static_cast<BlockQ8_K*>(y), n);
  }
}

// Quantizes at `level`, restoring the level the process had.
std::vector<uint8_t> quantize_at(CpuLevel level, Act act, const std::vector<float>& x) {
  const CpuLevel before = active_cpu_level();
  EXPECT_EQ(set_cpu_level(level), level);
  const size_t blocks = x.size() / static_cast<size_t>(block_elems(act));
  std::vector<uint8_t> out(blocks * block_bytes(act), 0xAB);  // 0xAB: bytes nobody wrote show up
  quantize(act, x.data(), out.data(), static_cast<int64_t>(x.size()));
  set_cpu_level(before);
  return out;
}

// ---- rows -----------------------------------------------------------------------------------

struct Row {
  std::string what;
  std::vector<float> x;
};

// Gaussian values, each block of `block` elements with its own scale drawn from `scales`.
std::vector<float> gaussian_row(std::mt19937& rng, int n, int block, const std::vector<float>& scales) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<size_t> pick(0, scales.size() - 1);
  std::vector<float> x(static_cast<size_t>(n));
  for (int b = 0; b < n; b += block) {
    const float scale = scales[pick(rng)];
    for (int j = b; j < b + block; ++j) x[static_cast<size_t>(j)] = normal(rng) * scale;
  }
  return x;
}

// Blocks whose quantization multiplies by exactly 1 (q8_0: amax 127; q8_K: max -127) or 1/2
// (amax 254), filled with halves / odd integers: every element is a rounding tie.
std::vector<float> tie_row(std::mt19937& rng, int n, int block, float max_value, float step) {
  std::uniform_int_distribution<int> level(-126, 126);
  std::vector<float> x(static_cast<size_t>(n));
  for (int b = 0; b < n; b += block) {
    for (int j = b; j < b + block; ++j) x[static_cast<size_t>(j)] = (static_cast<float>(level(rng)) + 0.5f) * step;
    x[static_cast<size_t>(b + static_cast<int>(rng() % static_cast<unsigned>(block)))] = max_value;
  }
  return x;
}

// The block maximum magnitude appears twice with opposite signs (q8_K keeps the first one's
// sign): apart by a random distance or by one that puts both in the same SIMD lane (multiples of
// 8, 16, 64), where a kernel could keep the later one.
std::vector<float> duplicated_max_row(std::mt19937& rng, int n, int block) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const unsigned distances[] = {0, 1, 8, 16, 32, 64, 128, 192};  // 0: random
  std::vector<float> x(static_cast<size_t>(n));
  for (int b = 0; b < n; b += block) {
    const float m = 1.f + static_cast<float>(rng() % 1000) / 7.f;
    for (int j = b; j < b + block; ++j) x[static_cast<size_t>(j)] = uniform(rng) * m;
    const unsigned offset = rng() % static_cast<unsigned>(block);
    const unsigned distance = distances[rng() % std::size(distances)];
    const unsigned second_offset = distance == 0 ? rng() : offset + distance;
    const int first = b + static_cast<int>(offset);
    const int second = b + static_cast<int>(second_offset % static_cast<unsigned>(block));
    const float sign = (rng() & 1) ? 1.f : -1.f;
    x[static_cast<size_t>(first)] = sign * m;
    if (second != first) x[static_cast<size_t>(second)] = -sign * m;
  }
  return x;
}

std::vector<Row> test_rows(int block) {
  std::mt19937 rng(20261130);
  const int n = 12 * kQK_K;  // 96 q8_0 blocks, 12 q8_K blocks
  const float denorm_min = std::numeric_limits<float>::denorm_min();
  const float flt_min = std::numeric_limits<float>::min();
  const float flt_max = std::numeric_limits<float>::max();
  std::vector<Row> rows;
  for (float scale : {1e-3f, 0.05f, 1.f, 3.f, 100.f, 1e4f, 1e7f}) {
    rows.push_back({"gaussian scale " + std::to_string(scale), gaussian_row(rng, n, block, {scale})});
  }
  rows.push_back({"gaussian, scale per block 1e-30..1e30",
                  gaussian_row(rng, n, block, {1e-30f, 1e-20f, 1e-9f, 1e-5f, 0.3f, 17.f, 1e5f, 1e12f, 1e30f})});
  // 127 / amax (or -127 / max) overflows to infinity below ~3.7e-37: the reference's casts of
  // inf / NaN then keep only the low byte of cvttss2si's 0x80000000, and the SIMD code must agree.
  rows.push_back({"subnormal and tiny blocks",
                  gaussian_row(rng, n, block, {denorm_min, 30 * denorm_min, 1e-40f, flt_min, 1e-37f, 4e-37f})});
  rows.push_back({"huge blocks", gaussian_row(rng, n, block, {1e36f, flt_max / 8})});
  rows.push_back({"ties, scale 1", tie_row(rng, n, block, 127.f, 1.f)});
  rows.push_back({"ties, q8_K scale 1", tie_row(rng, n, block, -127.f, 1.f)});
  rows.push_back({"ties, scale 1/2", tie_row(rng, n, block, 254.f, 2.f)});
  rows.push_back({"ties, scale 1/2, negative max", tie_row(rng, n, block, -254.f, 2.f)});
  for (int r = 0; r < 4; ++r) rows.push_back({"duplicated max magnitude", duplicated_max_row(rng, n, block)});
  {
    // Zero blocks, -0 blocks, one nonzero element, max in the first / last element.
    std::vector<float> x = gaussian_row(rng, n, block, {1.f});
    const int blocks = n / block;
    for (int b = 0; b < blocks; ++b) {
      float* blk = x.data() + static_cast<size_t>(b) * static_cast<size_t>(block);
      switch (b % 6) {
        case 0: std::fill(blk, blk + block, 0.f); break;
        case 1: std::fill(blk, blk + block, -0.f); break;
        case 2:
          std::fill(blk, blk + block, (b & 1) ? -0.f : 0.f);
          blk[rng() % static_cast<unsigned>(block)] = (b & 8) ? -2.5f : 2.5f;
          break;
        case 3: blk[0] = -1e3f; break;
        case 4: blk[block - 1] = 1e3f; break;
        default: break;
      }
    }
    rows.push_back({"zero, -0 and single-element blocks", x});
  }
  {
    // Values around the quantization grid's edges: x * id close to +-127.5 and +-0.5.
    std::vector<float> x(static_cast<size_t>(n));
    std::uniform_int_distribution<int> ulps(-3, 3);
    for (size_t j = 0; j < x.size(); ++j) {
      const float base = (j % 3 == 0) ? 127.f : (j % 3 == 1) ? 0.5f : -63.5f;
      float v = base;
      for (int u = ulps(rng); u != 0; u += u > 0 ? -1 : 1) v = std::nextafter(v, u > 0 ? 1e9f : -1e9f);
      x[j] = (j % 2) ? -v : v;
    }
    rows.push_back({"near the grid edges", x});
  }
  return rows;
}

// ---- tests ----------------------------------------------------------------------------------

class ActivationQuant : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    if (GetParam() > detected_cpu_level()) GTEST_SKIP() << "CPU lacks this level";
  }
};

void expect_same_bytes_as_scalar(CpuLevel level, Act act) {
  std::vector<Row> rows = test_rows(block_elems(act));
  for (size_t r = 0, count = rows.size(); r < count; ++r) {  // the rows less one block: odd block counts
    rows.push_back({rows[r].what + ", one block shorter", rows[r].x});
    rows.back().x.resize(rows[r].x.size() - static_cast<size_t>(block_elems(act)));
  }
  for (const Row& row : rows) {
    const std::vector<uint8_t> want = quantize_at(CpuLevel::Scalar, act, row.x);
    const std::vector<uint8_t> got = quantize_at(level, act, row.x);
    ASSERT_EQ(got.size(), want.size());
    for (size_t off = 0; off < want.size(); off += block_bytes(act)) {
      if (std::memcmp(got.data() + off, want.data() + off, block_bytes(act)) != 0) {
        const size_t block = off / block_bytes(act);
        size_t byte = 0;
        while (got[off + byte] == want[off + byte]) ++byte;
        ADD_FAILURE() << act_name(act) << ", row \"" << row.what << "\": block " << block << " differs first at byte "
                      << byte << " (got " << int(got[off + byte]) << ", want " << int(want[off + byte]) << ")";
        break;
      }
    }
  }
}

TEST_P(ActivationQuant, Q8_0SameBytesAsScalar) { expect_same_bytes_as_scalar(GetParam(), Act::Q8_0); }
TEST_P(ActivationQuant, Q8_1SameBytesAsScalar) { expect_same_bytes_as_scalar(GetParam(), Act::Q8_1); }
TEST_P(ActivationQuant, Q8_KSameBytesAsScalar) { expect_same_bytes_as_scalar(GetParam(), Act::Q8_K); }

TEST_P(ActivationQuant, SimdKernelsExistOnX86) {
#if defined(__x86_64__) || defined(__i386__)
  const quant_detail::ActivationQuantizers q = quant_detail::simd_activation_quantizers(GetParam());
  const bool want = GetParam() != CpuLevel::Scalar;
  EXPECT_EQ(q.q8_0 != nullptr, want);
  EXPECT_EQ(q.q8_1 != nullptr, want);
  EXPECT_EQ(q.q8_K != nullptr, want);
#else
  GTEST_SKIP() << "no SIMD activation quantizers off x86";
#endif
}

// Worked by hand: amax 127 makes the factor exactly 1, so halves round to even (ggml-cpu's
// cvtps2dq), unlike quantize_row's round-half-away; q8_1's s is d times the quant sum.
TEST_P(ActivationQuant, Q8RoundsHalvesToEven) {
  std::vector<float> x(64, 0.f);
  const float halves[] = {127.f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -0.f};
  const int8_t expected[] = {127, 0, 2, 2, 0, -2, -2, 126, 0};
  std::copy(std::begin(halves), std::end(halves), x.begin());
  x[32] = -254.f;  // second block: factor 1/2, odd integers are ties
  x[33] = 3.f;
  x[34] = -5.f;
  const CpuLevel before = active_cpu_level();
  ASSERT_EQ(set_cpu_level(GetParam()), GetParam());
  BlockQ8_0 q0[2];
  BlockQ8_1 q1[2];
  quantize_q8_0_activation(x.data(), q0, 64);
  quantize_q8_1_activation(x.data(), q1, 64);
  set_cpu_level(before);
  for (size_t j = 0; j < std::size(expected); ++j) {
    EXPECT_EQ(q0[0].qs[j], expected[j]) << "element " << j;
    EXPECT_EQ(q1[0].qs[j], expected[j]) << "element " << j;
  }
  EXPECT_EQ(fp16_to_fp32(q0[0].d), fp16_to_fp32(fp32_to_fp16(1.f)));
  EXPECT_EQ(fp16_to_fp32(q1[0].s), fp16_to_fp32(fp32_to_fp16(127.f + 126.f)));  // 127+0+2+2+0-2-2+126
  EXPECT_EQ(q0[1].qs[0], -127);
  EXPECT_EQ(q0[1].qs[1], 2);   // 1.5 -> 2
  EXPECT_EQ(q0[1].qs[2], -2);  // -2.5 -> -2
}

// q8_K: the first element of the largest magnitude sets the sign of the scale (d = -max / 127),
// so the quants of +-max are -127 / +127; bsums are the sums of 16 quants.
TEST_P(ActivationQuant, Q8_KFirstMaxDecidesSign) {
  std::vector<float> x(kQK_K, 0.f);
  x[5] = 2.f;
  x[40] = -4.f;  // first of the two largest magnitudes
  x[200] = 4.f;
  x[201] = 1.f;
  const CpuLevel before = active_cpu_level();
  ASSERT_EQ(set_cpu_level(GetParam()), GetParam());
  BlockQ8_K q;
  quantize_q8_K(x.data(), &q, kQK_K);
  set_cpu_level(before);
  EXPECT_EQ(q.d, 1.f / (-127.f / -4.f));
  EXPECT_EQ(q.qs[40], -127);
  EXPECT_EQ(q.qs[200], 127);
  EXPECT_EQ(q.qs[5], 64);  // 63.5 rounds to even
  EXPECT_EQ(q.qs[201], 32);  // 31.75
  EXPECT_EQ(q.bsums[0], 64);
  EXPECT_EQ(q.bsums[2], -127);
  EXPECT_EQ(q.bsums[12], 127 + 32);
  EXPECT_EQ(q.bsums[1], 0);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("f16c"))) uint16_t f16c_fp16(float f) { return _cvtss_sh(f, 0); }

// The SIMD quantizers store their scales through F16C (vcvtps2ph, round to nearest even), the
// reference through fp32_to_fp16: the two must agree on every non-NaN float. Checked on every
// float whose exponent is in the rounding-critical ranges (fp16 subnormals and the underflow to
// zero below them, the overflow to infinity) and on a stride through all other bit patterns.
TEST(ActivationQuantFp16, F16cRoundsLikeFp32ToFp16) {
  if (detected_cpu_level() < CpuLevel::Avx2) GTEST_SKIP() << "no F16C";
  auto check = [](uint32_t bits) {
    const float f = fp32_from_bits(bits);
    if (std::isnan(f)) return true;
    return f16c_fp16(f) == fp32_to_fp16(f);
  };
  int64_t mismatches = 0, checked = 0;
  for (uint32_t exponent : {101u, 102u, 103u, 104u, 105u, 110u, 111u, 112u, 113u, 141u, 142u, 143u}) {
    for (uint32_t mantissa = 0; mantissa < (1u << 23); ++mantissa, ++checked) {
      mismatches += !check((exponent << 23) | mantissa);
    }
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 2053, ++checked) {
    mismatches += !check(static_cast<uint32_t>(bits));
  }
  EXPECT_EQ(mismatches, 0) << "of " << checked;
}
#endif

std::string level_name(const ::testing::TestParamInfo<CpuLevel>& info) {
  return std::string(cpu_level_name(info.param));
}
INSTANTIATE_TEST_SUITE_P(CpuLevels, ActivationQuant,
                         ::testing::Values(CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512), level_name);

// ---- throughput (run with --gtest_also_run_disabled_tests) ----------------------------------

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

TEST(ActivationQuantThroughput, DISABLED_NsPerRow) {
  constexpr int kTokens = 512;
  const CpuLevel before = active_cpu_level();
  for (int n : {1024, 3072}) {
    std::mt19937 rng(7);
    std::vector<float> x = gaussian_row(rng, n * kTokens, 32, {0.1f, 1.f, 10.f});
    std::vector<uint8_t> out(static_cast<size_t>(n) * kTokens * 2);
    for (CpuLevel level : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512}) {
      if (level > detected_cpu_level()) continue;
      set_cpu_level(level);
      for (Act act : {Act::Q8_0, Act::Q8_1, Act::Q8_K}) {
        double best = 1e300;
        for (int rep = 0; rep < 5; ++rep) {
          const double t0 = thread_cpu_ns();
          for (int t = 0; t < kTokens; ++t) {
            const size_t out_row = static_cast<size_t>(n / block_elems(act)) * block_bytes(act);
            quantize(act, x.data() + static_cast<size_t>(t) * n, out.data() + t * out_row, n);
          }
          best = std::min(best, (thread_cpu_ns() - t0) / kTokens);
        }
        std::printf("n=%-5d %-7s %-5s %8.0f ns/row\n", n, std::string(cpu_level_name(level)).c_str(), act_name(act),
                    best);
      }
    }
  }
  set_cpu_level(before);
}

}  // namespace
}  // namespace agentkv
