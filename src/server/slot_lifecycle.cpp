// A slot from its first logits to its release: sampling and streaming each token, context shift,
// the final answer, and giving its sequence back to the memory as cache.
#include "server/scheduler.h"

#include <algorithm>

#include "agentkv/error.h"
#include "agentkv/session_state.h"
#include "server/logprobs.h"
#include "server/server_log.h"

namespace agentkv::server {

Timings Scheduler::timings_of(const Slot& slot, Slot::Clock::time_point now) const {
  Timings t;
  t.cache_n = static_cast<int64_t>(slot.n_cache_reused);
  t.prompt_n = static_cast<int64_t>(slot.n_prompt_done - slot.n_cache_reused);
  t.predicted_n = slot.n_decoded;
  t.draft_n = slot.n_drafted;
  t.draft_n_accepted = slot.n_drafts_accepted;
  if (slot.state == SlotState::Prompt) {
    t.prompt_ms = ms_between(slot.t_start, now);
  } else {
    t.prompt_ms = ms_between(slot.t_start, slot.t_first_token);
    t.predicted_ms = ms_between(slot.t_first_token, now);
  }
  return t;
}

void Scheduler::on_logits(Slot& slot, const float* logits, bool from_cache) {
  const CompletionParams& p = slot.task->params;
  const auto now = Slot::Clock::now();
  const size_t n_vocab = static_cast<size_t>(ctx_.model().n_vocab());
  if (slot.state == SlotState::Prompt) {
    slot.state = SlotState::Generating;
    if (!from_cache) memory_->keep_logits(slot.id, {logits, n_vocab});
    slot.t_first_token = now;
    metrics_.prompt_tokens_total += slot.n_prompt_done - slot.n_cache_reused;
    metrics_.prompt_ms_total += ms_between(slot.t_start, now);
    if (p.n_predict == 0) {  // only fill the cache
      finish(slot, StopType::Limit);
      return;
    }
  }

  const float* to_sample = logits;
  if (!p.logit_bias.empty()) {
    // A copy: the saved logits stay the model's own, so a later request applies its own bias.
    slot.biased_logits.assign(logits, logits + n_vocab);
    for (const auto& [token, bias] : p.logit_bias) slot.biased_logits[static_cast<size_t>(token)] += bias;
    to_sample = slot.biased_logits.data();
  }
  // A spent reasoning budget writes the block's end instead of sampling (while the grammar agrees).
  Token id = slot.reasoning ? slot.reasoning->forced() : -1;
  if (id >= 0 && slot.grammar && !slot.grammar->allows(id)) {
    slot.reasoning->abandon();
    id = -1;
  }
  if (id < 0 && slot.grammar) {
    id = slot.grammar->sample(*slot.sampler, to_sample, ctx_.model().n_vocab(), cached(slot), slot.grammar_logits);
    if (id < 0) {
      log_line("slot %d: the grammar allows no token here: generation ends", slot.id);
      finish(slot, StopType::Eos);
      return;
    }
  } else if (id < 0) {
    id = slot.sampler->sample(to_sample, ctx_.model().n_vocab(), cached(slot));
  }
  ++slot.n_decoded;
  slot.pending = id;
  if (slot.reasoning) slot.reasoning->accept(id, tok_.token_to_piece(id, /*special=*/true));
  if ((p.with_logprobs || p.n_probs > 0) && !tok_.is_eog(id))
    slot.probs.push_back(p.post_sampling_probs
                             ? post_sampling_token_probs(tok_, slot.sampler->last_distribution(), id, p.n_probs)
                             : token_probs(tok_, to_sample, ctx_.model().n_vocab(), id, p.n_probs));

  StopType stop = StopType::None;
  bool truncated = false;
  std::string text;
  if (tok_.is_eog(id)) {
    stop = StopType::Eos;
  } else {
    const bool kept = std::binary_search(p.kept_control_tokens.begin(), p.kept_control_tokens.end(), id);
    const std::string piece = tok_.token_to_piece(id, /*special=*/kept);
    if (slot.grammar) slot.grammar->accept(id, piece);
    if (piece.find('\n') != std::string::npos) slot.has_new_line = true;
    if (p.return_tokens) slot.generated_tokens.push_back(id);
    StopChecker::Step step = slot.stop_checker->push(piece);
    text = std::move(step.text);
    if (step.stopped) stop = StopType::Word;
  }
  if (stop == StopType::None && p.n_predict >= 0 && slot.n_decoded >= p.n_predict) stop = StopType::Limit;
  // --kv-budget shifts before the context is full; the context's end always does.
  const bool over_budget = cfg_.context_shift && cfg_.kv_budget > 0 && cached(slot).size() + 1 >= cfg_.kv_budget;
  if (stop == StopType::None && over_budget && cached(slot).size() + 1 < cfg_.n_ctx) shift_context(slot);
  if (stop == StopType::None && cached(slot).size() + 1 >= cfg_.n_ctx && !(cfg_.context_shift && shift_context(slot))) {
    stop = StopType::Limit;  // the next token would not fit: llama-server's "truncated"
    truncated = true;
  }
  if (stop != StopType::None && stop != StopType::Word) text += slot.stop_checker->flush();
  // The logits after the last cached token: a later prompt equal to the cache needs no evaluation.
  if (stop != StopType::None && slot.n_decoded > 1) memory_->keep_logits(slot.id, {logits, n_vocab});
  slot.generated_text += text;

  if (p.stream && !text.empty()) {
    TokenEvent ev;
    ev.text = text;
    ev.tokens.assign(slot.generated_tokens.begin() + static_cast<std::ptrdiff_t>(slot.tokens_sent), slot.generated_tokens.end());
    slot.tokens_sent = slot.generated_tokens.size();
    ev.n_decoded = slot.n_decoded;
    ev.id_slot = slot.id;
    ev.n_prompt = static_cast<int32_t>(slot.task->prompt.size());
    if (p.timings_per_token) ev.timings = timings_of(slot, now);
    ev.probs.assign(slot.probs.begin() + static_cast<std::ptrdiff_t>(slot.probs_sent), slot.probs.end());
    slot.probs_sent = slot.probs.size();
    slot.task->channel->push({TaskEvent::Kind::Token, std::move(ev), {}, std::nullopt});
  }
  if (stop != StopType::None) finish(slot, stop, truncated);
}

void Scheduler::send_progress(Slot& slot) {
  const CompletionParams& p = slot.task->params;
  if (!p.stream || !p.return_progress) return;
  TokenEvent ev;
  ev.id_slot = slot.id;
  ev.n_prompt = static_cast<int32_t>(slot.task->prompt.size());
  ev.progress = PromptProgress{static_cast<int64_t>(slot.task->prompt.size()), static_cast<int64_t>(slot.n_cache_reused),
                               static_cast<int64_t>(slot.n_prompt_done), ms_between(slot.t_start, Slot::Clock::now())};
  slot.task->channel->push({TaskEvent::Kind::Token, std::move(ev), {}, std::nullopt});
}

bool Scheduler::shift_context(Slot& slot) {
  // llama-server's rule for how much: keep n_keep tokens (+ BOS), drop n_discard (default half of
  // the rest); which ones is the policy's (agentkv/retention.h): the oldest after n_keep for
  // positional, the least worth keeping for the scoring ones. The gaps close and the memory
  // re-rotates the moved keys before the next pass.
  const CompletionParams& p = slot.task->params;
  const EvictPolicy policy = p.kv_evict.empty() ? cfg_.kv_evict : *parse_evict_policy(p.kv_evict);
  const int n_past = static_cast<int>(cached(slot).size());
  int n_keep = p.n_keep < 0 ? static_cast<int>(slot.task->prompt.size()) : p.n_keep;
  if (tok_.add_bos()) n_keep += 1;
  n_keep = std::min(static_cast<int>(cfg_.n_ctx) - 4, n_keep);
  const int n_left = n_past - n_keep;
  const int n_discard = std::clamp(p.n_discard ? p.n_discard : n_left / 2, 0, std::max(0, n_left - 1));
  if (n_discard == 0) return false;
  EvictionRequest req;
  req.seq = slot.id;
  req.n_past = n_past;
  req.n_keep = n_keep;
  req.n_discard = n_discard;
  req.n_recent = static_cast<int>(kSnapKvWindow);  // the scoring policies keep the newest tokens whole
  req.policy = policy;
  ctx_.apply_pending_shift();  // scores read the keys at their current positions
  std::vector<MemoryPos> dropped;
  try {
    dropped = choose_evictions(ctx_, req);
  } catch (const Error& e) {  // a sequence the scores cannot read (never expected): the positional rule
    log_line("slot %d: %s: context shift falls back to positional", slot.id, e.what());
    req.policy = EvictPolicy::Positional;
    dropped = choose_evictions(ctx_, req);
  }
  if (dropped.empty()) return false;
  const bool observed = ctx_.queries_recorded(slot.id) > 0;
  log_line("slot %d: context shift (%s%s): n_keep %d, n_left %d, n_discard %zu, dropped positions %d..%d", slot.id,
           evict_policy_name(req.policy), req.policy == EvictPolicy::SnapKV && !observed ? ", no recorded queries: keydiff scores" : "",
           n_keep, n_left, dropped.size(), dropped.front(), dropped.back());
  evict_positions(ctx_, slot.id, dropped, n_past);
  std::vector<Token> tokens(cached(slot).begin(), cached(slot).end());
  for (auto it = dropped.rbegin(); it != dropped.rend(); ++it) tokens.erase(tokens.begin() + *it);
  // What a later prefill computes again is only the front no shift has touched.
  memory_->shifted(slot.id, std::move(tokens), static_cast<size_t>(dropped.front()));
  ++metrics_.context_shifts_total;
  metrics_.evicted_tokens_total[static_cast<size_t>(req.policy)] += dropped.size();
  ++slot.n_shifts;
  slot.n_evicted += dropped.size();
  return true;
}

void Scheduler::finish(Slot& slot, StopType stop, bool truncated) {
  const auto now = Slot::Clock::now();
  truncated = truncated || (!memory_->exact(slot.id) && !memory_->fake(slot.id));  // llama-server reports a shifted generation as truncated
  FinalResult r;
  r.content = slot.generated_text;
  r.tokens.assign(slot.generated_tokens.begin() + static_cast<std::ptrdiff_t>(slot.task->params.stream ? slot.tokens_sent : 0),
                  slot.generated_tokens.end());
  r.stop = stop;
  r.stopping_word = stop == StopType::Word ? slot.stop_checker->matched() : "";
  r.truncated = truncated;
  r.has_new_line = slot.has_new_line;
  r.id_slot = slot.id;
  r.n_prompt = static_cast<int32_t>(slot.task->prompt.size());
  r.n_decoded = slot.n_decoded;
  r.timings = timings_of(slot, now);
  r.probs.assign(slot.probs.begin() + static_cast<std::ptrdiff_t>(slot.task->params.stream ? slot.probs_sent : 0),
                 slot.probs.end());
  settle_drafts(slot);
  absorb_given_back(slot);
  r.n_cached = static_cast<int32_t>(cached(slot).size());  // with what a last pass gave back evaluated again
  if (slot.n_decoded > 0) memory_->keep_state(slot.id);  // the end of this turn's generation
  if (slot.task->return_state) {
    try {
      r.state = save_state(slot);
      ++metrics_.slot_states_saved_total;
    } catch (const std::exception& e) {
      fail(slot, HttpError(ErrorType::Server, std::string("saving the state failed: ") + e.what()));
      return;
    }
  }
  metrics_.tokens_predicted_total += static_cast<uint64_t>(slot.n_decoded);
  metrics_.predicted_ms_total += r.timings.predicted_ms;
  log_line("slot %d: task %llu done (stop %s): prompt %d tokens (%lld cached, %lld evaluated in %.1f ms), "
           "%d generated in %.1f ms; cache holds %zu tokens",
           slot.id, static_cast<unsigned long long>(slot.task->id), stop_type_name(stop), r.n_prompt,
           static_cast<long long>(r.timings.cache_n), static_cast<long long>(r.timings.prompt_n), r.timings.prompt_ms,
           r.n_decoded, r.timings.predicted_ms, cached(slot).size());
  slot.task->channel->push({TaskEvent::Kind::Final, {}, std::move(r), std::nullopt});
  release(slot);
}

void Scheduler::finish_embedding(Slot& slot) {
  const auto now = Slot::Clock::now();
  FinalResult r;
  r.id_slot = slot.id;
  r.n_prompt = static_cast<int32_t>(slot.task->prompt.size());
  r.n_cached = static_cast<int32_t>(cached(slot).size());
  slot.t_first_token = now;
  r.timings = timings_of(slot, now);
  r.embedding = slot.embedding->result();
  metrics_.prompt_tokens_total += slot.n_prompt_done - slot.n_cache_reused;
  metrics_.prompt_ms_total += ms_between(slot.t_start, now);
  log_line("slot %d: task %llu done: embedding of %d tokens (%s pooling) in %.1f ms", slot.id,
           static_cast<unsigned long long>(slot.task->id), r.n_prompt, pooling_name(cfg_.pooling), r.timings.prompt_ms);
  slot.task->channel->push({TaskEvent::Kind::Final, {}, std::move(r), std::nullopt});
  release(slot);
}

void Scheduler::fail(Slot& slot, const HttpError& error) {
  log_line("slot %d: task %llu failed: %s", slot.id, static_cast<unsigned long long>(slot.task->id), error.what());
  slot.task->channel->push({TaskEvent::Kind::Error, {}, {}, error});
  release(slot);
}

void Scheduler::settle_drafts(Slot& slot) {
  std::vector<Token> given_back = memory_->end_drafts(slot.id);
  metrics_.drafts_replayed_total += given_back.size();
  if (!given_back.empty()) slot.replay = std::move(given_back);
  slot.drafts.clear();
}

void Scheduler::absorb_given_back(Slot& slot) {
  if (slot.replay.empty()) return;
  // The answer's tokens the hybrid's state gave back after its last pass: evaluated now, so that
  // the cache holds the whole answer for the next turn (as without drafts).
  Batch b;
  size_t pos = cached(slot).size();
  for (Token t : slot.replay) add_token(b, slot, t, pos++, false);
  try {
    if (ctx_.decode(b) != 0) return;  // no room: the cache ends before them
  } catch (const std::exception& e) {
    log_line("slot %d: evaluating the answer's last tokens failed: %s", slot.id, e.what());
    memory_->wipe(slot.id);
    slot.replay.clear();
    return;
  }
  memory_->advance(slot.id, slot.replay);
  slot.replay.clear();
}

void Scheduler::release(Slot& slot) {
  settle_drafts(slot);
  // A hybrid whose state gave tokens back holds less than the answer: no tail follows its cache.
  if (!slot.replay.empty()) slot.pending = -1;
  slot.replay.clear();
  memory_->end(slot.id);
  memory_bytes_ = ctx_.memory_bytes();
  slot.state = SlotState::Idle;
  slot.last_used = ++use_counter_;
  slot.task.reset();
  slot.sampler.reset();
  slot.stop_checker.reset();
  slot.grammar.reset();
  slot.embedding.reset();
  slot.probs.clear();
  slot.unevaluated_tail = slot.pending;
  slot.tail_at = cached(slot).size();
  slot.pending = -1;
}

}  // namespace agentkv::server
