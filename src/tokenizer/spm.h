// SentencePiece tokenization of a text (tokenizer.ggml.model = "llama": Llama 2, Mistral 7B v0.1,
// Phi-3, Gemma), as llama.cpp's llm_tokenizer_spm does it: start from UTF-8 characters, repeatedly
// merge the adjacent pair whose concatenation is the token of highest score (leftmost among equal
// scores), then spell every piece that is no token as byte tokens <0xXX>. No merge list: the
// vocabulary's scores decide, so the GGUF alone defines the tokenizer.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/string_pool.h"

namespace agentkv::tokenizer {

// Reusable buffers for one encode call.
struct SpmScratch {
  struct Symbol {
    uint32_t begin, size;  // bytes of the text; size 0 once merged into its left neighbour
    int32_t prev, next;
  };
  struct Candidate {
    float score;
    int32_t left, right;
    uint32_t size;  // bytes of both symbols when the candidate was made (stale if they changed)
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class SpmModel {
 public:
  SpmModel() = default;
  // `texts`/`ids`: the vocabulary (SentencePiece form, "▁" for spaces); `scores`: one per token.
  SpmModel(const StringPool& texts, const StringIndex& ids, std::vector<float> scores);

  // Appends the tokens of `text`, whose spaces the caller has already replaced by "▁". A byte
  // without a byte token (<0xXX>, else the one-byte text) is dropped: llama.cpp throws there.
  void encode(std::string_view text, const StringPool& texts, const StringIndex& ids, SpmScratch& scratch,
              std::vector<int32_t>& out) const;

  const std::vector<float>& scores() const { return scores_; }
  size_t memory_bytes() const { return scores_.capacity() * sizeof(float); }

 private:
  void push_candidate(std::string_view text, int32_t left, int32_t right, const StringPool& texts,
                      const StringIndex& ids, SpmScratch& s) const;

  std::vector<float> scores_;
  std::array<int32_t, 256> byte_token_{};  // the token each byte falls back to, or -1
};

}  // namespace agentkv::tokenizer
