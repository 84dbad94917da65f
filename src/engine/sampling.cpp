#include "agentkv/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include "agentkv/error.h"

namespace agentkv {

int32_t argmax_token(const float* logits, int64_t n_vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: the first (lowest id) maximum wins
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplerParams& p) : params_(p), rng_(p.seed) {
  auto refuse = [](const std::string& what) { throw Error("sampler: " + what); };
  for (float v : {p.temperature, p.top_p, p.min_p, p.repeat_penalty, p.presence_penalty, p.frequency_penalty}) {
    if (std::isnan(v)) refuse("parameters must not be NaN");
  }
  if (!(p.repeat_penalty > 0.0f)) refuse("repeat_penalty must be positive");
  if (p.repeat_last_n < -1) refuse("repeat_last_n must be -1 (whole history), 0 (off) or positive");
}

// llama.cpp's penalties sampler: each distinct token of the window is penalised once by
// repeat_penalty (dividing positive logits, multiplying the others), then by
// count * frequency_penalty + presence_penalty.
void Sampler::apply_penalties(std::vector<Candidate>& cands, std::span<const int32_t> history, bool dense) const {
  const auto& p = params_;
  if (p.repeat_last_n == 0 || history.empty() ||
      (p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f)) {
    return;
  }
  size_t window = history.size();
  if (p.repeat_last_n > 0) window = std::min(window, static_cast<size_t>(p.repeat_last_n));
  std::unordered_map<int32_t, int> counts;
  for (int32_t id : history.subspan(history.size() - window)) ++counts[id];
  if (!dense) {  // a subset of the vocabulary: look each candidate up
    for (Candidate& c : cands) {
      auto it = counts.find(c.id);
      if (it == counts.end()) continue;
      c.logit = c.logit <= 0.0f ? c.logit * p.repeat_penalty : c.logit / p.repeat_penalty;
      c.logit -= static_cast<float>(it->second) * p.frequency_penalty + p.presence_penalty;
    }
    return;
  }
  // Candidates are still in id order here: candidate i is token i.
  const auto n_vocab = static_cast<int64_t>(cands.size());
  for (const auto& [id, count] : counts) {
    if (id < 0 || id >= n_vocab) continue;
    float& logit = cands[static_cast<size_t>(id)].logit;
    logit = logit <= 0.0f ? logit * p.repeat_penalty : logit / p.repeat_penalty;
    logit -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
  }
}

double Sampler::next_uniform() {
  const uint64_t high = rng_() >> 5;  // 27 bits
  const uint64_t low = rng_() >> 6;   // 26 bits
  return static_cast<double>((high << 26) | low) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab, std::span<const int32_t> history) {
  if (!logits || n_vocab <= 0) throw Error("sampler: empty logits row");
  const auto n = static_cast<size_t>(n_vocab);
  cands_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float l = logits[i];
    cands_[i] = {static_cast<int32_t>(i), std::isnan(l) ? -INFINITY : l};
  }
  apply_penalties(cands_, history, /*dense=*/true);
  return draw();
}

int32_t Sampler::sample_among(const float* logits, std::span<const int32_t> ids, std::span<const int32_t> history) {
  if (!logits || ids.empty()) throw Error("sampler: no candidate tokens");
  cands_.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const float l = logits[ids[i]];
    cands_[i] = {ids[i], std::isnan(l) ? -INFINITY : l};
  }
  apply_penalties(cands_, history, /*dense=*/false);
  return draw();
}

int32_t Sampler::draw() {
  last_size_ = 0;
  last_token_ = draw_from_chain();
  return last_token_;
}

std::vector<std::pair<int32_t, float>> Sampler::last_distribution() const {
  std::vector<std::pair<int32_t, float>> out;
  if (last_size_ == 0) {
    if (last_token_ >= 0) out.emplace_back(last_token_, 1.0f);
    return out;
  }
  double total = 0.0;
  for (size_t i = 0; i < last_size_; ++i) total += probs_[i];
  for (size_t i = 0; i < last_size_; ++i)
    if (probs_[i] > 0.0f) out.emplace_back(cands_[i].id, static_cast<float>(probs_[i] / total));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  return out;
}

int32_t Sampler::draw_from_chain() {
  const size_t n = cands_.size();
  auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };

  if (params_.temperature <= 0.0f) {
    // Greedy. top-k / top-p / min-p always keep the best token, so only the penalties matter.
    return std::min_element(cands_.begin(), cands_.end(), better)->id;
  }

  size_t size = n;
  size_t sorted_prefix = 0;  // cands_[0, sorted_prefix) holds the best tokens in order
  auto sort_prefix = [&](size_t want) {
    want = std::min(want, size);
    if (want <= sorted_prefix) return;
    std::partial_sort(cands_.begin() + static_cast<std::ptrdiff_t>(sorted_prefix),
                      cands_.begin() + static_cast<std::ptrdiff_t>(want),
                      cands_.begin() + static_cast<std::ptrdiff_t>(size), better);
    sorted_prefix = want;
  };

  // top-k
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < size) {
    sort_prefix(static_cast<size_t>(params_.top_k));
    size = static_cast<size_t>(params_.top_k);
  }

  // top-p: the smallest prefix of the sorted candidates whose probability reaches top_p.
  if (params_.top_p < 1.0f) {
    sort_prefix(1);
    const float max = cands_[0].logit;
    if (max != -INFINITY) {
      double total = 0.0;
      for (size_t i = 0; i < size; ++i) total += std::exp(static_cast<double>(cands_[i].logit - max));
      double cumulative = 0.0;
      size_t keep = size;
      for (size_t i = 0; i < size; ++i) {
        if (i >= sorted_prefix) sort_prefix(std::max<size_t>(2 * sorted_prefix, 256));
        cumulative += std::exp(static_cast<double>(cands_[i].logit - max)) / total;
        if (cumulative >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
      size = keep;
    }
  }

  // min-p: keep tokens whose probability is at least min_p times the best one's.
  if (params_.min_p > 0.0f) {
    float max = -INFINITY;
    for (size_t i = 0; i < size; ++i) max = std::max(max, cands_[i].logit);
    const float threshold = max + std::log(params_.min_p);
    size_t kept = 0;
    for (size_t i = 0; i < size; ++i) {
      if (cands_[i].logit >= threshold) cands_[kept++] = cands_[i];
    }
    if (kept > 0) size = kept;  // all -inf: leave the set alone
  }

  // temperature, then a draw from the softmax of what is left.
  float max = -INFINITY;
  for (size_t i = 0; i < size; ++i) {
    cands_[i].logit /= params_.temperature;
    max = std::max(max, cands_[i].logit);
  }
  if (max == -INFINITY) return std::min_element(cands_.begin(), cands_.begin() + static_cast<std::ptrdiff_t>(size), better)->id;
  probs_.resize(size);
  double total = 0.0;
  for (size_t i = 0; i < size; ++i) {
    probs_[i] = std::exp(cands_[i].logit - max);
    total += probs_[i];
  }
  last_size_ = size;
  const double target = next_uniform() * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < size; ++i) {
    cumulative += probs_[i];
    if (target < cumulative && probs_[i] > 0.0f) return cands_[i].id;
  }
  // Rounding left the target past the end: the last token with any probability.
  for (size_t i = size; i-- > 0;) {
    if (probs_[i] > 0.0f) return cands_[i].id;
  }
  return cands_[0].id;
}

// ---------------------------------------------------------------------------------------------

namespace {

// Start of an incomplete UTF-8 sequence at the end of s, or s.size() if it ends complete.
size_t incomplete_utf8_tail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    return back < need ? n - back : n;
  }
  return n;
}

}  // namespace

StopChecker::StopChecker(std::vector<std::string> stop_strings) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopChecker::Step StopChecker::push(std::string_view piece) {
  Step step;
  if (stopped_) {
    step.stopped = true;
    return step;
  }
  const size_t old_size = text_.size();
  text_.append(piece);

  // A stop string that is new must end inside the appended piece.
  size_t stop_at = std::string::npos;
  for (const auto& stop : stops_) {
    const size_t from = old_size >= stop.size() ? old_size - stop.size() + 1 : 0;
    const size_t pos = text_.find(stop, from);
    if (pos != std::string::npos && (stop_at == std::string::npos || pos < stop_at)) {
      stop_at = pos;
      matched_ = stop;
    }
  }
  if (stop_at != std::string::npos) {
    stopped_ = true;
    text_.resize(stop_at);
    if (stop_at > released_) step.text = text_.substr(released_);
    released_ = text_.size();
    step.stopped = true;
    return step;
  }

  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = text_.size();
  for (const auto& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, text_.size());
    for (size_t len = longest; len > 0; --len) {
      if (text_.compare(text_.size() - len, len, stop, 0, len) == 0) {
        hold = std::min(hold, text_.size() - len);
        break;
      }
    }
  }
  hold = std::min(hold, incomplete_utf8_tail(text_));
  if (hold > released_) {
    step.text = text_.substr(released_, hold - released_);
    released_ = hold;
  }
  return step;
}

std::string StopChecker::flush() {
  std::string rest = released_ < text_.size() ? text_.substr(released_) : std::string();
  released_ = text_.size();
  return rest;
}

}  // namespace agentkv
