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

bool DraftModel::catch_up(MemorySeqId seq, std::span<const Token> history) {
  std::vector<Token>& held = held_[static_cast<size_t>(seq)];
  size_t common = static_cast<size_t>(std::mismatch(held.begin(), held.end(), history.begin(), history.end()).first - held.begin());
  common = std::min(common, history.size() - 1);  // the last token is evaluated again for its logits
  if (common < held.size() && !ctx_.memory().seq_rm(seq, static_cast<MemoryPos>(common), -1)) {
    // A recurrent state or a window cannot drop that much of its end: the sequence starts over.
    ctx_.memory().seq_rm(seq, 0, -1);
    common = 0;
  }
  held.resize(common);
  Batch b;
  for (size_t i = common; i < history.size(); ++i) b.add(history[i], static_cast<MemoryPos>(i), {seq}, i + 1 == history.size());
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (ctx_.decode(b) == 0) {
      held.assign(history.begin(), history.end());
      return true;
    }
    // No room: earlier micro-batches may have stayed, so this sequence starts over, once, with
    // the other sequences' drafting memory dropped (they catch up when they draft next).
    for (size_t other = 0; other < held_.size(); ++other) forget(static_cast<MemorySeqId>(other));
    b.clear();
    for (size_t i = 0; i < history.size(); ++i) b.add(history[i], static_cast<MemoryPos>(i), {seq}, i + 1 == history.size());
  }
  forget(seq);
  return false;
}

std::vector<Token> DraftModel::draft(MemorySeqId seq, std::span<const Token> history, size_t k, float p_min) {
  if (seq < 0 || static_cast<size_t>(seq) >= held_.size())
    throw Error("draft model: sequence " + std::to_string(seq) + " out of range");
  k = std::min(k, max_drafts(draft_.config()));  // the drafts' positions leave a window in place
  if (k == 0 || history.empty()) return {};
  if (std::any_of(history.begin(), history.end(), [](Token t) { return t < 0; })) return {};
  if (!catch_up(seq, history)) return {};
  const auto t0 = std::chrono::steady_clock::now();
  // A recurrent state cannot drop the drafts it absorbs: it goes back to this copy afterwards.
  std::optional<SeqSnapshot> before;
  if (draft_.config().is_hybrid() && k > 1) before = SeqSnapshot::capture(ctx_, seq, /*recurrent_only=*/true);
  const int64_t n_vocab = draft_.n_vocab();
  const MemoryPos end = static_cast<MemoryPos>(history.size());
  std::vector<Token> drafts;
  Batch b;
  while (drafts.size() < k) {
    const float* logits = ctx_.last_logits();
    const Token t = argmax_token(logits, n_vocab);
    if (t >= target_vocab_ || top_probability(logits, n_vocab, t) < p_min) break;
    drafts.push_back(t);
    if (drafts.size() == k) break;
    b.clear();
    b.add(t, end + static_cast<MemoryPos>(drafts.size()) - 1, {seq}, true);
    if (ctx_.decode(b) != 0) break;
  }
  // The draft memory goes back to holding the history alone.
  if (before) {
    before->restore(ctx_, seq);
    ctx_.memory().seq_rm(seq, end, -1);
  } else if (!ctx_.memory().seq_rm(seq, end, -1)) {
    forget(seq);
  }
  if (!drafts.empty()) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                      static_cast<double>(drafts.size());
    ms_per_draft_ = ms_per_draft_ > 0.0 ? 0.8 * ms_per_draft_ + 0.2 * ms : ms;
  }
  return drafts;
}

}  // namespace agentkv
