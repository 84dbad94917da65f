// Mixture-of-experts routing as llama.cpp's build_moe_ffn does it for qwen35moe / qwen3next
// (softmax gating, top-k, weights renormalised), plus the per-batch grouping of tokens by expert
// that lets the expert FFNs read each selected expert's weights once per batch.
#pragma once
#include <cstdint>
#include <vector>

namespace agentkv {

// Selection of n_tokens tokens, n_used experts each; row t holds ids / weights [t*n_used, +n_used)
// in descending probability (ties: lower expert id first).
struct MoeRouting {
  int n_expert = 0;
  int n_used = 0;
  int64_t n_tokens = 0;
  std::vector<int32_t> expert_ids;
  std::vector<float> weights;
};

struct MoeRouteParams {
  int n_expert = 0;
  int n_used = 0;             // 1 <= n_used <= n_expert
  bool normalize = true;      // w = p_sel / max(sum(p_sel), 6.103515625e-5) (qwen35moe: true)
  float weight_scale = 0.0f;  // applied after normalisation unless 0 or 1 (expert_weights_scale)
  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT (gpt-oss): the n_used largest raw
  // logits are selected and the weights are the softmax over those n_used logits alone (then
  // normalize / weight_scale as above; gpt-oss normalises nothing). false: softmax over all.
  bool softmax_weight = false;
};

// Routes one token: p = softmax(logits) over all n_expert experts (max-subtracted, sum in double,
// as ggml_soft_max), the n_used largest p are selected, weights per params (softmax_weight: the
// n_used largest logits, weights the same softmax over the selected logits). ids / weights get
// n_used entries.
//
// Ties: ggml picks the top k with an unstable std::sort / partial_sort, so equal probabilities
// come out in an unspecified order there; here the lower expert id wins, which is one of the
// orders ggml may produce. NaN probabilities rank below every number.
void moe_route_token(const float* logits, const MoeRouteParams& params, int32_t* ids,
                     float* weights);

// Routes n_tokens rows of logits (row stride logits_stride floats).
MoeRouting moe_route(const float* logits, int64_t logits_stride, int64_t n_tokens,
                     const MoeRouteParams& params);

// Tokens of a batch grouped by expert, CSR style: the rows of expert e are
// [begin[e], begin[e+1]); row r is token token[r], which chose e in its slot slot[r]
// (its weight is routing.weights[token[r]*n_used + slot[r]]). Tokens ascend within an expert.
struct ExpertGroups {
  std::vector<int32_t> begin;  // n_expert + 1 offsets
  std::vector<int32_t> token;  // n_tokens * n_used rows
  std::vector<int32_t> slot;
  std::vector<int32_t> active_experts;  // experts with at least one row, ascending

  int32_t count(int expert) const { return begin[expert + 1] - begin[expert]; }
};

ExpertGroups group_tokens_by_expert(const MoeRouting& routing);

}  // namespace agentkv
