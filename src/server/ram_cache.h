// The host-RAM prompt cache (--cache-ram MiB): saved states of slot sequences (session_state.h
// blobs with tokens, last logits and checkpoints) kept after the slot moved on to another prompt,
// so that a conversation that comes back is restored instead of evaluated again. llama-server's
// rules, simplified (docs/server.md):
//   - a state is saved when a slot's cache is about to be lost: the slot takes a prompt that keeps
//     less than half of it, or memory pressure drops it;
//   - an entry whose tokens are a prefix of the new one is dropped (the new one covers it); a new
//     state whose tokens are a prefix of an entry's is not stored;
//   - the budget is in bytes; the least recently used entries go first;
//   - a new prompt is restored from the entry sharing the longest prefix with it when that beats
//     what the slot itself keeps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace agentkv::server {

class RamPromptCache {
 public:
  explicit RamPromptCache(size_t byte_budget) : budget_(byte_budget) {}

  bool enabled() const { return budget_ > 0; }
  size_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }

  // Stores a state of `tokens`. Returns false when it is not stored (disabled, empty, larger than
  // the budget, or already covered by an entry).
  bool insert(std::vector<Token> tokens, std::vector<uint8_t> blob);

  struct Match {
    size_t index = 0;
    size_t n_common = 0;  // common prefix of the entry's tokens and the prompt
  };
  // The entry sharing the longest prefix with `prompt`, if that prefix is longer than `at_least`.
  std::optional<Match> best_for(std::span<const Token> prompt, size_t at_least) const;
  // The entry's state blob (marks it recently used).
  std::span<const uint8_t> blob(size_t index);
  const std::vector<Token>& tokens(size_t index) const { return entries_[index].tokens; }
  void erase(size_t index);

 private:
  struct Entry {
    std::vector<Token> tokens;
    std::vector<uint8_t> blob;
    uint64_t last_used = 0;
  };
  size_t budget_;
  size_t bytes_ = 0;
  uint64_t tick_ = 0;
  std::vector<Entry> entries_;  // few entries: linear scans are fine
};

}  // namespace agentkv::server
