#include "memory/sequence_cache.h"

#include <algorithm>

namespace agentkv {

size_t common_prefix(std::span<const CacheToken> a, std::span<const CacheToken> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace agentkv

namespace agentkv::memory {

size_t reusable_prefix(std::span<const CacheToken> cached, std::span<const CacheToken> prompt) {
  const size_t common = common_prefix(cached, prompt);
  if (!prompt.empty() && common == prompt.size()) return common - 1;
  return common;
}

void SequenceCache::clear() {
  tokens_.clear();
  logits_.clear();
  fake = false;
  shifted = false;
  shift_keep = 0;
  published = 0;
  tier_sent = 0;
  hashes.clear();
}

void SequenceCache::truncate(size_t n, size_t page_tokens) {
  if (n >= tokens_.size()) return;
  tokens_.resize(n);
  // The pages past n may change (RequestMemory::begin sets them again).
  hashes.resize(page_tokens > 0 ? std::min(hashes.size(), n / page_tokens) : 0);
  std::erase_if(logits_, [n](const Logits& l) { return l.n_tokens > n; });
  forget_sent_beyond(n);
}

void SequenceCache::assume(std::vector<CacheToken> tokens, std::vector<float> logits) {
  tokens_ = std::move(tokens);
  logits_.clear();
  hashes.clear();
  if (!logits.empty() && !tokens_.empty()) logits_.push_back({tokens_.size(), std::move(logits)});
}

size_t SequenceCache::reusable(std::span<const CacheToken> prompt) const {
  const size_t common = common_prefix(tokens_, prompt);
  if (common == prompt.size() && !saved_logits(prompt.size()).empty()) return common;
  return reusable_prefix(tokens_, prompt);
}

void SequenceCache::keep_logits(std::span<const float> logits) {
  const size_t n = tokens_.size();
  std::erase_if(logits_, [n](const Logits& l) { return l.n_tokens == n; });
  if (logits_.size() >= 2) logits_.erase(logits_.begin());  // the oldest set
  logits_.push_back({n, std::vector<float>(logits.begin(), logits.end())});
}

std::span<const float> SequenceCache::saved_logits(size_t n) const {
  for (const Logits& l : logits_)
    if (l.n_tokens == n && n > 0) return l.values;
  return {};
}

void SequenceCache::start_request(size_t prompt_len_, std::span<const size_t> divergences_, uint64_t now) {
  busy = true;
  last_used = now;
  prompt_len = prompt_len_;
  divergences.assign(divergences_.begin(), divergences_.end());
  reading_prompt = true;
}

void SequenceCache::forget_sent_beyond(size_t n) {
  published = std::min(published, n);
  tier_sent = std::min(tier_sent, n);
}

}  // namespace agentkv::memory
