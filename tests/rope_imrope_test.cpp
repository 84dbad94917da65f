// Qwen3.5's interleaved multi-axis rope (kernels/ops.h rope_cache_imrope): text positions give
// plain rope's bits; image positions give each pair the angle of the axis ggml's IMROPE assigns.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace agentkv {
namespace {

std::vector<float> plain(float pos, int64_t n_rot) {
  std::vector<float> cs(static_cast<size_t>(n_rot));
  rope_cache(pos, n_rot, 1e7f, 1.0f, nullptr, RopeYarn{}, cs.data());
  return cs;
}

TEST(RopeImrope, TextPositionsArePlainRope) {
  const int32_t sections[4] = {3, 3, 2, 0};
  for (int32_t p : {0, 1, 7, 1000, 262143}) {
    const int32_t thw[3] = {p, p, p};
    std::vector<float> cs(16);
    rope_cache_imrope(thw, 16, sections, 1e7f, 1.0f, nullptr, RopeYarn{}, cs.data());
    EXPECT_EQ(cs, plain(static_cast<float>(p), 16)) << p;
  }
}

TEST(RopeImrope, PairsTakeTheirAxisInterleaved) {
  // Sections [3, 3, 2, 0] over 8 pairs: t h w t h w t h (ggml's IMROPE); [11, 11, 10, 0] over 32
  // pairs: t at multiples of 3, h at 3k + 1, w at 3k + 2.
  struct Case { int32_t sections[4]; int64_t n_rot; };
  for (const Case& c : {Case{{3, 3, 2, 0}, 16}, Case{{11, 11, 10, 0}, 64}}) {
    const int32_t thw[3] = {5, 9, 13};
    std::vector<float> cs(static_cast<size_t>(c.n_rot));
    rope_cache_imrope(thw, c.n_rot, c.sections, 1e7f, 1.0f, nullptr, RopeYarn{}, cs.data());
    const std::vector<float> axis[3] = {plain(5, c.n_rot), plain(9, c.n_rot), plain(13, c.n_rot)};
    for (int64_t k = 0; k < c.n_rot / 2; ++k) {
      const int a = static_cast<int>(k % 3);
      EXPECT_EQ(cs[2 * k], axis[a][2 * k]) << "pair " << k;
      EXPECT_EQ(cs[2 * k + 1], axis[a][2 * k + 1]) << "pair " << k;
    }
  }
}

}  // namespace
}  // namespace agentkv
