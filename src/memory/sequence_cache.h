// One sequence's cache as the request memory keeps it (agentkv/request_memory.h): the tokens its
// memory holds in position order (token i at position i), the logits after some of them, and what
// the memory did with them (published, sent to the tiers, a fake prefix or a shift that makes them
// other than a prefill computes).
//
// Invariant: tokens() is exactly what the sequence has absorbed — a token is appended only after
// the batch that evaluated it was decoded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "agentkv/prefix_cache.h"
#include "agentkv/request_memory.h"

namespace agentkv::memory {

// How many cached tokens a new prompt may keep: their common prefix, less one when that covers
// the whole prompt, so that at least the last prompt token is evaluated and its logits exist
// (llama-server's n_past-- rule). 0 when the prompt is empty.
size_t reusable_prefix(std::span<const CacheToken> cached, std::span<const CacheToken> prompt);

class SequenceCache {
 public:
  const std::vector<CacheToken>& tokens() const { return tokens_; }
  size_t size() const { return tokens_.size(); }
  void append(CacheToken t) { tokens_.push_back(t); }
  // The sequence left memory (its namespace and request stay).
  void clear();
  // The first n tokens stay (n <= size()), and the hashes of the full pages among them (page_tokens:
  // the prefix cache's page; 0: no cache, none kept): a chained page hash depends only on the
  // tokens up to its page's end.
  void truncate(size_t n, size_t page_tokens);
  // The sequence now holds `tokens` (attached pages, a restored state, a fake prefix, a shift),
  // with optional logits after the last one.
  void assume(std::vector<CacheToken> tokens, std::vector<float> logits = {});

  // What of `prompt` the sequence's own tokens give: reusable_prefix, or the whole prompt when the
  // logits after it were kept.
  size_t reusable(std::span<const CacheToken> prompt) const;
  // Logits computed after the first size() tokens. At most two sets are kept (the end of a prompt
  // and the end of a generation); a set whose tokens were forgotten goes.
  void keep_logits(std::span<const float> logits);
  // The logits after exactly n tokens, or an empty span.
  std::span<const float> saved_logits(size_t n) const;

  void start_request(size_t prompt_len, std::span<const size_t> divergences, uint64_t now);
  // The tokens changed from n on: what was published or sent beyond them must be again.
  void forget_sent_beyond(size_t n);
  // Holds what a prefill of its tokens computes: may be published and saved.
  bool exact() const { return !fake && !shifted; }

  uint64_t ns = 0;           // the namespace of the request that filled it (agentkv::cache_namespace)
  size_t published = 0;      // tokens already offered to the prefix index
  // The chained page hashes of tokens()'s full pages, and of the current prompt's beyond them while
  // it is read (PageHashes): set by RequestMemory::begin from the prompt's one hash pass, extended
  // by each publish with the pages that filled since, cleared whenever the tokens are replaced.
  PageHashes hashes;
  size_t tier_sent = 0;      // tokens whose full pages the page tier is known to hold
  bool fake = false;         // a metadata-only prefix (zero rows): never published, dropped at end
  bool shifted = false;      // a context shift dropped tokens from the middle ...
  size_t shift_keep = 0;     // ... and the tokens before this are as a prefill computes them
  bool busy = false;         // a request runs on it (begin .. end)
  uint64_t last_used = 0;    // when its last request began or ended (larger: more recent)
  bool reading_prompt = false;  // the request's prompt is being evaluated
  size_t prompt_len = 0;        // the request's prompt
  std::vector<size_t> divergences;  // ... and where the caller knows later prompts part

 private:
  struct Logits {
    size_t n_tokens = 0;
    std::vector<float> values;
  };
  std::vector<CacheToken> tokens_;
  std::vector<Logits> logits_;
};

}  // namespace agentkv::memory
