// Agents' cache, one step beyond llama-server: a chat prompt re-renders the previous answer as
// text, and BPE often tokenizes that text into other tokens than the model generated (a random
// or a constrained model writes "<tool_call>" as "<", "tool", "_call", ">"; "aaaaaa" as six
// "a"), so the cache would stop matching inside the answer. align_to_cache() keeps the tokens a
// cache holds (a sequence's, with the answer's last, unevaluated token, or a chain of cached pages
// an ended conversation left) for as long as their text is a prefix of the new prompt's text, cut
// back to the last point where the whole prompt's own tokenization has a token boundary too, and
// takes that tokenization's tokens from there: the previous answer is reused exactly as it was
// generated, and the new text is tokenized as it would be without any cache. (Without the cut, a
// cache of another prompt ending inside a word, "chalk" before "chalkboard", split the new word
// differently and changed the answer: the prompt must not depend on which cache it meets.)
#pragma once
#include <span>
#include <string_view>
#include <vector>

#include "agentkv/prefix_cache.h"
#include "agentkv/request_memory.h"
#include "agentkv/tokenizer.h"

namespace agentkv::memory {

// plain: the prompt tokenized as usual. caches: token lists the memory holds. Returns plain
// unless some cache matches more of the prompt's text than plain shares with it.
AlignedPrompt align_to_cache(const Tokenizer& tok, std::string_view text, const std::vector<Token>& plain,
                             const std::vector<std::vector<Token>>& caches);

// Reads cached page chains by text (PrefixCache::follow_chain): takes a page's leading tokens
// while their text continues `text` (its state: the text offset reached). The chain it follows
// is the candidate for align_to_cache that ended conversations leave in the prefix cache.
PrefixCache::ChainReader text_chain_reader(const Tokenizer& tok, std::string_view text);

}  // namespace agentkv::memory
