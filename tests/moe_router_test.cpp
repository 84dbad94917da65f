// MoE routing (softmax gating, top-k, renormalised weights as llama.cpp's build_moe_ffn with
// norm_w) and the batch grouping of tokens by expert.
#include "kernels/moe_router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "agentkv/error.h"

namespace agentkv {
namespace {

std::vector<double> softmax_ref(const std::vector<float>& logits) {
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, double(x));
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(double(logits[i]) - mx);
  for (double& x : p) x /= sum;
  return p;
}

MoeRouteParams params(int n_expert, int n_used, bool normalize = true, float scale = 0.0f) {
  MoeRouteParams p;
  p.n_expert = n_expert;
  p.n_used = n_used;
  p.normalize = normalize;
  p.weight_scale = scale;
  return p;
}

TEST(MoeRoute, PicksLargestInDescendingOrderAndRenormalises) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f};
  const std::vector<double> p = softmax_ref(logits);
  int32_t ids[3];
  float w[3];
  moe_route_token(logits.data(), params(5, 3), ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 0);
  const double sel = p[1] + p[3] + p[0];
  EXPECT_NEAR(w[0], p[1] / sel, 1e-6);
  EXPECT_NEAR(w[1], p[3] / sel, 1e-6);
  EXPECT_NEAR(w[2], p[0] / sel, 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
}

TEST(MoeRoute, WithoutNormalisationWeightsAreTheProbabilities) {
  const std::vector<float> logits = {3.0f, -2.0f, 0.25f, 1.0f};
  const std::vector<double> p = softmax_ref(logits);
  int32_t ids[2];
  float w[2];
  moe_route_token(logits.data(), params(4, 2, false), ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0], p[0], 1e-6);
  EXPECT_NEAR(w[1], p[3], 1e-6);
}

TEST(MoeRoute, TiesGoToTheLowerExpertId) {
  // ggml sorts with an unstable std::sort, so its order among equal probabilities is
  // unspecified; ours is fixed (lower id first), and the tied weights are equal either way.
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
  int32_t ids[2];
  float w[2];
  moe_route_token(logits.data(), params(5, 2), ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
}

TEST(MoeRoute, WeightSumIsClampedAtTheSmallestF16Normal) {
  // 20000 equal experts: the one selected has p = 5e-5 < 6.103515625e-5, so it is divided by
  // the clamp, not by itself.
  const std::vector<float> logits(20000, 0.25f);
  int32_t id;
  float w;
  moe_route_token(logits.data(), params(20000, 1), &id, &w);
  EXPECT_EQ(id, 0);
  EXPECT_NEAR(w, (1.0 / 20000) / 6.103515625e-5, 1e-4);
}

TEST(MoeRoute, WeightScaleAppliesAfterNormalisation) {
  const std::vector<float> logits = {0.0f, 1.0f};
  int32_t ids[2];
  float w[2], w_scaled[2];
  moe_route_token(logits.data(), params(2, 2), ids, w);
  moe_route_token(logits.data(), params(2, 2, true, 2.5f), ids, w_scaled);
  EXPECT_FLOAT_EQ(w_scaled[0], 2.5f * w[0]);
  EXPECT_FLOAT_EQ(w_scaled[1], 2.5f * w[1]);
  moe_route_token(logits.data(), params(2, 2, true, 1.0f), ids, w_scaled);  // 1: no scaling
  EXPECT_EQ(w_scaled[0], w[0]);
}

TEST(MoeRoute, NanLogitsDoNotBreakSelection) {
  const std::vector<float> logits = {NAN, 1.0f, NAN, 0.0f};
  int32_t ids[3];
  float w[3];
  moe_route_token(logits.data(), params(4, 3), ids, w);
  std::set<int32_t> distinct(ids, ids + 3);
  EXPECT_EQ(distinct.size(), 3u);
  for (int32_t e : ids) EXPECT_TRUE(e >= 0 && e < 4);
}

TEST(MoeRoute, BatchRowsWithStride) {
  // 3 tokens, 4 experts, rows padded to 6 floats.
  const std::vector<float> logits = {4, 1, 2, 3, 99, 99,  //
                                     0, 0, 5, 1, 99, 99,  //
                                     1, 7, 1, 8, 99, 99};
  const MoeRouting r = moe_route(logits.data(), 6, 3, params(4, 2));
  ASSERT_EQ(r.expert_ids.size(), 6u);
  const std::vector<int32_t> expect = {0, 3, 2, 3, 3, 1};
  EXPECT_EQ(r.expert_ids, expect);
  for (int t = 0; t < 3; ++t) EXPECT_NEAR(r.weights[t * 2] + r.weights[t * 2 + 1], 1.0, 1e-6);
  int32_t ids[2];
  float w[2];
  moe_route_token(logits.data() + 12, params(4, 2), ids, w);
  EXPECT_EQ(w[0], r.weights[4]);  // same computation per row
}

TEST(MoeRoute, RefusesBadParameters) {
  const float logits[4] = {};
  int32_t ids[4];
  float w[4];
  EXPECT_THROW(moe_route_token(logits, params(4, 0), ids, w), Error);
  EXPECT_THROW(moe_route_token(logits, params(4, 5), ids, w), Error);
  EXPECT_THROW(moe_route_token(logits, params(0, 1), ids, w), Error);
  EXPECT_THROW(moe_route(logits, 2, 1, params(4, 2)), Error);  // stride < n_expert
}

TEST(ExpertGroups, GroupsTokensByExpertInTokenOrder) {
  MoeRouting r;
  r.n_expert = 5;
  r.n_used = 2;
  r.n_tokens = 4;
  r.expert_ids = {3, 0,   // token 0
                  0, 3,   // token 1
                  4, 3,   // token 2
                  0, 1};  // token 3
  r.weights.assign(8, 0.5f);
  const ExpertGroups g = group_tokens_by_expert(r);
  const std::vector<int32_t> begin = {0, 3, 4, 4, 7, 8};
  EXPECT_EQ(g.begin, begin);
  const std::vector<int32_t> token = {0, 1, 3, 3, 0, 1, 2, 2};
  const std::vector<int32_t> slot = {1, 0, 0, 1, 0, 1, 1, 0};
  EXPECT_EQ(g.token, token);
  EXPECT_EQ(g.slot, slot);
  const std::vector<int32_t> active = {0, 1, 3, 4};
  EXPECT_EQ(g.active_experts, active);
  EXPECT_EQ(g.count(2), 0);
  EXPECT_EQ(g.count(3), 3);
  // Every (token, slot) pair appears exactly once and points back at its expert.
  std::set<std::pair<int, int>> seen;
  for (int e = 0; e < 5; ++e)
    for (int row = g.begin[e]; row < g.begin[e + 1]; ++row) {
      EXPECT_EQ(r.expert_ids[g.token[row] * 2 + g.slot[row]], e);
      EXPECT_TRUE(seen.insert({g.token[row], g.slot[row]}).second);
    }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(ExpertGroups, EmptyBatchAndBadTables) {
  MoeRouting r;
  r.n_expert = 3;
  r.n_used = 1;
  r.n_tokens = 0;
  const ExpertGroups g = group_tokens_by_expert(r);
  EXPECT_EQ(g.begin, std::vector<int32_t>(4, 0));
  EXPECT_TRUE(g.active_experts.empty());
  r.n_tokens = 1;
  r.expert_ids = {3};  // out of range
  EXPECT_THROW(group_tokens_by_expert(r), Error);
  r.expert_ids = {0, 1};  // size mismatch
  EXPECT_THROW(group_tokens_by_expert(r), Error);
}

// LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT (gpt-oss): the k largest raw logits, weights
// ggml_soft_max over those k alone (expf each, sum in double, times float(1 / sum)); without
// renormalisation they are exactly that softmax.
TEST(MoeRoute, SoftmaxWeightIsTheSoftmaxOfTheSelectedLogits) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 3.25f, -0.75f, 1.0f};
  MoeRouteParams p = params(8, 4, false);
  p.softmax_weight = true;
  int32_t ids[4];
  float w[4];
  moe_route_token(logits.data(), p, ids, w);
  const int32_t want_ids[4] = {5, 1, 3, 7};
  double sum = 0.0;
  float e[4];
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(ids[s], want_ids[s]);
    e[s] = expf(logits[want_ids[s]] - 3.25f);
    sum += double(e[s]);
  }
  const float inv = float(1.0 / sum);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(w[s], e[s] * inv) << s;
  // Not the softmax over all eight renormalised by default rules: that divides once more.
  MoeRouteParams q = params(8, 4, true);
  float w2[4];
  moe_route_token(logits.data(), q, ids, w2);
  EXPECT_NEAR(w2[0], w[0], 1e-6);
  // With a bias-like shift of one logit the selection follows the raw logits.
  std::vector<float> shifted = logits;
  shifted[2] = 10.0f;
  moe_route_token(shifted.data(), p, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_NEAR(w[0] + w[1] + w[2] + w[3], 1.0, 1e-6);
}

}  // namespace
}  // namespace agentkv
