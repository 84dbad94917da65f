// Pass-key retrieval cases for `agentkv bench quality` (docs/quality-bench.md, "Pass-key cases").
// The format is shared with the training data of tools/train/: a needle line with a 5-digit key
// hidden in filler text at a random depth, and a question at the very end; the model recalls the
// key when its greedy continuation starts with the key's digits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "agentkv/tokenizer.h"

namespace agentkv::tools {

inline constexpr const char* kPasskeyQuestion = "\nWhat is the pass key? The pass key is";
std::string passkey_needle(int key);  // "The pass key is {K}. Remember it. {K} is the pass key.\n"

struct PasskeyCase {
  int64_t depth = 0;       // the prompt length asked for, in tokens
  int64_t case_index = 0;
  int key = 0;             // 10000..99999
  int64_t needle_at = 0;   // token index of the needle's first token in `prompt`
  int64_t needle_tokens = 0;
  std::vector<Token> prompt;  // filler[0:a] + needle + filler[a:b] + question, `depth` tokens
};

// Builds the filler, needle and question from `text` (the held-out text file's contents) with the
// case RNG std::mt19937_64(seed * 1000003 + depth * 7919 + case_index). Draws, in this order: the
// key, the filler's starting line, the needle's fraction f in [0.05, 0.95] of the filler. The
// filler is the text from that line on (wrapping to the file's start when it runs out), encoded
// and cut to depth - |needle| - |question| tokens. agentkv::Error when the depth leaves no room
// for filler or the text is empty.
class PasskeyCaseBuilder {
 public:
  PasskeyCaseBuilder(const Tokenizer& tokenizer, std::string text);
  PasskeyCase build(int64_t depth, int64_t case_index, uint64_t seed) const;

 private:
  std::vector<Token> filler_from_line(size_t line, int64_t n_tokens) const;
  const Tokenizer& tokenizer_;
  std::string text_;
  std::vector<size_t> line_starts_;
  std::vector<Token> question_;
};

// The spec's recall rule: the greedy continuation, leading whitespace stripped, starts with the
// key's 5 digits.
bool passkey_recalled(const std::string& continuation, int key);
// True once `continuation` decides the case (recalled or not): generation can stop early.
bool passkey_decided(const std::string& continuation, int key);
// Recall per depth (in the order of `depths`) of the answers to `cases` (answers[i] to cases[i]).
std::vector<double> recall_by_depth(const std::vector<PasskeyCase>& cases, const std::vector<std::string>& answers,
                                    const std::vector<long long>& depths);

}  // namespace agentkv::tools
