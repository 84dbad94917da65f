// Byte-level BPE merging of one pre-tokenized word, with llama.cpp's merge order: the pair with
// the lowest merge rank first, the leftmost one among equal ranks.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/string_pool.h"

namespace agentkv::tokenizer {

using TokenId = int32_t;

struct BpeScratch {
  struct Symbol {
    int32_t piece;  // id of the text this symbol holds (a token id, or an id past the vocabulary)
    int32_t prev, next;
  };
  struct Candidate {
    int32_t rank, left, right, left_piece, right_piece;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  BpeModel() = default;
  // `texts`: the vocabulary in GGUF form, `ids`: their index; `merges`: "left right" lines
  // (rank = index; the first of duplicate lines wins; lines without a space are ignored).
  BpeModel(const StringPool& texts, const StringIndex& ids, const std::vector<std::string>& merges);

  // Appends the tokens of one word given as raw bytes (the byte-level mapping is applied here).
  // Bytes of a final piece that is not a token are looked up one by one in their GGUF form and
  // dropped when missing, as llama.cpp does.
  void encode_word(std::string_view word, BpeScratch& scratch, std::vector<TokenId>& out) const;

  size_t merge_count() const { return rules_.size(); }
  // The merge lines this model was built from, in rank order, byte for byte (`texts` as above).
  std::vector<std::string> merge_lines(const StringPool& texts) const;
  size_t memory_bytes() const;

 private:
  // One merge "left right" -> result, stored in the range of its left piece.
  struct Rule {
    int32_t right, rank, result;
  };
  const Rule* find_merge(int32_t left, int32_t right) const;
  void emit_piece(int32_t piece, std::vector<TokenId>& out) const;
  std::string_view piece_text(const StringPool& texts, int32_t piece) const;

  int32_t n_vocab_ = 0;
  StringPool extra_pieces_;                       // texts of ids >= n_vocab_
  std::array<int32_t, 256> byte_piece_{};         // piece of each byte's byte-level character
  std::array<TokenId, 256> single_char_token_{};  // token whose text is that one byte, or -1
  // Merge rules grouped by left piece, sorted by right piece: the rules of left piece p are
  // rules_[rule_begin_[p], rule_begin_[p + 1]).
  std::vector<uint32_t> rule_begin_;
  std::vector<Rule> rules_;
  // Lines that are not rules (no space, or a pair already ranked): kept only for merge_lines().
  std::vector<std::pair<int32_t, std::string>> other_lines_;
  size_t n_lines_ = 0;
};

}  // namespace agentkv::tokenizer
