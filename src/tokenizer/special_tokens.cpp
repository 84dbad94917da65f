#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace agentkv::tokenizer {

namespace {

// C isspace in the "C" locale, as llama.cpp strips with.
bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(std::vector<Entry> entries) : entries_(std::move(entries)) {
  trie_.emplace_back();
  for (int32_t e = 0; e < int32_t(entries_.size()); ++e) {
    const std::string& text = entries_[e].text;
    if (text.empty()) continue;
    first_byte_[uint8_t(text[0])] = true;
    int32_t node = 0;
    for (char ch : text) {
      const uint8_t b = uint8_t(ch);
      int32_t next = child(node, b);
      if (next < 0) {
        next = int32_t(trie_.size());
        trie_.emplace_back();
        auto& kids = trie_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t(-1))), {b, next});
      }
      node = next;
    }
    if (trie_[node].entry < 0) trie_[node].entry = e;
  }
}

int32_t SpecialTokenMatcher::child(int32_t node, uint8_t byte) const {
  const auto& kids = trie_[node].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t(-1)));
  return it != kids.end() && it->first == byte ? it->second : -1;
}

void SpecialTokenMatcher::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({0, text.size(), -1});
  if (entries_.empty()) return;

  // Which special texts occur at all (one trie walk per position); only those need a pass.
  std::vector<bool> present(entries_.size(), false);
  size_t n_present = 0;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size(); ++i) {
    if (!first_byte_[s[i]]) continue;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, s[j]);
      if (node < 0) break;
      const int32_t e = trie_[node].entry;
      if (e >= 0 && !present[e]) {
        present[e] = true;
        ++n_present;
      }
    }
  }
  if (n_present == 0) return;

  std::vector<Fragment> next;
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (!present[e] || (!parse_special && entries_[e].parse_only_when_special)) continue;
    const std::string& tok = entries_[e].text;
    next.clear();
    for (const Fragment& f : out) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t cur = f.begin;
      const std::string_view area = text.substr(0, f.end);
      const bool lstrip = entries_[e].lstrip, rstrip = entries_[e].rstrip;
      while (true) {
        const size_t at = area.find(tok, cur);
        if (at == std::string_view::npos) break;
        size_t left_end = at;
        while (lstrip && left_end > cur && is_c_space(text[left_end - 1])) --left_end;
        if (left_end > cur) next.push_back({cur, left_end, -1});
        next.push_back({0, 0, entries_[e].id});
        cur = at + tok.size();
        while (rstrip && cur < f.end && is_c_space(text[cur])) ++cur;
      }
      if (cur < f.end) next.push_back({cur, f.end, -1});
    }
    out.swap(next);
  }
}

}  // namespace agentkv::tokenizer
