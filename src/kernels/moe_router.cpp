#include "kernels/moe_router.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "agentkv/error.h"
#include "kernels/dispatch.h"
#include "kernels/ggml_expf-inl.h"

namespace agentkv {
namespace {

void check_params(const MoeRouteParams& p) {
  if (p.n_expert <= 0)
    throw Error("moe router: expert count must be positive (got " + std::to_string(p.n_expert) +
                ")");
  if (p.n_used < 1 || p.n_used > p.n_expert)
    throw Error("moe router: experts used per token (" + std::to_string(p.n_used) +
                ") must be in [1, " + std::to_string(p.n_expert) + "]");
}

// True when a ranks strictly above b (NaN ranks below everything).
bool ranks_above(float a, float b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a > b;
}

// ggml_soft_max of n logits into probs.
void soft_max(const float* logits, int n, float* probs) {
  float max = -INFINITY;
  for (int e = 0; e < n; ++e) max = std::fmax(max, logits[e]);
  // ggml_vec_soft_max_f32 on the AVX2 build (the AVX2 and scalar levels): whole groups of 8 take
  // its ggml_v_expf and add the group's sum (hsum order: halves, then (0 + 2) + (1 + 3)) to the
  // double; the rest expf one at a time. (The AVX-512 level keeps expf for every expert: its build
  // would take 16-lane groups from 16 experts on; the fixtures have 4.)
  double sum = 0.0;
  int e = 0;
  if (ggml_build_lanes() == 8) {
    for (; e + 8 <= n; e += 8) {
      float v[8];
      for (int l = 0; l < 8; ++l) probs[e + l] = v[l] = ggml_math::GgmlExpLaneAvx2(logits[e + l] - max);
      float q[4];
      for (int l = 0; l < 4; ++l) q[l] = v[l + 4] + v[l];
      sum += double((q[0] + q[2]) + (q[1] + q[3]));
    }
  }
  for (; e < n; ++e) {
    probs[e] = std::exp(logits[e] - max);
    sum += double(probs[e]);
  }
  const float inv = float(1.0 / sum);
  for (int e = 0; e < n; ++e) probs[e] *= inv;
}

void route_token(const float* logits, const MoeRouteParams& p, int32_t* ids, float* weights,
                 std::vector<float>& probs, std::vector<char>& taken) {
  const int n = p.n_expert;
  if (p.softmax_weight) {
    std::copy(logits, logits + n, probs.begin());  // ranked by the raw logits
  } else {
    soft_max(logits, n, probs.data());
  }

  // n_used is small (8 of 128-512 experts): repeated arg-max beats sorting and makes the tie
  // rule explicit.
  std::fill(taken.begin(), taken.end(), 0);
  for (int slot = 0; slot < p.n_used; ++slot) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      if (taken[e]) continue;
      if (best < 0 || ranks_above(probs[e], probs[best])) best = e;
    }
    taken[best] = 1;
    ids[slot] = best;
    weights[slot] = probs[best];
  }
  if (p.softmax_weight) {  // softmax over the selected logits, in slot order
    float selected[64];
    std::vector<float> many;
    float* sel = selected;
    if (p.n_used > 64) {
      many.resize(static_cast<size_t>(p.n_used));
      sel = many.data();
    }
    std::copy(weights, weights + p.n_used, sel);
    soft_max(sel, p.n_used, weights);
  }
  if (p.normalize) {
    double wsum = 0.0;
    for (int slot = 0; slot < p.n_used; ++slot) wsum += double(weights[slot]);
    const float denom = std::fmax(float(wsum), 6.103515625e-5f);  // smallest normal f16
    for (int slot = 0; slot < p.n_used; ++slot) weights[slot] /= denom;
  }
  if (p.weight_scale != 0.0f && p.weight_scale != 1.0f)
    for (int slot = 0; slot < p.n_used; ++slot) weights[slot] *= p.weight_scale;
}

}  // namespace

void moe_route_token(const float* logits, const MoeRouteParams& params, int32_t* ids,
                     float* weights) {
  check_params(params);
  std::vector<float> probs(params.n_expert);
  std::vector<char> taken(params.n_expert);
  route_token(logits, params, ids, weights, probs, taken);
}

MoeRouting moe_route(const float* logits, int64_t logits_stride, int64_t n_tokens,
                     const MoeRouteParams& params) {
  check_params(params);
  if (n_tokens < 0) throw Error("moe router: negative token count");
  if (n_tokens > 0 && (!logits || logits_stride < params.n_expert))
    throw Error("moe router: logits rows missing or shorter than the expert count");
  MoeRouting r;
  r.n_expert = params.n_expert;
  r.n_used = params.n_used;
  r.n_tokens = n_tokens;
  r.expert_ids.resize(size_t(n_tokens) * params.n_used);
  r.weights.resize(size_t(n_tokens) * params.n_used);
  std::vector<float> probs(params.n_expert);
  std::vector<char> taken(params.n_expert);
  for (int64_t t = 0; t < n_tokens; ++t)
    route_token(logits + t * logits_stride, params, r.expert_ids.data() + t * params.n_used,
                r.weights.data() + t * params.n_used, probs, taken);
  return r;
}

ExpertGroups group_tokens_by_expert(const MoeRouting& routing) {
  if (routing.n_expert <= 0 || routing.n_used <= 0 || routing.n_tokens < 0 ||
      routing.expert_ids.size() != size_t(routing.n_tokens) * routing.n_used)
    throw Error("moe router: inconsistent routing table");
  const int n_expert = routing.n_expert;
  const size_t n_rows = routing.expert_ids.size();
  ExpertGroups g;
  g.begin.assign(size_t(n_expert) + 1, 0);
  for (int32_t e : routing.expert_ids) {
    if (e < 0 || e >= n_expert)
      throw Error("moe router: expert id " + std::to_string(e) + " out of range [0, " +
                  std::to_string(n_expert) + ")");
    ++g.begin[size_t(e) + 1];
  }
  for (int e = 0; e < n_expert; ++e) {
    if (g.begin[size_t(e) + 1] > 0) g.active_experts.push_back(e);
    g.begin[size_t(e) + 1] += g.begin[size_t(e)];
  }
  // Counting sort: scanning tokens in order keeps them ascending inside each expert.
  g.token.resize(n_rows);
  g.slot.resize(n_rows);
  std::vector<int32_t> fill(g.begin.begin(), g.begin.end() - 1);
  for (int64_t t = 0; t < routing.n_tokens; ++t) {
    for (int s = 0; s < routing.n_used; ++s) {
      const int32_t e = routing.expert_ids[size_t(t) * routing.n_used + s];
      const int32_t row = fill[e]++;
      g.token[row] = int32_t(t);
      g.slot[row] = s;
    }
  }
  return g;
}

}  // namespace agentkv
