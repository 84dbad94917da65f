#include "server/prompt_cache.h"

#include <algorithm>

namespace agentkv::server {

size_t common_prefix(std::span<const Token> a, std::span<const Token> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

size_t reusable_prefix(std::span<const Token> cached, std::span<const Token> prompt) {
  const size_t common = common_prefix(cached, prompt);
  if (!prompt.empty() && common == prompt.size()) return common - 1;
  return common;
}

void PromptCache::clear() {
  tokens_.clear();
  logits_.clear();
}

void PromptCache::forget_beyond(size_t n) {
  std::erase_if(logits_, [n](const Logits& l) { return l.n_tokens > n; });
}

void PromptCache::keep_logits(std::span<const float> logits) {
  const size_t n = tokens_.size();
  std::erase_if(logits_, [n](const Logits& l) { return l.n_tokens == n; });
  if (logits_.size() >= 2) logits_.erase(logits_.begin());  // the oldest set
  logits_.push_back({n, std::vector<float>(logits.begin(), logits.end())});
}

std::span<const float> PromptCache::saved_logits(size_t n) const {
  for (const Logits& l : logits_)
    if (l.n_tokens == n && n > 0) return l.values;
  return {};
}

void PromptCache::assume(std::vector<Token> tokens, std::vector<float> logits) {
  tokens_ = std::move(tokens);
  logits_.clear();
  if (!logits.empty() && !tokens_.empty()) logits_.push_back({tokens_.size(), std::move(logits)});
}

bool PromptCache::keep_first(size_t n, MemoryInterface& mem, MemorySeqId seq) {
  if (n >= tokens_.size()) return true;
  if (!mem.seq_rm(seq, static_cast<MemoryPos>(n), -1)) return false;
  tokens_.resize(n);
  forget_beyond(n);
  return true;
}

ReuseResult PromptCache::reuse_for(std::span<const Token> prompt, bool cache_prompt, MemoryInterface& mem,
                                   MemorySeqId seq, PrefixCache* prefix_cache, uint64_t page_salt) {
  ReuseResult r;
  r.n_cached = tokens_.size();
  r.n_common = common_prefix(tokens_, prompt);
  size_t target = 0;
  if (cache_prompt) {
    target = r.n_common;
    if (!prompt.empty() && r.n_common == prompt.size()) {
      // The whole prompt is cached: its logits are needed, saved or recomputed.
      if (saved_logits(prompt.size()).empty()) target = prompt.size() - 1;
      else r.use_saved_logits = true;
    }
  }
  r.n_kept = target;
  if (!keep_first(target, mem, seq)) {
    // A recurrent state cannot forget a suffix: the sequence goes and takes its own pages back
    // from the prefix cache, up to the latest snapshot before the divergence (or starts over).
    mem.seq_rm(seq, -1, -1);
    const size_t restored = target > 0 && prefix_cache
                                ? prefix_cache->attach(seq, std::span<const Token>(tokens_).first(target), page_salt, target)
                                : 0;
    r.checkpoint_restored = restored > 0;
    r.state_refused = target > 0 && restored == 0;
    r.n_kept = restored;
    tokens_.resize(r.n_kept);
    forget_beyond(r.n_kept);
  }
  if (r.n_kept != prompt.size()) r.use_saved_logits = false;
  return r;
}

}  // namespace agentkv::server
