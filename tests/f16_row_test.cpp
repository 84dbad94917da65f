// fp32_to_fp16_row must give fp32_to_fp16's bits (which match F16C's _cvtss_sh, ggml's conversion
// on x86) for every value, at every CPU level: rounding ties, subnormals, overflow, NaN.
#include "kernels/f16_row.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "agentkv/fp16.h"
#include "kernels/dispatch.h"

namespace agentkv {
namespace {

std::vector<float> interesting_values() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e10f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(), 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 6.09e-5f};
  // Exact ties between two halves (11 significant bits + a trailing 1), normal and subnormal.
  for (uint32_t m = 0; m < 64; ++m) {
    v.push_back(fp32_from_bits(0x3F800000u | (m << 13) | 0x1000u));
    v.push_back(fp32_from_bits(0x33800000u | (m << 13) | 0x1000u));  // 2^-24 range: subnormal halves
    v.push_back(fp32_from_bits(0x387FC000u + m * 0x800u));            // around the normal/subnormal edge
  }
  uint32_t nan_bits = 0x7FC12345u;
  float payload_nan;
  std::memcpy(&payload_nan, &nan_bits, 4);
  v.push_back(payload_nan);
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  while (v.size() < 20000) v.push_back(fp32_from_bits(bits(rng)));  // every exponent and sign
  return v;
}

class F16Row : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(detected_cpu_level())) GTEST_SKIP() << "CPU lacks the level";
    set_cpu_level(GetParam());
  }
  void TearDown() override { set_cpu_level(detected_cpu_level()); }
};

TEST_P(F16Row, BitsEqualTheScalarConversionForEveryKindOfValue) {
  const std::vector<float> values = interesting_values();
  // Odd lengths and offsets reach the vector bodies and the scalar tails.
  for (size_t offset : {size_t{0}, size_t{3}}) {
    for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, values.size() - offset}) {
      std::vector<uint16_t> got(n, 0xBEEF);
      fp32_to_fp16_row(values.data() + offset, got.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], fp32_to_fp16(values[offset + i]))
            << "value bits 0x" << std::hex << fp32_to_bits(values[offset + i]) << " at " << std::dec << i
            << ", level " << cpu_level_name(GetParam());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, F16Row, ::testing::Values(CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512),
                         [](const auto& info) { return std::string(cpu_level_name(info.param)); });

}  // namespace
}  // namespace agentkv
