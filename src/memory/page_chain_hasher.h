// The names of content-addressed pages (prefix_index.h): a chain's root seed from the model, the
// KV types and a cache salt; each full page's hash from its parent's and its tokens; a partial
// last page's from its parent's and the tokens it holds. Computed once per token sequence and
// carried (agentkv::PageHashes): what a tier names its records by, and what a state file lists.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace agentkv::memory {

class PageChainHasher {
 public:
  // model_fingerprint names the model, the KV types and rotation together; page_tokens >= 1.
  PageChainHasher(uint64_t model_fingerprint, size_t page_tokens)
      : model_fingerprint_(model_fingerprint), page_tokens_(page_tokens) {}

  uint64_t root_seed(uint64_t salt) const;
  uint64_t page_hash(uint64_t parent_hash, std::span<const int32_t> tokens) const;
  // Extends `hashes` (the chained hashes of the first full pages of `tokens`, maybe none) to every
  // full page of `tokens`, first page first: a state file's page chain, and what the index's
  // calls take as `known`.
  void extend(std::span<const int32_t> tokens, uint64_t salt, std::vector<uint64_t>& hashes) const;
  // The content hash of each leading part tokens[0, n) for n in `lengths`: the chain hash of its
  // full pages, extended by the hash of its partial last page when n is not a multiple of P (the
  // root's seed for n = 0). A tail record and a snapshot at position n are named by it in a tier.
  std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens, uint64_t salt, std::span<const size_t> lengths,
                                      std::span<const uint64_t> known = {}) const;

 private:
  uint64_t model_fingerprint_;
  size_t page_tokens_;
};

}  // namespace agentkv::memory
