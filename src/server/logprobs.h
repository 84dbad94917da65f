// Token probabilities for n_probs (/completion's completion_probabilities) and OpenAI logprobs.
#pragma once
#include <utility>
#include <vector>

#include "server/json_fields.h"
#include "server/task.h"
#include "agentkv/tokenizer.h"

namespace agentkv::server {

// The log-softmax of `logits` at the sampled token `id` and the n_top most likely tokens
// (ties: lower id first).
TokenProbs token_probs(const Tokenizer& tok, const float* logits, int64_t n_vocab, Token id, int n_top);

// post_sampling_probs: the sampled token's probability in `distribution` (the sampler's last
// draw, most likely first) and its first n_top entries.
TokenProbs post_sampling_token_probs(const Tokenizer& tok, const std::vector<std::pair<Token, float>>& distribution,
                                     Token id, int n_top);

// One element, as llama-server writes it: {id, token, bytes, logprob, top_logprobs: [{id, token,
// bytes, logprob}]} (OpenAI's logprobs.content items, plus the ids); post-sampling ones as {id,
// token, bytes, prob, top_probs: [{id, token, bytes, prob}]}.
Json token_probs_json(const TokenProbs& p);
Json token_probs_json(const std::vector<TokenProbs>& probs);

}  // namespace agentkv::server
