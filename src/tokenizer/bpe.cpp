#include "tokenizer/bpe.h"

#include <algorithm>
#include <unordered_map>

#include "tokenizer/unicode.h"

namespace agentkv::tokenizer {

BpeModel::BpeModel(const StringPool& texts, const StringIndex& ids, const std::vector<std::string>& merges)
    : n_vocab_(int32_t(texts.size())), n_lines_(merges.size()) {
  // Texts that merges produce or consume but that are not tokens get ids past the vocabulary.
  StringIndex extra_ids;
  auto intern = [&](std::string_view text) -> int32_t {
    if (const int32_t id = ids.find(texts, text); id >= 0) return id;
    if (const int32_t id = extra_ids.find(extra_pieces_, text); id >= 0) return n_vocab_ + id;
    const uint32_t extra = extra_pieces_.add(text);
    extra_ids.insert(extra_pieces_, extra);
    return n_vocab_ + int32_t(extra);
  };
  for (int b = 0; b < 256; ++b) {
    byte_piece_[b] = intern(unicode::byte_to_utf8(uint8_t(b)));
    const char byte = char(b);
    single_char_token_[b] = ids.find(texts, std::string_view(&byte, 1));
  }

  struct Entry {
    int32_t left, right, rank, result;
  };
  std::vector<Entry> entries;
  entries.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view line = merges[rank];
    const size_t space = line.find(' ', 1);
    if (space == std::string_view::npos) {
      other_lines_.emplace_back(int32_t(rank), std::string(line));
      continue;
    }
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    joined.assign(left).append(right);
    const int32_t l = intern(left), r = intern(right);
    entries.push_back({l, r, int32_t(rank), intern(joined)});
  }
  // Group by left piece, then right piece; among equal pairs the first line (lowest rank) wins.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.left != b.left ? a.left < b.left : a.right != b.right ? a.right < b.right : a.rank < b.rank;
  });
  const size_t n_pieces = size_t(n_vocab_) + extra_pieces_.size();
  rule_begin_.assign(n_pieces + 1, 0);
  rules_.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (i > 0 && entries[i - 1].left == e.left && entries[i - 1].right == e.right) {
      other_lines_.emplace_back(e.rank, merges[size_t(e.rank)]);
      continue;
    }
    rules_.push_back({e.right, e.rank, e.result});
    ++rule_begin_[size_t(e.left) + 1];
  }
  for (size_t p = 0; p < n_pieces; ++p) rule_begin_[p + 1] += rule_begin_[p];
  std::sort(other_lines_.begin(), other_lines_.end());
  extra_pieces_.shrink_to_fit();
  other_lines_.shrink_to_fit();
}

const BpeModel::Rule* BpeModel::find_merge(int32_t left, int32_t right) const {
  const Rule* first = rules_.data() + rule_begin_[size_t(left)];
  const Rule* last = rules_.data() + rule_begin_[size_t(left) + 1];
  if (last - first <= 8) {
    for (const Rule* r = first; r != last; ++r)
      if (r->right == right) return r;
    return nullptr;
  }
  const Rule* it = std::lower_bound(first, last, right, [](const Rule& r, int32_t v) { return r.right < v; });
  return it != last && it->right == right ? it : nullptr;
}

std::string_view BpeModel::piece_text(const StringPool& texts, int32_t piece) const {
  return piece < n_vocab_ ? texts[size_t(piece)] : extra_pieces_[size_t(piece - n_vocab_)];
}

std::vector<std::string> BpeModel::merge_lines(const StringPool& texts) const {
  std::vector<std::string> lines(n_lines_);
  for (size_t left = 0; left + 1 < rule_begin_.size(); ++left)
    for (uint32_t i = rule_begin_[left]; i < rule_begin_[left + 1]; ++i) {
      const Rule& r = rules_[i];
      std::string& line = lines[size_t(r.rank)];
      line.assign(piece_text(texts, int32_t(left))).append(" ").append(piece_text(texts, r.right));
    }
  for (const auto& [rank, line] : other_lines_) lines[size_t(rank)] = line;
  return lines;
}

size_t BpeModel::memory_bytes() const {
  size_t n = extra_pieces_.memory_bytes() + rule_begin_.capacity() * sizeof(uint32_t) + rules_.capacity() * sizeof(Rule);
  for (const auto& l : other_lines_) n += sizeof(l) + l.second.capacity();
  return n;
}

void BpeModel::emit_piece(int32_t piece, std::vector<TokenId>& out) const {
  if (piece < n_vocab_) {
    out.push_back(piece);
    return;
  }
  for (char c : extra_pieces_[size_t(piece - n_vocab_)]) {
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
    if (const Rule* m = find_merge(sym[left].piece, sym[right].piece)) {
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
    const Rule* m = find_merge(c.left_piece, c.right_piece);
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
