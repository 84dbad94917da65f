// Agents' cache, one step beyond llama-server: a chat prompt re-renders the previous answer as
// text, and BPE often tokenizes that text into other tokens than the model generated (a random
// or a constrained model writes "<tool_call>" as "<", "tool", "_call", ">"; "aaaaaa" as six
// "a"), so the cache would stop matching inside the answer. align_to_cache() keeps the tokens a
// slot's cache holds for as long as their text is a prefix of the new prompt's text, and
// tokenizes only the rest: the previous answer is then reused exactly as it was generated.
//
// The prompt's text is unchanged; only where the text after the cached tokens starts may differ
// from a tokenization of the whole text (the model reads the text in the tokens it wrote).
#pragma once
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

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
