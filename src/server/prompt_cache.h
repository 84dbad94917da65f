// A slot's prompt cache: the tokens its sequence holds in memory, in position order (token i sits
// at position i), and the rule that decides how much of it a new prompt can reuse.
//
// Invariant: tokens() is exactly what the slot's sequence has absorbed — a token is appended only
// after the batch that evaluated it was decoded. Hybrid models (recurrent state) cannot drop a
// suffix, so today a diverging prompt on them is evaluated from scratch; context checkpoints and
// saved sequence states (restore instead of re-evaluating) belong in this class.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "memory/sequence_memory.h"
#include "tokenizer/tokenizer.h"

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
  bool state_refused = false;  // the memory could not drop the suffix (recurrent state): nothing kept
};

class PromptCache {
 public:
  const std::vector<Token>& tokens() const { return tokens_; }
  size_t size() const { return tokens_.size(); }
  void append(Token t) { tokens_.push_back(t); }
  // The sequence was removed from memory.
  void clear() { tokens_.clear(); }

  // Makes sequence `seq` hold the longest reusable prefix of `prompt` (nothing when
  // !cache_prompt) and forgets the rest, in memory and here.
  ReuseResult reuse_for(std::span<const Token> prompt, bool cache_prompt, memory::SequenceMemory& mem,
                        memory::SeqId seq);

 private:
  std::vector<Token> tokens_;
};

}  // namespace agentkv::server
