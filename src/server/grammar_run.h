// A grammar applied to one slot's generation (constrained decoding), on the scheduler thread.
//
// Sampling follows llama.cpp's common_sampler: the token is first drawn from the unconstrained
// chain (penalties, top-k, top-p, min-p, temperature); if the grammar allows it, it is kept;
// otherwise every token the grammar refuses is set to -inf and the chain draws again from what
// is left. The first check costs one token's walk, so most steps of a model that follows the
// grammar cost nothing; the mask is a trie walk with memoized states (agentkv/grammar_matcher.h).
//
// Lazy grammars (tool_choice "auto"): generation is free until a trigger text appears (outside
// a <think> block); the grammar then starts at the trigger and constrains the rest.
#pragma once
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "agentkv/sampling.h"
#include "agentkv/grammar_matcher.h"

namespace agentkv::server {

// Compiled matchers by grammar text, shared by slots (their memoized states and masks carry over
// from one request to the next with the same schema).
class MatcherCache {
 public:
  explicit MatcherCache(size_t capacity = 16) : capacity_(capacity) {}
  std::shared_ptr<grammar::Matcher> get(const std::shared_ptr<const grammar::Grammar>& g);

 private:
  size_t capacity_;
  std::list<std::pair<std::string, std::shared_ptr<grammar::Matcher>>> entries_;  // most recent first
};

struct GrammarSettings {
  std::shared_ptr<const grammar::Grammar> grammar;
  bool lazy = false;
  // lazy: the grammar starts where one of these appears; one starting with '^' counts only at the
  // answer's start (after the think block when there is one)
  std::vector<std::string> triggers;
  bool think_first = false;           // lazy: triggers count only after "</think>"
};

class GrammarRun {
 public:
  GrammarRun(std::shared_ptr<grammar::Matcher> m, const grammar::TokenTrie& trie, const GrammarSettings& s);

  bool active() const { return active_; }
  // Draws a token. `logits` is not modified (a masked copy goes to `scratch`). Returns -1 when
  // the grammar allows no token at all.
  int32_t sample(Sampler& sampler, const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                 std::vector<float>& scratch);
  // Whether the grammar lets `id` come next (always, before a lazy grammar's trigger).
  bool allows(int32_t id) const { return !active_ || m_->allows(pos_, trie_, id); }
  // The sampled token was accepted: advance (or, lazy, look for a trigger in its text).
  void accept(int32_t id, const std::string& piece);
  // How many of `tokens` the grammar lets come next, one after another (the drafts worth
  // verifying); all of them while a lazy grammar waits for its trigger.
  size_t allowed_run(std::span<const int32_t> tokens) const;
  // Only an end-of-generation token can follow.
  bool must_end() const { return active_ && m_->must_end(pos_); }

 private:
  std::shared_ptr<grammar::Matcher> m_;
  const grammar::TokenTrie& trie_;
  GrammarSettings settings_;
  grammar::Position pos_;
  bool active_ = false;
  std::string text_;  // lazy, before the trigger: the text so far
  std::vector<int32_t> allowed_;  // the tokens the mask allows (scratch)
};

}  // namespace agentkv::server
