// Splits text around special / added token texts before BPE, like llama.cpp's
// tokenizer_st_partition: tokens are tried longest text first, each claiming its left-to-right
// non-overlapping occurrences in the text not yet claimed (and, for tokens with lstrip / rstrip,
// the whitespace beside them).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::tokenizer {

struct Fragment {
  size_t begin = 0, end = 0;  // byte range of raw text (when token < 0)
  int32_t token = -1;         // a special token, or -1 for raw text
};

class SpecialTokenMatcher {
 public:
  struct Entry {
    int32_t id;
    std::string text;
    bool parse_only_when_special;  // control / unknown tokens: skipped unless parse_special
    // llama.cpp's LSTRIP / RSTRIP attributes: the whitespace before / after a match goes with it.
    bool lstrip = false, rstrip = false;
  };
  SpecialTokenMatcher() = default;
  // `entries` in priority order (longest text first).
  explicit SpecialTokenMatcher(std::vector<Entry> entries);

  void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t entry = -1;
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Entry> entries_;
  std::vector<Node> trie_;
  bool first_byte_[256] = {};
};

}  // namespace agentkv::tokenizer
