#include "agentkv/draft_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "agentkv/batch.h"
#include "agentkv/error.h"
#include "agentkv/sampling.h"
#include "agentkv/seq_snapshot.h"
#include "agentkv/speculative.h"

namespace agentkv {

namespace {

// llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE and SPEC_VOCAB_CHECK_START_TOKEN_ID: the first ids
// are control tokens some conversions name differently.
constexpr int64_t kMaxVocabDifference = 128;
constexpr int32_t kFirstComparedToken = 5;

// The probability softmax gives the largest logit.
float top_probability(const float* logits, int64_t n, int32_t top) {
  const float max = logits[top];
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
  return static_cast<float>(1.0 / sum);
}

// history[from, end) for seq, logits after the last token only.
void add_history(Batch& b, MemorySeqId seq, std::span<const Token> history, size_t from) {
  for (size_t i = from; i < history.size(); ++i) b.add(history[i], static_cast<MemoryPos>(i), {seq}, i + 1 == history.size());
}

ContextParams draft_context_params(const DraftModelParams& p) {
  ContextParams cp;
  cp.n_ctx = p.n_ctx;
  cp.n_ubatch = p.n_ubatch;
  cp.n_seq_max = std::max<uint32_t>(1, p.n_seq);
  cp.n_threads = p.n_threads;
  cp.kv.type_k = p.type_k;
  cp.kv.type_v = p.type_v;
  return cp;
}

}  // namespace

std::string draft_model_mismatch(const Model& draft, const Model& target) {
  const Tokenizer& d = draft.tokenizer();
  const Tokenizer& t = target.tokenizer();
  if (d.data().model != t.data().model)
    return "the draft model's tokenizer is '" + d.data().model + "', the target's '" + t.data().model + "'";
  if (d.add_bos() != t.add_bos() || (t.add_bos() && d.bos() != t.bos())) return "the models begin a text with different BOS tokens";
  if (d.add_eos() != t.add_eos() || (t.add_eos() && d.eos() != t.eos())) return "the models end a text with different EOS tokens";
  const int64_t nd = d.n_vocab(), nt = t.n_vocab();
  if (std::abs(nd - nt) > kMaxVocabDifference)
    return "vocabularies of " + std::to_string(nd) + " and " + std::to_string(nt) + " tokens (at most " +
           std::to_string(kMaxVocabDifference) + " apart)";
  const std::vector<std::string>& dt = d.data().tokens;
  const std::vector<std::string>& tt = t.data().tokens;
  const size_t n = std::min(dt.size(), tt.size());
  for (size_t i = kFirstComparedToken; i < n; ++i)
    if (dt[i] != tt[i]) return "token " + std::to_string(i) + " is '" + dt[i] + "' in the draft model, '" + tt[i] + "' in the target";
  return {};
}

DraftModel::DraftModel(const Model& draft, const Model& target, const DraftModelParams& params)
    : draft_(draft), target_vocab_(target.n_vocab()), ctx_(draft, draft_context_params(params)),
      held_(std::max<uint32_t>(1, params.n_seq)) {
  const std::string why = draft_model_mismatch(draft, target);
  if (!why.empty()) throw Error("the draft model cannot draft for this model: " + why);
}

DraftModel::~DraftModel() = default;

void DraftModel::forget(MemorySeqId seq) {
  if (seq < 0 || static_cast<size_t>(seq) >= held_.size()) return;
  ctx_.memory().seq_rm(seq, 0, -1);
  held_[static_cast<size_t>(seq)].clear();
}

size_t DraftModel::keep_common(MemorySeqId seq, std::span<const Token> history) {
  std::vector<Token>& held = held_[static_cast<size_t>(seq)];
  size_t common = static_cast<size_t>(std::mismatch(held.begin(), held.end(), history.begin(), history.end()).first - held.begin());
  common = std::min(common, history.size() - 1);  // the last token is evaluated again for its logits
  if (common < held.size() && !ctx_.memory().seq_rm(seq, static_cast<MemoryPos>(common), -1)) {
    // A recurrent state or a window cannot drop that much of its end: the sequence starts over.
    ctx_.memory().seq_rm(seq, 0, -1);
    common = 0;
  }
  held.resize(common);
  return common;
}

bool DraftModel::catch_up(MemorySeqId seq, std::span<const Token> history) {
  Batch b;
  add_history(b, seq, history, keep_common(seq, history));
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (ctx_.decode(b) == 0) {
      held_[static_cast<size_t>(seq)].assign(history.begin(), history.end());
      return true;
    }
    // No room: earlier micro-batches may have stayed, so this sequence starts over, once, with
    // the other sequences' drafting memory dropped (they catch up when they draft next).
    for (size_t other = 0; other < held_.size(); ++other) forget(static_cast<MemorySeqId>(other));
    b.clear();
    add_history(b, seq, history, 0);
  }
  forget(seq);
  return false;
}

std::vector<Token> DraftModel::draft(MemorySeqId seq, std::span<const Token> history, size_t k, float p_min) {
  DraftAsk ask;
  ask.seq = seq;
  ask.history.assign(history.begin(), history.end());
  ask.k = k;
  ask.p_min = p_min;
  draft(std::span<DraftAsk>(&ask, 1));
  return std::move(ask.drafts);
}

void DraftModel::draft(std::span<DraftAsk> asks) {
  std::vector<DraftAsk*> live;  // the asks that draft: a history without image rows, k > 0
  for (DraftAsk& a : asks) {
    if (a.seq < 0 || static_cast<size_t>(a.seq) >= held_.size())
      throw Error("draft model: sequence " + std::to_string(a.seq) + " out of range");
    a.drafts.clear();
    a.k = std::min(a.k, max_drafts(draft_.config()));  // the drafts' positions leave a window in place
    if (a.k == 0 || a.history.empty()) continue;
    if (std::any_of(a.history.begin(), a.history.end(), [](Token t) { return t < 0; })) continue;
    live.push_back(&a);
  }
  if (live.empty()) return;
  // Catching up: several sequences' new tokens in one batch, the last one's logits out (where
  // that finds no room, each drafts alone); one sequence by catch_up (which drops the others'
  // draft memory if it must).
  std::vector<int> output(live.size(), -1);  // each ask's row of logits in the last batch
  Batch b;
  int n_outputs = 0;
  const bool together = live.size() > 1;
  if (together) {
    for (const DraftAsk* a : live) add_history(b, a->seq, a->history, keep_common(a->seq, a->history));
    if (ctx_.decode(b) != 0) {
      // A failed batch may have left parts behind: each starts over, drafting alone.
      for (DraftAsk* a : live) forget(a->seq);
      for (DraftAsk* a : live) draft(std::span<DraftAsk>(a, 1));
      return;
    }
    for (size_t i = 0; i < live.size(); ++i) {
      held_[static_cast<size_t>(live[i]->seq)] = live[i]->history;
      output[i] = static_cast<int>(i);
    }
  }
  // A recurrent state cannot drop the drafts it absorbs: each goes back to this copy afterwards.
  std::vector<std::optional<SeqSnapshot>> before(live.size());
  std::vector<bool> drafting(live.size(), false);
  for (size_t i = 0; i < live.size(); ++i) {
    DraftAsk& a = *live[i];
    if (!together) {  // the one ask: its logits are its catch-up batch's only row
      if (!catch_up(a.seq, a.history)) continue;
      const float* logits = ctx_.last_logits();
      const Token t = argmax_token(logits, draft_.n_vocab());
      if (t >= target_vocab_ || top_probability(logits, draft_.n_vocab(), t) < a.p_min) continue;
      a.drafts.push_back(t);
    }
    if (draft_.config().is_hybrid() && a.k > 1) before[i] = SeqSnapshot::capture(ctx_, a.seq, /*recurrent_only=*/true);
    drafting[i] = true;
  }
  // One batch per draft position over every sequence still drafting.
  const int64_t n_vocab = draft_.n_vocab();
  size_t rounds = 0, n_drafted = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    b.clear();
    n_outputs = 0;
    for (size_t i = 0; i < live.size(); ++i) {
      if (!drafting[i]) continue;
      DraftAsk& a = *live[i];
      if (held_[static_cast<size_t>(a.seq)].size() != a.history.size()) {  // dropped for another's room
        drafting[i] = false;
        continue;
      }
      if (output[i] >= 0) {  // the logits after the last token or draft: the next draft
        const float* logits = ctx_.logits(output[i]);
        const Token t = argmax_token(logits, n_vocab);
        if (t >= target_vocab_ || top_probability(logits, n_vocab, t) < a.p_min) {
          drafting[i] = false;
          continue;
        }
        a.drafts.push_back(t);
      }
      if (a.drafts.empty() || a.drafts.size() >= a.k) {
        drafting[i] = false;
        continue;
      }
      output[i] = n_outputs++;
      b.add(a.drafts.back(), static_cast<MemoryPos>(a.history.size() + a.drafts.size() - 1), {a.seq}, true);
    }
    if (b.size() == 0) break;
    ++rounds;
    if (ctx_.decode(b) != 0) {
      // No room for the drafts' rows (a batch of one micro-batch: nothing stayed): the draft memory
      // of the sequences not drafting now goes, once (they catch up when they draft next); still
      // none, the drafts so far stand.
      bool freed = false;
      for (size_t other = 0; other < held_.size(); ++other) {
        const bool asking = std::any_of(live.begin(), live.end(), [&](const DraftAsk* a) { return a->seq == static_cast<MemorySeqId>(other); });
        if (asking || held_[other].empty()) continue;
        forget(static_cast<MemorySeqId>(other));
        freed = true;
      }
      if (!freed || ctx_.decode(b) != 0) break;
    }
  }
  // The draft memory goes back to holding each history alone.
  for (size_t i = 0; i < live.size(); ++i) {
    DraftAsk& a = *live[i];
    n_drafted += a.drafts.size();
    const MemoryPos end = static_cast<MemoryPos>(a.history.size());
    if (held_[static_cast<size_t>(a.seq)].size() != a.history.size()) continue;  // caught up nothing
    if (before[i]) {
      before[i]->restore(ctx_, a.seq);
      ctx_.memory().seq_rm(a.seq, end, -1);
    } else if (!ctx_.memory().seq_rm(a.seq, end, -1)) {
      forget(a.seq);
    }
  }
  if (n_drafted > 0) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                      static_cast<double>(std::max<size_t>(rounds, 1));
    ms_per_draft_ = ms_per_draft_ > 0.0 ? 0.8 * ms_per_draft_ + 0.2 * ms : ms;
  }
}

}  // namespace agentkv
