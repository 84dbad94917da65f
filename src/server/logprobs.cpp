#include "server/logprobs.h"

#include <algorithm>
#include <cmath>

namespace agentkv::server {

TokenProbs token_probs(const Tokenizer& tok, const float* logits, int64_t n_vocab, Token id, int n_top) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n_vocab; ++i)
    if (logits[i] > max) max = logits[i];
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i)
    if (logits[i] > -INFINITY) sum += std::exp(static_cast<double>(logits[i] - max));
  const float lse = max + static_cast<float>(std::log(sum));
  TokenProbs p;
  p.id = id;
  p.text = tok.token_to_piece(id, false);
  p.logprob = logits[id] - lse;
  if (n_top > 0) {
    // Keep the n_top best (a small sorted list; n_top <= 100).
    std::vector<std::pair<Token, float>> best;
    auto worse = [](const std::pair<Token, float>& a, const std::pair<Token, float>& b) {
      return a.second > b.second || (a.second == b.second && a.first < b.first);
    };
    for (int64_t i = 0; i < n_vocab; ++i) {
      const float l = logits[i];
      if (static_cast<int>(best.size()) == n_top && !(l > best.back().second)) continue;
      std::pair<Token, float> e{static_cast<Token>(i), l};
      best.insert(std::upper_bound(best.begin(), best.end(), e, worse), e);
      if (static_cast<int>(best.size()) > n_top) best.pop_back();
    }
    for (auto& [t, l] : best) {
      p.top.emplace_back(t, l - lse);
      p.top_text.push_back(tok.token_to_piece(t, false));
    }
  }
  return p;
}

TokenProbs post_sampling_token_probs(const Tokenizer& tok, const std::vector<std::pair<Token, float>>& distribution,
                                     Token id, int n_top) {
  TokenProbs p;
  p.id = id;
  p.text = tok.token_to_piece(id, false);
  p.post_sampling = true;
  p.logprob = -INFINITY;  // a token outside the distribution (it cannot be drawn) has probability 0
  for (const auto& [t, prob] : distribution)
    if (t == id) p.logprob = std::log(prob);
  for (size_t i = 0; i < distribution.size() && static_cast<int>(i) < n_top; ++i) {
    p.top.emplace_back(distribution[i].first, std::log(distribution[i].second));
    p.top_text.push_back(tok.token_to_piece(distribution[i].first, false));
  }
  return p;
}

namespace {
Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
Json safe_logprob(float v) { return std::isfinite(v) ? Json(v) : Json(-9999.0); }
}  // namespace

Json token_probs_json(const TokenProbs& p) {
  // Post-sampling values are probabilities, named as llama-server names them.
  const char* value_name = p.post_sampling ? "prob" : "logprob";
  auto value = [&](float logprob) { return p.post_sampling ? Json(std::exp(logprob)) : safe_logprob(logprob); };
  Json top = Json::array();
  for (size_t i = 0; i < p.top.size(); ++i)
    top.push_back(Json{{"id", p.top[i].first},
                       {"token", p.top_text[i]},
                       {"bytes", bytes_of(p.top_text[i])},
                       {value_name, value(p.top[i].second)}});
  return Json{{"id", p.id}, {"token", p.text}, {"bytes", bytes_of(p.text)}, {value_name, value(p.logprob)},
              {p.post_sampling ? "top_probs" : "top_logprobs", top}};
}

Json token_probs_json(const std::vector<TokenProbs>& probs) {
  Json out = Json::array();
  for (const TokenProbs& p : probs) out.push_back(token_probs_json(p));
  return out;
}

}  // namespace agentkv::server
