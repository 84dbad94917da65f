// Byte-level BPE merging of one pre-tokenized word, with llama.cpp's merge order: the pair with
// the lowest merge rank first, the leftmost one among equal ranks.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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
  // `texts`: the vocabulary in GGUF form, `ids`: their lookup; `merges`: "left right" lines
  // (rank = index; the first of duplicate lines wins; lines without a space are ignored).
  BpeModel(const std::vector<std::string>& texts, const std::unordered_map<std::string, TokenId>& ids,
           const std::vector<std::string>& merges);

  // Appends the tokens of one word given as raw bytes (the byte-level mapping is applied here).
  // Bytes of a final piece that is not a token are looked up one by one in their GGUF form and
  // dropped when missing, as llama.cpp does.
  void encode_word(std::string_view word, BpeScratch& scratch, std::vector<TokenId>& out) const;

  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  const Merge* find_merge(int32_t left, int32_t right) const;
  void emit_piece(int32_t piece, std::vector<TokenId>& out) const;

  int32_t n_vocab_ = 0;
  std::vector<std::string> extra_pieces_;           // texts of ids >= n_vocab_
  std::array<int32_t, 256> byte_piece_{};           // piece of each byte's byte-level character
  std::array<TokenId, 256> single_char_token_{};    // token whose text is that one byte, or -1
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace agentkv::tokenizer
