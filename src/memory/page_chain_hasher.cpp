#include "memory/page_chain_hasher.h"

#include <algorithm>
#include <stdexcept>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace agentkv::memory {

uint64_t PageChainHasher::root_seed(uint64_t salt) const {
  const uint64_t key[3] = {model_fingerprint_, page_tokens_, salt};
  return XXH3_64bits(key, sizeof key);
}

uint64_t PageChainHasher::page_hash(uint64_t parent_hash, std::span<const int32_t> tokens) const {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent_hash);
}

void PageChainHasher::extend(std::span<const int32_t> tokens, uint64_t salt, std::vector<uint64_t>& hashes) const {
  const size_t P = page_tokens_;
  uint64_t h = hashes.empty() ? root_seed(salt) : hashes.back();
  for (size_t pos = hashes.size() * P; pos + P <= tokens.size(); pos += P) {
    h = page_hash(h, tokens.subspan(pos, P));
    hashes.push_back(h);
  }
}

std::vector<uint64_t> PageChainHasher::prefix_hashes(std::span<const int32_t> tokens, uint64_t salt,
                                                     std::span<const size_t> lengths, std::span<const uint64_t> known) const {
  const size_t P = page_tokens_;
  std::vector<uint64_t> chain(known.begin(), known.begin() + static_cast<std::ptrdiff_t>(std::min(known.size(), tokens.size() / P)));
  extend(tokens, salt, chain);
  const uint64_t seed = root_seed(salt);
  std::vector<uint64_t> out;
  out.reserve(lengths.size());
  for (size_t n : lengths) {
    if (n > tokens.size()) throw std::logic_error("prefix index: prefix_hashes beyond the tokens");
    const size_t full = n / P;
    const uint64_t parent = full == 0 ? seed : chain[full - 1];
    out.push_back(n % P == 0 ? parent : page_hash(parent, tokens.subspan(full * P, n % P)));
  }
  return out;
}

}  // namespace agentkv::memory
