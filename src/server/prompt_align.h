// Agents' cache, one step beyond llama-server: a chat prompt re-renders the previous answer as
// text, and BPE often tokenizes that text into other tokens than the model generated (a random
// or a constrained model writes "<tool_call>" as "<", "tool", "_call", ">"; "aaaaaa" as six
// "a"), so the cache would stop matching inside the answer. align_to_cache() keeps the tokens a
// slot's cache holds (with the answer's last, unevaluated token) for as long as their text is a
// prefix of the new prompt's text, cut back to the last point where the whole prompt's own
// tokenization has a token boundary too, and takes that tokenization's tokens from there: the
// previous answer is reused exactly as it was generated, and the new text is tokenized as it
// would be without any cache. (Without the cut, a cache of another prompt ending inside a word,
// "chalk" before "chalkboard", split the new word differently and changed the answer: the prompt
// must not depend on which cache it meets.)
#pragma once
#include <span>
#include <string_view>
#include <vector>

#include "agentkv/tokenizer.h"

namespace agentkv::server {

struct AlignedPrompt {
  std::vector<Token> tokens;
  size_t n_from_cache = 0;  // leading tokens taken from a cache (0: `plain` is returned as is)
};

// plain: the prompt tokenized as usual (tokenize_prompt). caches: the slots' cached tokens.
// Returns plain unless some cache matches more of the prompt's text than plain shares with it.
AlignedPrompt align_to_cache(const Tokenizer& tok, std::string_view text, const std::vector<Token>& plain,
                             const std::vector<std::vector<Token>>& caches);

}  // namespace agentkv::server
