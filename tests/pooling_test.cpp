// Embedding pooling and llama.cpp's normalizations (agentkv/pooling.h).
#include "agentkv/pooling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace agentkv {
namespace {

TEST(EmbeddingPool, EachPoolingTakesItsRows) {
  const float rows[3][2] = {{1, 2}, {3, 4}, {5, 9}};
  auto pool_of = [&](Pooling p) {
    EmbeddingPool pool(p, 2, 3);
    for (size_t i = 0; i < 3; ++i)
      if (pool.wants(i)) pool.add(rows[i]);
    return pool.result();
  };
  EXPECT_EQ(pool_of(Pooling::Mean), (std::vector<std::vector<float>>{{3, 5}}));
  EXPECT_EQ(pool_of(Pooling::Cls), (std::vector<std::vector<float>>{{1, 2}}));
  EXPECT_EQ(pool_of(Pooling::Last), (std::vector<std::vector<float>>{{5, 9}}));
  EXPECT_EQ(pool_of(Pooling::None), (std::vector<std::vector<float>>{{1, 2}, {3, 4}, {5, 9}}));
  EmbeddingPool partial(Pooling::Mean, 2, 3);
  partial.add(rows[0]);
  EXPECT_THROW(partial.result(), std::logic_error);  // rows missing
}

TEST(EmbeddingPool, NamesAndGgufValues) {
  for (Pooling p : {Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last}) EXPECT_EQ(parse_pooling(pooling_name(p)), p);
  EXPECT_FALSE(parse_pooling("rank").has_value());
  EXPECT_EQ(pooling_from_gguf(1), Pooling::Mean);
  EXPECT_EQ(pooling_from_gguf(3), Pooling::Last);
  EXPECT_FALSE(pooling_from_gguf(4).has_value());  // rank: a classifier head
}

TEST(NormalizeEmbedding, LlamaCppsNorms) {
  auto norm = [](int kind) {
    std::vector<float> v{3, -4};
    normalize_embedding(v, kind);
    return v;
  };
  EXPECT_EQ(norm(-1), (std::vector<float>{3, -4}));
  EXPECT_NEAR(norm(2)[0], 0.6f, 1e-7);
  EXPECT_NEAR(norm(2)[1], -0.8f, 1e-7);
  EXPECT_NEAR(norm(1)[0], 3.0f / 7, 1e-7);
  EXPECT_NEAR(norm(0)[1], -32760.0f, 1e-2);  // max-abs scaled to the int16 range
  const auto p3 = norm(3);
  EXPECT_NEAR(std::cbrt(std::pow(std::fabs(p3[0]), 3) + std::pow(std::fabs(p3[1]), 3)), 1.0,
              1e-6);
  std::vector<float> zero{0, 0};
  normalize_embedding(zero, 2);
  EXPECT_EQ(zero, (std::vector<float>{0, 0}));  // no division by zero
}

}  // namespace
}  // namespace agentkv
