// A slot's prompt cache: the tokens its sequence holds in memory, in position order (token i sits
// at position i), and the rule that decides how much of it a new prompt can reuse.
//
// Invariant: tokens() is exactly what the slot's sequence has absorbed — a token is appended only
// after the batch that evaluated it was decoded.
//
// Beyond tokens, the cache keeps what lets a new prompt skip work:
// - the logits computed after a known token count (the end of the last prompt, the end of the last
//   generation, or those carried by a restored state): a prompt equal to those tokens is not
//   evaluated at all, its first token is sampled from them;
// - for hybrid models (a recurrent state cannot drop a suffix), a prompt diverging inside the
//   cache goes back to the newest recurrent snapshot before the divergence instead of starting
//   over: the prefix cache holds the snapshots on the slot's page chain
//   (agentkv/prefix_cache.h), so the rollback is an attach of the slot's own cached pages.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "agentkv/memory.h"
#include "agentkv/prefix_cache.h"
#include "agentkv/tokenizer.h"

namespace agentkv::server {

// Length of the longest common prefix of a and b.
size_t common_prefix(std::span<const Token> a, std::span<const Token> b);

// How many cached tokens a new prompt may keep: their common prefix, less one when that covers
// the whole prompt, so that at least the last prompt token is evaluated and its logits exist
// (llama-server's n_past-- rule). 0 when the prompt is empty.
size_t reusable_prefix(std::span<const Token> cached, std::span<const Token> prompt);

struct ReuseResult {
  size_t n_cached = 0;    // tokens the cache held before
  size_t n_common = 0;    // common prefix of cache and prompt
  size_t n_kept = 0;      // tokens kept in memory (= timings.cache_n); the rest is evaluated
  bool state_refused = false;       // the memory could not drop the suffix and no snapshot applied
  bool checkpoint_restored = false; // rolled back to a recurrent snapshot (n_kept = its token count)
  bool use_saved_logits = false;    // n_kept == prompt size: sample from saved_logits(), evaluate nothing
};

class PromptCache {
 public:
  const std::vector<Token>& tokens() const { return tokens_; }
  size_t size() const { return tokens_.size(); }
  void append(Token t) { tokens_.push_back(t); }
  // The sequence was removed from memory.
  void clear();

  // Makes sequence `seq` hold the longest reusable prefix of `prompt` (nothing when
  // !cache_prompt) and forgets the rest, in memory and here. When the memory refuses to drop a
  // suffix, the sequence is dropped and re-attached from the prefix cache (if there is one)
  // under `page_salt`, up to the latest snapshot before the divergence.
  ReuseResult reuse_for(std::span<const Token> prompt, bool cache_prompt, MemoryInterface& mem, MemorySeqId seq,
                        PrefixCache* prefix_cache = nullptr, uint64_t page_salt = 0);

  // Keeps the first n tokens (all when n >= size()), in memory and here; false (nothing changed)
  // when the memory cannot drop the rest (a recurrent state).
  bool keep_first(size_t n, MemoryInterface& mem, MemorySeqId seq);

  // Logits computed after the first size() tokens (size() <= this->size()). At most two sets
  // are kept (the end of a prompt and the end of a generation); a set whose tokens were
  // forgotten goes.
  void keep_logits(std::span<const float> logits);
  // The logits after exactly n tokens, or an empty span.
  std::span<const float> saved_logits(size_t n) const;

  // The sequence now holds `tokens` (a restored state, attached pages, or a fake prefix), with
  // optional logits after the last one.
  void assume(std::vector<Token> tokens, std::vector<float> logits = {});

 private:
  struct Logits {
    size_t n_tokens = 0;
    std::vector<float> values;
  };
  void forget_beyond(size_t n);  // drops logits that need > n tokens

  std::vector<Token> tokens_;
  std::vector<Logits> logits_;
};

}  // namespace agentkv::server
