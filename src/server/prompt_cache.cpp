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
  imported_.clear();
}

void PromptCache::forget_beyond(size_t n) {
  std::erase_if(logits_, [n](const Logits& l) { return l.n_tokens > n; });
  std::erase_if(imported_, [n](const LoadedCheckpoint& c) { return static_cast<size_t>(c.pos) + 1 > n; });
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

void PromptCache::assume(std::vector<Token> tokens, std::vector<float> logits, std::vector<LoadedCheckpoint> checkpoints) {
  tokens_ = std::move(tokens);
  logits_.clear();
  if (!logits.empty() && !tokens_.empty()) logits_.push_back({tokens_.size(), std::move(logits)});
  imported_ = std::move(checkpoints);
  std::sort(imported_.begin(), imported_.end(),
            [](const LoadedCheckpoint& a, const LoadedCheckpoint& b) { return a.pos < b.pos; });
  forget_beyond(tokens_.size());
}

bool PromptCache::restore_imported_before(size_t n, memory::SequenceMemory& mem, memory::SeqId seq,
                                          size_t& n_restored) {
  for (auto it = imported_.rbegin(); it != imported_.rend(); ++it) {
    const size_t n_tokens = static_cast<size_t>(it->pos) + 1;
    if (n_tokens > n) continue;
    try {
      // As CheckpointStore does: the recurrent part goes back, the attention cells after it go.
      it->snapshot.restore(mem, seq);
      if (mem.kv()) mem.kv()->seq_rm(seq, it->pos + 1, -1);
    } catch (const std::exception&) {
      continue;
    }
    n_restored = n_tokens;
    return true;
  }
  return false;
}

ReuseResult PromptCache::reuse_for(std::span<const Token> prompt, bool cache_prompt, memory::SequenceMemory& mem,
                                   memory::SeqId seq, memory::CheckpointStore* checkpoints) {
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
  if (target < tokens_.size()) {
    if (!mem.seq_rm(seq, static_cast<memory::Pos>(target), -1)) {
      // A recurrent state cannot forget a suffix: go back to a checkpoint, or start over.
      size_t restored = 0;
      bool ok = false;
      if (target > 0 && checkpoints) {
        if (auto info = checkpoints->restore_latest_before(mem, seq, static_cast<memory::Pos>(target), tokens_)) {
          restored = static_cast<size_t>(info->n_tokens);
          ok = true;
        }
      }
      if (!ok && target > 0) ok = restore_imported_before(target, mem, seq, restored);
      if (ok) {
        r.checkpoint_restored = true;
        r.n_kept = restored;
      } else {
        mem.seq_rm(seq, -1, -1);
        if (checkpoints) checkpoints->drop(seq);
        r.state_refused = target > 0;
        r.n_kept = 0;
      }
    }
    tokens_.resize(r.n_kept);
    forget_beyond(r.n_kept);
    if (checkpoints && r.n_kept > 0) checkpoints->drop_after(seq, static_cast<memory::Pos>(r.n_kept) - 1);
  }
  if (r.n_kept != prompt.size()) r.use_saved_logits = false;
  return r;
}

}  // namespace agentkv::server
