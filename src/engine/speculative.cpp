#include "agentkv/speculative.h"

#include <algorithm>
#include <optional>
#include <string>

#include "agentkv/batch.h"
#include "agentkv/error.h"
#include "agentkv/sampling.h"
#include "agentkv/seq_snapshot.h"
#include "engine/recurrent_pass.h"
#include "agentkv/token_match.h"

namespace agentkv {

namespace {

// One lookup: the tokens after the latest earlier occurrence of the history's last n tokens
// (n = max_ngram down to min_ngram), at most k.
std::vector<Token> lookup_once(std::span<const Token> history, size_t k, size_t max_ngram, size_t min_ngram) {
  const size_t len = history.size();
  for (size_t n = std::min(max_ngram, len > 0 ? len - 1 : 0); n >= min_ngram && n > 0; --n) {
    // The latest earlier occurrence of the last n tokens: something follows it.
    const std::optional<size_t> from = after_latest_occurrence(history, history.last(n));
    if (!from) continue;
    const size_t count = std::min(k, len - *from);
    return std::vector<Token>(history.begin() + static_cast<std::ptrdiff_t>(*from),
                              history.begin() + static_cast<std::ptrdiff_t>(*from + count));
  }
  return {};
}

}  // namespace

std::vector<Token> ngram_draft(std::span<const Token> history, size_t k, size_t max_ngram, size_t min_ngram) {
  if (k == 0 || min_ngram == 0) return {};
  std::vector<Token> drafts = lookup_once(history, k, max_ngram, min_ngram);
  if (drafts.empty() || drafts.size() == k) return drafts;
  // The occurrence was close to the end (a repeating stretch): the drafts continue the history, and
  // the lookup goes on from them, so that a period shorter than k drafts k tokens.
  std::vector<Token> extended(history.begin(), history.end());
  extended.insert(extended.end(), drafts.begin(), drafts.end());
  while (drafts.size() < k) {
    const std::vector<Token> more = lookup_once(extended, k - drafts.size(), max_ngram, min_ngram);
    if (more.empty()) break;
    drafts.insert(drafts.end(), more.begin(), more.end());
    extended.insert(extended.end(), more.begin(), more.end());
  }
  return drafts;
}

VerifiedStep verify_greedy(Context& ctx, MemorySeqId seq, Token next, std::span<const Token> drafts) {
  const size_t most = max_drafts(ctx.model().config());
  if (drafts.size() > most)
    throw Error("speculative decoding: " + std::to_string(drafts.size()) + " drafts (at most " + std::to_string(most) + ")");
  const MemoryPos pos = ctx.memory().seq_pos_max(seq) + 1;
  // A recurrent state cannot drop the rejected drafts: it goes back to its state before the pass
  // and replays the accepted tokens from the pass's recorded inputs (engine/recurrent_pass.h). (A
  // sliding-window part drops up to 32 positions in place.)
  const bool recurrent = ctx.model().config().is_hybrid();
  std::optional<SeqSnapshot> before;
  if (recurrent && !drafts.empty()) before = begin_recurrent_pass(ctx, seq);
  Batch b;
  b.add(next, pos, {seq}, true);
  for (size_t i = 0; i < drafts.size(); ++i) b.add(drafts[i], pos + 1 + static_cast<MemoryPos>(i), {seq}, true);
  if (ctx.decode(b) != 0) {
    if (before) end_recurrent_pass(ctx, seq, *before, 0);
    throw Error("speculative decoding: the batch of " + std::to_string(b.size()) + " tokens does not fit in the memory");
  }
  const int64_t n_vocab = ctx.model().n_vocab();
  // The target's choice after next and after each draft; drafts count while they agree with it.
  VerifiedStep step;
  size_t i = 0;
  for (;; ++i) {
    step.tokens.push_back(argmax_token(ctx.logits(static_cast<int>(i)), n_vocab));
    if (i == drafts.size() || step.tokens.back() != drafts[i]) break;
  }
  step.n_accepted = i;
  // next and the accepted drafts stay; the rejected drafts' positions go.
  const MemoryPos keep_end = pos + 1 + static_cast<MemoryPos>(i);
  if (before && !end_recurrent_pass(ctx, seq, *before, 1 + i)) {
    // The tape could not replay them: the state is back before `next`, which and the accepted
    // drafts are evaluated again (their logits are known).
    ctx.memory().seq_rm(seq, pos, -1);
    b.clear();
    b.add(next, pos, {seq}, false);
    for (size_t j = 0; j < i; ++j) b.add(drafts[j], pos + 1 + static_cast<MemoryPos>(j), {seq}, false);
    if (ctx.decode(b) != 0) throw Error("speculative decoding: the accepted tokens no longer fit in the memory");
  } else if (i < drafts.size() && !ctx.memory().seq_rm(seq, keep_end, -1)) {
    throw Error("speculative decoding: the memory cannot drop the rejected drafts");
  }
  return step;
}

}  // namespace agentkv
