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

ReuseResult PromptCache::reuse_for(std::span<const Token> prompt, bool cache_prompt, memory::SequenceMemory& mem,
                                   memory::SeqId seq) {
  ReuseResult r;
  r.n_cached = tokens_.size();
  r.n_common = common_prefix(tokens_, prompt);
  r.n_kept = cache_prompt ? reusable_prefix(tokens_, prompt) : 0;
  if (r.n_kept < tokens_.size()) {
    if (!mem.seq_rm(seq, static_cast<memory::Pos>(r.n_kept), -1)) {
      // A recurrent state cannot forget a suffix; start the sequence over.
      mem.seq_rm(seq, -1, -1);
      r.state_refused = r.n_kept > 0;
      r.n_kept = 0;
    }
    tokens_.resize(r.n_kept);
  }
  return r;
}

}  // namespace agentkv::server
