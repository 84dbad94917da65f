#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace agentkv::tokenizer {

BpeModel::BpeModel(const std::vector<std::string>& texts, const std::unordered_map<std::string, TokenId>& ids,
                   const std::vector<std::string>& merges)
    : n_vocab_(int32_t(texts.size())) {
  // Texts that merges produce or consume but that are not tokens get ids past the vocabulary.
  std::unordered_map<std::string, int32_t> extra_ids;
  auto intern = [&](const std::string& text) -> int32_t {
    if (auto it = ids.find(text); it != ids.end()) return it->second;
    if (auto it = extra_ids.find(text); it != extra_ids.end()) return it->second;
    const int32_t id = n_vocab_ + int32_t(extra_pieces_.size());
    extra_pieces_.push_back(text);
    extra_ids.emplace(text, id);
    return id;
  };
  for (int b = 0; b < 256; ++b) {
    byte_piece_[b] = intern(unicode::byte_to_utf8(uint8_t(b)));
    auto it = ids.find(std::string(1, char(b)));
    single_char_token_[b] = it == ids.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    const size_t space = line.find(' ', 1);
    if (space == std::string::npos) continue;
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    const int32_t l = intern(left), r = intern(right);
    if (merges_.count(key(l, r))) continue;
    merges_.emplace(key(l, r), Merge{int32_t(rank), intern(left + right)});
  }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::emit_piece(int32_t piece, std::vector<TokenId>& out) const {
  if (piece < n_vocab_) {
    out.push_back(piece);
    return;
  }
  for (char c : extra_pieces_[piece - n_vocab_]) {
    const TokenId t = single_char_token_[uint8_t(c)];
    if (t >= 0) out.push_back(t);
  }
}

void BpeModel::encode_word(std::string_view word, BpeScratch& s, std::vector<TokenId>& out) const {
  const int32_t n = int32_t(word.size());
  if (n == 0) return;
  if (n == 1) {
    emit_piece(byte_piece_[uint8_t(word[0])], out);
    return;
  }
  auto& sym = s.symbols;
  sym.resize(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_piece_[uint8_t(word[i])], i - 1, i + 1 < n ? i + 1 : -1};

  // Min-heap on (rank, left position).
  auto later = [](const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  auto& heap = s.heap;
  heap.clear();
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    if (const Merge* m = find_merge(sym[left].piece, sym[right].piece)) {
      heap.push_back({m->rank, left, right, sym[left].piece, sym[right].piece});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const BpeScratch::Candidate c = heap.back();
    heap.pop_back();
    // Skip candidates made stale by an earlier merge: a symbol's text only ever grows, so an
    // unchanged piece id means an unchanged symbol.
    if (sym[c.left].piece != c.left_piece || sym[c.left].next != c.right || sym[c.right].piece != c.right_piece)
      continue;
    const Merge* m = find_merge(c.left_piece, c.right_piece);
    BpeScratch::Symbol& left = sym[c.left];
    BpeScratch::Symbol& right = sym[c.right];
    left.piece = m->result;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = c.left;
    right.piece = -1;  // dead
    right.next = right.prev = -1;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) emit_piece(sym[i].piece, out);
}

}  // namespace agentkv::tokenizer
