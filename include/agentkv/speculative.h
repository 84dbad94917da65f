// Exact speculative decoding, greedy (issue 51's first part; docs/speculative.md): a draft of k
// tokens is checked by the target in one batch — the token already chosen and the k drafts, with
// logits at every position — and the longest prefix of drafts equal to the target's own greedy
// choice is accepted, plus the target's token after it; the rejected positions leave the memory.
// With batch-invariant numerics (agentkv/numerics.h) the output is bit-for-bit greedy decoding
// one token at a time; with llama.cpp's numerics a batch of k+1 rows may round a near tie the other
// way, as a cached prompt may (the same caveat as llama.cpp's speculative decoding).
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "agentkv/context.h"
#include "agentkv/model_config.h"
#include "agentkv/tokenizer.h"

namespace agentkv {

// Prompt lookup (llama.cpp's n-gram drafts from the context): the tokens that followed the latest
// earlier occurrence of the history's last n tokens, trying n = max_ngram down to min_ngram; at
// most k of them. When fewer follow it (an occurrence near the end: a repeating stretch), the
// lookup continues from the history extended by the drafts so far, so a repeating period drafts k
// tokens. Empty when no such occurrence exists (or k = 0).
std::vector<Token> ngram_draft(std::span<const Token> history, size_t k, size_t max_ngram = 4, size_t min_ngram = 2);

// Drafts one verification takes at most (llama.cpp's ngram-mod drafts 64).
inline constexpr size_t kMaxDraft = 64;
// ... and with a model that has sliding-window layers, whose window memory drops at most 32
// positions from its end in place (memory/window_kv.h kRollback): all of a pass's drafts when none
// is accepted.
inline constexpr size_t kMaxWindowDraft = 32;
// The most drafts one pass may take with this model.
inline size_t max_drafts(const ModelConfig& config) { return config.n_swa > 0 ? kMaxWindowDraft : kMaxDraft; }

struct VerifiedStep {
  // The target's tokens after `next`: the accepted drafts, then the target's own token after them
  // (chosen, not evaluated yet: the next step's `next`).
  std::vector<Token> tokens;
  size_t n_accepted = 0;  // drafts accepted: tokens.size() - 1
};

// One verification pass. seq holds positions [0, pos) and `next` is the target's greedy token at
// pos (not evaluated yet). Evaluates next and the drafts at pos, pos + 1, ... in one batch,
// accepts drafts while each equals the argmax after the one before, and removes the positions of
// the rejected drafts from seq. A hybrid model's recurrent state, which cannot drop a suffix, goes
// back to a snapshot taken before the pass and absorbs next and the accepted drafts again from
// the pass's recorded inputs (their recurrence only, no second pass). agentkv::Error (nothing evaluated) for more
// than max_drafts drafts or a batch that does not fit.
VerifiedStep verify_greedy(Context& ctx, MemorySeqId seq, Token next, std::span<const Token> drafts);

}  // namespace agentkv
