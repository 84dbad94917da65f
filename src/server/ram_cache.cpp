#include "server/ram_cache.h"

#include <algorithm>

#include "server/prompt_cache.h"

namespace agentkv::server {

namespace {
bool is_prefix(std::span<const Token> a, std::span<const Token> b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}
}  // namespace

bool RamPromptCache::insert(std::vector<Token> tokens, std::vector<uint8_t> blob) {
  if (!enabled() || tokens.empty() || blob.size() > budget_) return false;
  for (const Entry& e : entries_)
    if (is_prefix(tokens, e.tokens)) return false;  // an entry already covers it
  for (size_t i = entries_.size(); i-- > 0;)
    if (is_prefix(entries_[i].tokens, tokens)) erase(i);
  while (bytes_ + blob.size() > budget_ && !entries_.empty()) {
    const auto lru = std::min_element(entries_.begin(), entries_.end(),
                                      [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
    erase(static_cast<size_t>(lru - entries_.begin()));
  }
  bytes_ += blob.size();
  entries_.push_back({std::move(tokens), std::move(blob), ++tick_});
  return true;
}

std::optional<RamPromptCache::Match> RamPromptCache::best_for(std::span<const Token> prompt, size_t at_least) const {
  std::optional<Match> best;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const size_t n = common_prefix(entries_[i].tokens, prompt);
    if (n > at_least && (!best || n > best->n_common)) best = Match{i, n};
  }
  return best;
}

std::span<const uint8_t> RamPromptCache::blob(size_t index) {
  entries_[index].last_used = ++tick_;
  return entries_[index].blob;
}

void RamPromptCache::erase(size_t index) {
  bytes_ -= entries_[index].blob.size();
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
}

}  // namespace agentkv::server
