#include "tools/quality_passkey.h"

#include <algorithm>

#include <cctype>
#include <cmath>
#include <random>

#include "agentkv/error.h"

namespace agentkv::tools {

std::string passkey_needle(int key) {
  const std::string k = std::to_string(key);
  return "The pass key is " + k + ". Remember it. " + k + " is the pass key.\n";
}

PasskeyCaseBuilder::PasskeyCaseBuilder(const Tokenizer& tokenizer, std::string text)
    : tokenizer_(tokenizer), text_(std::move(text)) {
  if (text_.empty()) throw Error("pass-key cases: the text file is empty");
  line_starts_.push_back(0);
  for (size_t i = 0; i + 1 < text_.size(); ++i)
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
  question_ = tokenizer_.encode(kPasskeyQuestion, /*add_special=*/false, /*parse_special=*/false);
}

std::vector<Token> PasskeyCaseBuilder::filler_from_line(size_t line, int64_t n_tokens) const {
  // Encode a generous piece of text and keep its first n_tokens: the cut then falls well inside
  // the piece, where the tokenization no longer depends on where the piece ends.
  size_t n_bytes = static_cast<size_t>(n_tokens) * 8 + 256;
  for (;;) {
    std::string piece = text_.substr(line_starts_[line]);
    while (piece.size() < n_bytes) piece += text_;  // wrap to the file's start
    size_t end = n_bytes;
    while (end > 0 && (static_cast<unsigned char>(piece[end]) & 0xC0) == 0x80) --end;  // whole UTF-8 chars
    piece.resize(end);
    std::vector<Token> toks = tokenizer_.encode(piece, /*add_special=*/false, /*parse_special=*/false);
    if (static_cast<int64_t>(toks.size()) > n_tokens + 16) {
      toks.resize(static_cast<size_t>(n_tokens));
      return toks;
    }
    n_bytes *= 2;
  }
}

PasskeyCase PasskeyCaseBuilder::build(int64_t depth, int64_t case_index, uint64_t seed) const {
  std::mt19937_64 rng(seed * 1000003ull + static_cast<uint64_t>(depth) * 7919ull + static_cast<uint64_t>(case_index));
  PasskeyCase c;
  c.depth = depth;
  c.case_index = case_index;
  c.key = std::uniform_int_distribution<int>(10000, 99999)(rng);
  const size_t line = std::uniform_int_distribution<size_t>(0, line_starts_.size() - 1)(rng);
  const double fraction = std::uniform_real_distribution<double>(0.05, 0.95)(rng);

  const std::vector<Token> needle =
      tokenizer_.encode(passkey_needle(c.key), /*add_special=*/false, /*parse_special=*/false);
  const int64_t n_filler = depth - static_cast<int64_t>(needle.size() + question_.size());
  if (n_filler < 1)
    throw Error("pass-key depth " + std::to_string(depth) + " leaves no room for filler (the needle and question take " +
                std::to_string(needle.size() + question_.size()) + " tokens)");
  const std::vector<Token> filler = filler_from_line(line, n_filler);
  const auto a = static_cast<int64_t>(std::llround(fraction * static_cast<double>(n_filler)));

  c.prompt.reserve(static_cast<size_t>(depth));
  c.prompt.insert(c.prompt.end(), filler.begin(), filler.begin() + a);
  c.needle_at = a;
  c.needle_tokens = static_cast<int64_t>(needle.size());
  c.prompt.insert(c.prompt.end(), needle.begin(), needle.end());
  c.prompt.insert(c.prompt.end(), filler.begin() + a, filler.end());
  c.prompt.insert(c.prompt.end(), question_.begin(), question_.end());
  return c;
}

namespace {
std::string without_leading_space(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}
}  // namespace

bool passkey_recalled(const std::string& continuation, int key) {
  return without_leading_space(continuation).rfind(std::to_string(key), 0) == 0;
}

bool passkey_decided(const std::string& continuation, int key) {
  const std::string digits = std::to_string(key);
  const std::string got = without_leading_space(continuation);
  // Decided once the answer is long enough to compare, or already differs from the key.
  return got.size() >= digits.size() || digits.compare(0, got.size(), got) != 0;
}

// Recall per depth (in the order of `depths`) of the answers to `cases`.
std::vector<double> recall_by_depth(const std::vector<PasskeyCase>& cases, const std::vector<std::string>& answers,
                                    const std::vector<long long>& depths) {
  std::vector<double> recalled(depths.size(), 0), total(depths.size(), 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const size_t d = std::find(depths.begin(), depths.end(), cases[i].depth) - depths.begin();
    recalled[d] += passkey_recalled(answers[i], cases[i].key);
    total[d] += 1;
  }
  for (size_t d = 0; d < depths.size(); ++d) recalled[d] = total[d] > 0 ? recalled[d] / total[d] : 0;
  return recalled;
}

}  // namespace agentkv::tools
