#include "server/grammar_run.h"

#include <cmath>

namespace agentkv::server {

std::shared_ptr<grammar::Matcher> MatcherCache::get(const std::shared_ptr<const grammar::Grammar>& g) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->first == g->source) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().second;
    }
  }
  entries_.emplace_front(g->source, std::make_shared<grammar::Matcher>(g));
  if (entries_.size() > capacity_) entries_.pop_back();
  return entries_.front().second;
}

GrammarRun::GrammarRun(std::shared_ptr<grammar::Matcher> m, const grammar::TokenTrie& trie, const GrammarSettings& s)
    : m_(std::move(m)), trie_(trie), settings_(s), pos_(m_->start()), active_(!s.lazy) {}

int32_t GrammarRun::sample(Sampler& sampler, const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                           std::vector<float>& scratch) {
  if (!active_) return sampler.sample(logits, n_vocab, history);
  const int32_t first = sampler.sample(logits, n_vocab, history);
  if (m_->allows(pos_, trie_, first)) return first;
  const std::vector<uint64_t>& bits = m_->mask(pos_, trie_);
  // Sample among the allowed tokens only (the same chain as over a row masked to -inf).
  std::vector<int32_t>& ids = allowed_;
  ids.clear();
  const int64_t n = std::min<int64_t>(n_vocab, trie_.n_vocab());
  for (size_t w = 0; w < bits.size(); ++w) {
    for (uint64_t x = bits[w]; x; x &= x - 1) {
      const int64_t id = static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x)));
      if (id < n && !std::isnan(logits[id]) && logits[id] > -INFINITY) ids.push_back(static_cast<int32_t>(id));
    }
  }
  (void)scratch;
  if (ids.empty()) return -1;
  const int32_t id = sampler.sample_among(logits, ids, history);
  return m_->allows(pos_, trie_, id) ? id : -1;
}

size_t GrammarRun::allowed_run(std::span<const int32_t> tokens) const {
  if (!active_) return tokens.size();
  grammar::Position p = pos_;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!m_->allows(p, trie_, tokens[i])) return i;
    p = m_->accept(p, trie_, tokens[i]);
  }
  return tokens.size();
}

void GrammarRun::accept(int32_t id, const std::string& piece) {
  if (active_) {
    pos_ = m_->accept(pos_, trie_, id);
    return;
  }
  const size_t old_size = text_.size();
  text_ += piece;
  // Where a trigger may start: after the reasoning block when there is one.
  size_t base = 0;
  bool in_think = settings_.think_first;
  if (!in_think) {
    const size_t k = text_.find_first_not_of(" \t\r\n");
    if (k != std::string::npos && text_.compare(k, 7, "<think>") == 0) in_think = true;
  }
  if (in_think) {
    const size_t end = text_.find("</think>");
    if (end == std::string::npos) return;
    base = end + 8;
  }
  size_t best = std::string::npos;
  for (const std::string& t : settings_.triggers) {
    if (!t.empty() && t[0] == '^') {  // only at the answer's start (after a closed think block)
      const std::string_view lit = std::string_view(t).substr(1);
      if (std::string_view(text_).substr(base, lit.size()) == lit) best = std::min(best, base);
      continue;
    }
    const size_t from = std::max(base, old_size >= t.size() ? old_size - t.size() + 1 : 0);
    const size_t at = text_.find(t, from);
    if (at != std::string::npos && at < best) best = at;
  }
  if (best == std::string::npos) return;
  const grammar::Position p = m_->advance(m_->start(), std::string_view(text_).substr(best));
  if (!p.ok()) return;  // the text after the trigger does not fit: stay free (parsed as content)
  pos_ = p;
  active_ = true;
  text_.clear();
}

}  // namespace agentkv::server
