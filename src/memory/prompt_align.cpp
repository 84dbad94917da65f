#include "memory/prompt_align.h"

#include <string>

namespace agentkv::memory {
namespace {

// How much of `text`, from `off`, token t's text covers when the text continues with it there;
// 0 when it does not (or t has no text).
size_t piece_at(const Tokenizer& tok, std::string_view text, size_t off, Token t) {
  const std::string piece = tok.token_to_piece(t, true);
  return !piece.empty() && text.compare(off, piece.size(), piece) == 0 ? piece.size() : 0;
}

// Whether a leading BOS (one the tokenizer adds) is outside the text: the text does not start
// with its piece.
bool bos_outside_text(const Tokenizer& tok, std::string_view text) {
  const std::string piece = tok.token_to_piece(tok.bos(), true);
  return text.substr(0, piece.size()) != piece;
}

}  // namespace

AlignedPrompt align_to_cache(const Tokenizer& tok, std::string_view text, const std::vector<Token>& plain,
                             const std::vector<std::vector<Token>>& caches) {
  AlignedPrompt best{plain, 0};
  size_t best_reuse = 0;
  // A leading BOS the tokenizer adds is not in the text.
  const bool skip_bos = !plain.empty() && plain[0] == tok.bos() && bos_outside_text(tok, text);
  // Text offsets where the plain tokenization has a token boundary: plain_at[offset] = tokens before it.
  std::vector<int64_t> plain_at(text.size() + 1, -1);
  {
    size_t off = 0, k = skip_bos ? 1 : 0;
    plain_at[0] = static_cast<int64_t>(k);
    for (; k < plain.size(); ++k) {
      off += tok.token_to_piece(plain[k], true).size();
      if (off > text.size()) break;
      plain_at[off] = static_cast<int64_t>(k + 1);
    }
  }
  for (const std::vector<Token>& cache : caches) {
    const size_t plain_common = common_prefix(cache, plain);
    best_reuse = std::max(best_reuse, plain_common);
    size_t i = 0, off = 0;
    if (skip_bos && !cache.empty() && cache[0] == plain[0]) i = 1;
    // The cached tokens whose text is a prefix of the prompt's, cut back to the last point where
    // the plain tokenization has a boundary too: the new text after it keeps the tokens a
    // tokenization of the whole prompt gives it (only the cached part keeps the cache's tokens,
    // e.g. an answer as it was generated), so the prompt is the same whichever cache it meets.
    size_t keep = i, keep_plain = plain_at[0] >= 0 ? static_cast<size_t>(plain_at[0]) : 0;
    for (; i < cache.size(); ++i) {
      const size_t covered = piece_at(tok, text, off, cache[i]);
      if (covered == 0) break;
      off += covered;
      if (plain_at[off] >= 0) keep = i + 1, keep_plain = static_cast<size_t>(plain_at[off]);
    }
    if (keep <= plain_common || keep <= best_reuse) continue;
    std::vector<Token> tokens(cache.begin(), cache.begin() + static_cast<std::ptrdiff_t>(keep));
    tokens.insert(tokens.end(), plain.begin() + static_cast<std::ptrdiff_t>(keep_plain), plain.end());
    best = {std::move(tokens), keep};
    best_reuse = keep;
  }
  return best;
}

PrefixCache::ChainReader text_chain_reader(const Tokenizer& tok, std::string_view text) {
  const bool skip_bos = bos_outside_text(tok, text);
  return [&tok, text, skip_bos](uint64_t offset, std::span<const CacheToken> page) {
    PrefixCache::ChainStep step{0, offset};
    for (CacheToken t : page) {
      if (step.state == 0 && skip_bos && t == tok.bos()) {
        ++step.taken;  // a leading BOS the tokenizer added is not in the text
        continue;
      }
      const size_t covered = piece_at(tok, text, step.state, t);
      if (covered == 0) break;
      step.state += covered;
      ++step.taken;
    }
    return step;
  };
}

}  // namespace agentkv::memory
