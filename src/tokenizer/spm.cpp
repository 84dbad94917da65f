#include "tokenizer/spm.h"

#include <algorithm>
#include <string>

namespace agentkv::tokenizer {

namespace {

// llama.cpp's unicode_len_utf8: the length a lead byte announces, from its top four bits alone
// (a stray continuation byte counts as one character; nothing is validated).
size_t utf8_length_from_lead(uint8_t lead) {
  static constexpr uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[lead >> 4];
}

// The heap's order: highest score on top, the leftmost pair among equal scores (llm_bigram_spm).
bool ranks_below(const SpmScratch::Candidate& a, const SpmScratch::Candidate& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}

}  // namespace

SpmModel::SpmModel(const StringPool& texts, const StringIndex& ids, std::vector<float> scores)
    : scores_(std::move(scores)) {
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char byte_text[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    int32_t id = ids.find(texts, std::string_view(byte_text, 6));
    if (id < 0) {  // llama.cpp falls back to the byte itself as a text
      const char single = char(b);
      id = ids.find(texts, std::string_view(&single, 1));
    }
    byte_token_[b] = id;
  }
}

void SpmModel::push_candidate(std::string_view text, int32_t left, int32_t right, const StringPool& texts,
                              const StringIndex& ids, SpmScratch& s) const {
  if (left < 0 || right < 0) return;
  const auto& l = s.symbols[left];
  const uint32_t size = l.size + s.symbols[right].size;
  const int32_t token = ids.find(texts, text.substr(l.begin, size));
  if (token < 0) return;
  const float score = size_t(token) < scores_.size() ? scores_[token] : 0.0f;
  s.heap.push_back({score, left, right, size});
  std::push_heap(s.heap.begin(), s.heap.end(), ranks_below);
}

void SpmModel::encode(std::string_view text, const StringPool& texts, const StringIndex& ids, SpmScratch& s,
                      std::vector<int32_t>& out) const {
  if (text.empty()) return;
  auto& symbols = s.symbols;
  symbols.clear();
  s.heap.clear();
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(utf8_length_from_lead(uint8_t(text[offset])), text.size() - offset);
    const auto index = int32_t(symbols.size());
    offset += len;
    symbols.push_back({uint32_t(offset - len), uint32_t(len), index - 1, offset == text.size() ? -1 : index + 1});
  }
  for (int32_t i = 1; i < int32_t(symbols.size()); ++i) push_candidate(text, i - 1, i, texts, ids, s);

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), ranks_below);
    const SpmScratch::Candidate c = s.heap.back();
    s.heap.pop_back();
    auto& left = symbols[c.left];
    auto& right = symbols[c.right];
    // Sizes only grow, so a pair either of whose symbols changed since no longer adds up.
    if (left.size == 0 || right.size == 0 || left.size + right.size != c.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    push_candidate(text, left.prev, c.left, texts, ids, s);
    push_candidate(text, c.left, left.next, texts, ids, s);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const auto& sym = symbols[i];
    const std::string_view piece = text.substr(sym.begin, sym.size);
    if (const int32_t token = ids.find(texts, piece); token >= 0) {
      out.push_back(token);
      continue;
    }
    // Only a single character that is no token gets here (every merge made a token).
    for (char byte : piece)
      if (const int32_t token = byte_token_[uint8_t(byte)]; token >= 0) out.push_back(token);
  }
}

}  // namespace agentkv::tokenizer
