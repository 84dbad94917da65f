#include "server/prompt_align.h"

#include "server/prompt_cache.h"

namespace agentkv::server {

AlignedPrompt align_to_cache(const Tokenizer& tok, std::string_view text, const std::vector<Token>& plain,
                             const std::vector<std::vector<Token>>& caches) {
  AlignedPrompt best{plain, 0};
  size_t best_reuse = 0;
  for (const std::vector<Token>& cache : caches) {
    const size_t plain_common = common_prefix(cache, plain);
    best_reuse = std::max(best_reuse, plain_common);
    // A leading BOS the tokenizer adds is not in the text.
    size_t i = 0, off = 0;
    if (!plain.empty() && plain[0] == tok.bos() && !cache.empty() && cache[0] == plain[0]) {
      const std::string bos = tok.token_to_piece(plain[0], true);
      if (text.substr(0, bos.size()) != bos) i = 1;
    }
    std::string piece;
    for (; i < cache.size(); ++i) {
      piece = tok.token_to_piece(cache[i], true);
      if (piece.empty() || text.compare(off, piece.size(), piece) != 0) break;
      off += piece.size();
    }
    if (i <= plain_common || i <= best_reuse) continue;
    std::vector<Token> tokens(cache.begin(), cache.begin() + static_cast<std::ptrdiff_t>(i));
    if (off < text.size()) {
      const std::vector<Token> rest = tok.encode(text.substr(off), /*add_special=*/false, /*parse_special=*/true);
      tokens.insert(tokens.end(), rest.begin(), rest.end());
    }
    best = {std::move(tokens), i};
    best_reuse = i;
  }
  return best;
}

}  // namespace agentkv::server
