#include "server/scheduler.h"

#include <algorithm>
#include <cstdlib>
#include <random>

#include "agentkv/error.h"
#include "agentkv/session_state.h"
#include "agentkv/speculative.h"
#include "server/logprobs.h"
#include "server/server_log.h"

namespace agentkv::server {

namespace {

// A token's text for a log line: control characters escaped, long pieces cut.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) out += '?';
    else out += static_cast<char>(c);
    if (out.size() > 32) return out + "...";
  }
  return out;
}

}  // namespace

Scheduler::Scheduler(Context& ctx, const Tokenizer& tok, SchedulerConfig cfg)
    : ctx_(ctx), tok_(tok), cfg_(cfg) {
  if (cfg_.n_slots < 1 || cfg_.n_slots > static_cast<int>(ctx.params().n_seq_max))
    throw Error("scheduler: " + std::to_string(cfg_.n_slots) + " slots need a context with as many sequences (n_seq_max " +
                std::to_string(ctx.params().n_seq_max) + ")");
  cfg_.n_batch = std::max<uint32_t>(1, std::min(cfg_.n_batch, ctx.params().n_ubatch));
  // The memory holds every slot's tokens and the prefix cache of every slot's pages and (hybrid)
  // recurrent snapshots, under the sequence after the slots' (the context has n_slots + 1).
  RequestMemoryConfig mc;
  mc.n_seqs = cfg_.n_slots;
  mc.share_prefixes = cfg_.share_prefixes;
  mc.evict_step_cells = cfg_.n_batch;
  mc.page_tokens = cfg_.page_tokens;
  mc.model_fingerprint = cfg_.model_fingerprint;
  mc.snapshot_bytes = cfg_.checkpoint_bytes;
  memory_ = ctx_.open_request_memory(mc, [](MemorySeqId seq, const std::string& line) {
    log_line("slot %d: %s", seq, line.c_str());
  });
  slots_.resize(static_cast<size_t>(cfg_.n_slots));
  for (int i = 0; i < cfg_.n_slots; ++i) slots_[static_cast<size_t>(i)].id = i;
  const char* check = std::getenv("AGENTKV_CHECK_MEMORY");
  verify_memory_ = check && *check && std::string(check) != "0";
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::set_page_tier(PageTier* tier) {
  if (prefix_cache()) prefix_cache()->set_tier(tier);
}

void Scheduler::start() { thread_ = std::thread([this] { run(); }); }

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  const HttpError gone(ErrorType::Unavailable, "the server is shutting down");
  for (auto& task : queue_) task->channel->push({TaskEvent::Kind::Error, {}, {}, gone});
  queue_.clear();
  for (auto& slot : slots_)
    if (!slot.idle()) fail(slot, gone);
  for (auto& job : jobs_) job->done.set_exception(std::make_exception_ptr(gone));
  jobs_.clear();
}

void Scheduler::submit(std::shared_ptr<Task> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      task->channel->push({TaskEvent::Kind::Error, {}, {}, HttpError(ErrorType::Unavailable, "the server is shutting down")});
      return;
    }
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void Scheduler::wake() { cv_.notify_all(); }

bool Scheduler::any_active() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.idle(); });
}

bool Scheduler::has_idle_slot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.idle(); });
}

void Scheduler::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || any_active() || !jobs_.empty(); });
    if (stopping_) return;
    drop_cancelled();
    run_jobs();
    assign_queued();
    verify_memory();
    Batch batch;
    if (!build_batch(batch)) {
      // Only tasks waiting for a busy slot that is not decoding: nothing to do until woken.
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      continue;
    }
    lock.unlock();
    int status = 0;
    std::string error;
    const auto t_decode = Slot::Clock::now();
    try {
      status = ctx_.decode(batch);
    } catch (const std::exception& e) {
      status = -1;
      error = e.what();
    }
    lock.lock();
    // What a generation batch of this many rows costs: how long drafts pay (draft_policy.h).
    if (status == 0 && std::none_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.batch_prompt_tokens > 0; }))
      pass_cost_.record(batch.size(), ms_between(t_decode, Slot::Clock::now()));
    after_decode(batch, status, error);
    verify_memory();
  }
}

void Scheduler::verify_memory() const {
  if (!verify_memory_ || !prefix_cache()) return;
  try {
    prefix_cache()->verify();
  } catch (const std::exception& e) {
    log_line("AGENTKV_CHECK_MEMORY: memory invariant broken: %s", e.what());
    std::abort();
  }
}

void Scheduler::drop_cancelled() {
  for (Slot& slot : slots_) {
    if (slot.idle() || !slot.task->channel->cancelled()) continue;
    log_line("slot %d: task %llu cancelled (client disconnected); cache keeps %zu tokens", slot.id,
             static_cast<unsigned long long>(slot.task->id), cached(slot).size());
    release(slot);
  }
  std::erase_if(queue_, [](const std::shared_ptr<Task>& t) { return t->channel->cancelled(); });
}

void Scheduler::assign_queued() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    Task& task = **it;
    if (task.deferred_for_memory && any_active()) {
      ++it;
      continue;
    }
    std::vector<SlotCandidate> candidates;
    candidates.reserve(slots_.size());
    for (const Slot& s : slots_) {
      // A cache of another cache_salt is no candidate for prefix similarity.
      const std::span<const Token> tokens = memory_->cache_namespace_of(s.id) == cache_namespace(task.params.cache_salt)
                                                ? cached(s)
                                                : std::span<const Token>();
      candidates.push_back({s.id, s.idle(), tokens, s.last_used, s.session_id});
    }
    const SlotChoice choice =
        choose_slot(candidates, {task.prompt, task.params.id_slot, task.params.session_id}, cfg_.slot_similarity);
    if (choice.slot < 0) {
      ++it;
      continue;
    }
    std::shared_ptr<Task> taken = std::move(*it);
    taken->deferred_for_memory = false;
    it = queue_.erase(it);
    launch(slots_[static_cast<size_t>(choice.slot)], std::move(taken), choice);
  }
}

void Scheduler::launch(Slot& slot, std::shared_ptr<Task> task, const SlotChoice& choice) {
  // The prompt's time starts here: bringing pages in from a tier is part of it (a turn served
  // from the tiers shows what it cost in prompt_ms, not only in the client's TTFT).
  const Slot::Clock::time_point t_launch = Slot::Clock::now();
  const CompletionParams& p = task->params;
  const std::vector<Token>& prompt = task->prompt;
  if (prompt.empty() || prompt.size() >= cfg_.n_ctx) {  // the HTTP layer refuses these first
    task->channel->push({TaskEvent::Kind::Error, {}, {}, exceed_context_size(prompt.size(), cfg_.n_ctx)});
    return;
  }

  if (!p.session_id.empty()) {
    for (Slot& other : slots_)
      if (other.id != slot.id && other.session_id == p.session_id) other.session_id.clear();
    if (!slot.session_id.empty() && slot.session_id != p.session_id)
      log_line("slot %d: session '%s' unbound (slot given to session '%s')", slot.id, slot.session_id.c_str(),
               p.session_id.c_str());
    slot.session_id = p.session_id;
  } else if (!slot.session_id.empty()) {
    log_line("slot %d: session '%s' unbound (slot given to a request without session)", slot.id,
             slot.session_id.c_str());
    slot.session_id.clear();
  }

  PromptReuse r;
  if (p.n_fake_cached > 0) {
    const size_t n_fake = static_cast<size_t>(p.n_fake_cached);
    if (n_fake >= prompt.size()) {  // the HTTP layer refuses this first
      task->channel->push({TaskEvent::Kind::Error, {}, {}, invalid_request("n_fake_cached must be below the prompt length")});
      return;
    }
    r.n_cached = cached(slot).size();
    std::string error;
    if (!memory_->begin_fake(slot.id, prompt, n_fake, error)) {
      task->channel->push({TaskEvent::Kind::Error, {}, {}, invalid_request("n_fake_cached: " + error)});
      return;
    }
    r.n_kept = n_fake;
    log_line("slot %d: fake prefix of %zu positions (metadata only)", slot.id, n_fake);
  } else {
    RequestPlan plan;
    plan.cache_namespace = cache_namespace(p.cache_salt);
    // Embeddings pool every row: nothing may come from a cache.
    plan.cache_prompt = p.cache_prompt && !cfg_.embeddings;
    plan.divergences = task->snapshot_points;
    r = memory_->begin(slot.id, prompt, plan);
  }
  log_line("slot %d: task %llu (by %s, similarity %.2f): prompt %zu tokens, cache %zu, common prefix %zu, reused %zu, "
           "to evaluate %zu%s",
           slot.id, static_cast<unsigned long long>(task->id), slot_reason_name(choice.reason), choice.similarity,
           prompt.size(), r.n_cached, r.n_common, r.n_kept, prompt.size() - r.n_kept,
           p.cache_prompt ? "" : " (cache_prompt=false)");
  if (p.cache_prompt && r.cached_at_divergence >= 0 && r.n_common < prompt.size()) {
    log_line("slot %d: prompt diverges from the cache at position %zu: cached token %d '%s', new token %d '%s'",
             slot.id, r.n_common, r.cached_at_divergence,
             printable(tok_.token_to_piece(r.cached_at_divergence, true)).c_str(), prompt[r.n_common],
             printable(tok_.token_to_piece(prompt[r.n_common], true)).c_str());
  }
  if (r.state_refused)
    log_line("slot %d: the recurrent state cannot drop a suffix: the prompt is evaluated from the start", slot.id);
  if (r.source == ReuseSource::Snapshot) {
    log_line("slot %d: rolled back to the checkpoint after token %zu (the recurrent snapshot on its page chain)",
             slot.id, r.n_kept);
  }

  slot.task = std::move(task);
  slot.state = SlotState::Prompt;
  slot.n_prompt_done = r.n_kept;
  slot.n_cache_reused = r.n_kept;
  SamplerParams sp = p.sampling;
  if (sp.seed == kRandomSeed) sp.seed = std::random_device{}();
  slot.sampler.emplace(sp);
  slot.embedding.reset();
  if (cfg_.embeddings) slot.embedding.emplace(cfg_.pooling, ctx_.model().n_embd(), prompt.size());
  slot.stop_checker.emplace(p.stop);
  slot.reasoning.reset();
  if (p.reasoning_budget >= 0 && !p.reasoning_end.empty())
    slot.reasoning.emplace(p.reasoning_budget, p.reasoning_start, p.reasoning_end,
                           tok_.encode(p.reasoning_end, /*add_special=*/false, /*parse_special=*/true), p.reasoning_open);
  slot.grammar.reset();
  slot.probs.clear();
  slot.probs_sent = 0;
  if (p.grammar.grammar) {
    try {
      std::unique_ptr<grammar::TokenTrie>& trie = token_tries_[p.kept_control_tokens];
      if (!trie) {
        const auto t0 = Slot::Clock::now();
        trie = std::make_unique<grammar::TokenTrie>(tok_, p.kept_control_tokens);
        log_line("grammar: token trie of %d tokens (%zu control tokens kept) built in %.1f ms (%zu nodes)",
                 trie->n_vocab(), p.kept_control_tokens.size(), ms_between(t0, Slot::Clock::now()), trie->nodes().size());
      }
      slot.grammar.emplace(matchers_.get(p.grammar.grammar), *trie, p.grammar);
    } catch (const std::exception& e) {
      fail(slot, invalid_request(std::string("grammar: ") + e.what()));
      return;
    }
  }
  slot.pending = -1;
  slot.drafts.clear();
  slot.replay.clear();
  slot.draft_policy.start(cfg_.embeddings ? 0 : static_cast<size_t>(std::max(0, p.spec_n_max)));
  slot.n_drafted = 0;
  slot.n_drafts_accepted = 0;
  slot.n_decoded = 0;
  slot.generated_text.clear();
  slot.generated_tokens.clear();
  slot.tokens_sent = 0;
  slot.has_new_line = false;
  slot.t_start = t_launch;
  const bool fake = memory_->fake(slot.id);
  if (!fake) metrics_.prompt_tokens_cached_total += r.n_kept;
  if (p.cache_prompt && !fake) {
    metrics_.prefix_cache_queries_total += prompt.size();
    metrics_.prefix_cache_hits_total += r.n_kept;
  }
  send_progress(slot);  // what came from the cache
  if (r.use_saved_logits) {
    // The whole prompt and the logits after it are cached: sample now, evaluate nothing.
    ++metrics_.saved_logits_used_total;
    log_line("slot %d: the prompt is entirely cached with its logits: nothing to evaluate", slot.id);
    on_logits(slot, memory_->saved_logits(slot.id, prompt.size()).data(), /*from_cache=*/true);
  }
}

void Scheduler::add_token(Batch& batch, const Slot& s, Token t, size_t i, bool want_logits) const {
  if (!cfg_.multimodal) {
    batch.add(t, static_cast<MemoryPos>(i), {s.id}, want_logits);
    return;
  }
  // With a projector every token carries its rope position; an image row its embedding too.
  const PromptImages* images = s.task ? s.task->images.get() : nullptr;
  std::span<const ImageSpan> spans;
  if (images) spans = images->spans;
  const float* row = nullptr;
  size_t n_embd = 0;
  for (size_t k = 0; k < spans.size(); ++k)
    if (i >= spans[k].first && i < spans[k].end()) {
      n_embd = static_cast<size_t>(images->images[k].n_embd);
      row = images->row(k, static_cast<int64_t>(i - spans[k].first));
    }
  batch.add_multimodal(t, static_cast<MemoryPos>(i), s.id, want_logits, rope_position(spans, i), row, n_embd);
}

bool Scheduler::build_batch(Batch& batch) {
  for (Slot& s : slots_) {
    s.batch_output = -1;
    s.batch_prompt_tokens = 0;
    s.in_batch = false;
  }
  size_t budget = cfg_.n_batch;
  int n_outputs = 0;
  // Generating slots first: one token each keeps every stream moving while prompts are read (a
  // hybrid's given-back tokens ahead of it); drafts only from what the others' tokens leave.
  size_t reserved = 0;
  for (const Slot& s : slots_)
    if (s.state == SlotState::Generating && s.pending >= 0) reserved += s.replay.size() + 1;
  // Which slots go and how many drafts each may take first; the draft model then drafts for all
  // the slots that asked it at once; then each slot's token and drafts go in, one run per slot.
  std::vector<Slot*> going;
  std::vector<DraftAsk> asks;
  std::vector<Slot*> asking;
  size_t rows = 0;
  for (Slot& s : slots_) {
    if (s.state != SlotState::Generating || s.pending < 0) continue;
    const size_t need = s.replay.size() + 1;
    reserved -= need;
    if (need > budget) continue;
    s.in_batch = true;
    going.push_back(&s);
    budget -= need;
    rows += need;
    DraftAsk ask;
    s.drafts = no_drafts_next_ ? std::vector<Token>() : draft_for(s, budget > reserved ? budget - reserved : 0, rows - 1 + reserved, ask);
    const size_t taken = ask.k > 0 ? ask.k : s.drafts.size();  // a draft model's: at most k
    budget -= taken;
    rows += taken;
    if (ask.k > 0) {
      asks.push_back(std::move(ask));
      asking.push_back(&s);
    }
  }
  if (!asks.empty()) {
    drafter_->draft(asks);
    for (size_t i = 0; i < asks.size(); ++i) {
      budget += asks[i].k;  // what it took back, for the prompts
      asking[i]->drafts = std::move(asks[i].drafts);
      finish_drafts(*asking[i], asking[i]->drafts);
      budget -= asking[i]->drafts.size();
    }
  }
  for (Slot* s : going) {
    size_t pos = cached(*s).size();
    for (Token t : s->replay) add_token(batch, *s, t, pos++, false);
    add_token(batch, *s, s->pending, pos++, true);
    s->batch_output = n_outputs++;
    for (Token d : s->drafts) add_token(batch, *s, d, pos++, true);
    if (!s->drafts.empty()) memory_->begin_drafts(s->id, s->replay.size() + 1 + s->drafts.size());
    n_outputs += static_cast<int>(s->drafts.size());
  }
  const size_t n = slots_.size();
  for (size_t k = 0; k < n && budget > 0; ++k) {
    Slot& s = slots_[(prompt_rotation_ + k) % n];
    if (s.state != SlotState::Prompt) continue;
    const std::vector<Token>& prompt = s.task->prompt;
    const size_t remaining = prompt.size() - s.n_prompt_done;
    const size_t take = memory_->prompt_chunk(s.id, s.n_prompt_done, budget);
    const bool last = take == remaining;
    s.batch_prompt_tokens = take;
    s.in_batch = true;
    if (s.embedding) {  // the rows its pooling takes, no logits
      s.batch_output = n_outputs;
      s.batch_outputs = 0;
      for (size_t i = s.n_prompt_done; i < s.n_prompt_done + take; ++i) {
        const bool wanted = s.embedding->wants(i);
        batch.add(prompt[i], static_cast<MemoryPos>(i), {s.id}, wanted);
        s.batch_outputs += wanted ? 1 : 0;
      }
      n_outputs += s.batch_outputs;
      budget -= take;
      continue;
    }
    for (size_t i = s.n_prompt_done; i < s.n_prompt_done + take; ++i)
      add_token(batch, s, prompt[i], i, last && i + 1 == s.n_prompt_done + take);
    if (last) s.batch_output = n_outputs++;
    budget -= take;
  }
  ++prompt_rotation_;
  no_drafts_next_ = false;
  return batch.size() > 0;
}

std::vector<Token> Scheduler::draft_for(Slot& s, size_t room, size_t other_rows, DraftAsk& ask) {
  const CompletionParams& p = s.task->params;
  // The policy's length (what pays on this machine and text), or n_max when asked for a fixed one.
  const size_t n_max = static_cast<size_t>(std::max(0, p.spec_n_max));
  DraftModel* drafter = p.spec_sources.draft_model ? drafter_ : nullptr;
  // A draft model's drafts cost its own steps besides their rows in the pass.
  const double draft_ms = drafter && !p.spec_sources.ngram ? drafter->ms_per_draft() : 0.0;
  size_t k = std::min({p.spec_adaptive ? s.draft_policy.next(other_rows, pass_cost_, draft_ms) : n_max, room,
                       max_drafts(ctx_.model().config())});
  // Every draft must fit before the context's end (or --kv-budget), where a generation shifts or
  // ends: a pass never crosses it.
  const size_t at = cached(s).size() + s.replay.size() + 1;  // positions held once pending is in
  const size_t end = cfg_.context_shift && cfg_.kv_budget > 0 ? std::min(cfg_.n_ctx, cfg_.kv_budget) : cfg_.n_ctx;
  k = std::min(k, end > at + 2 ? end - at - 2 : 0);
  // ... and no draft beyond the tokens the request may still generate.
  if (p.n_predict >= 0) k = std::min<size_t>(k, static_cast<size_t>(std::max(0, p.n_predict - s.n_decoded - 1)));
  if (k == 0 || k < static_cast<size_t>(p.spec_n_min)) return {};
  std::vector<Token> history(cached(s).begin(), cached(s).end());
  history.insert(history.end(), s.replay.begin(), s.replay.end());
  history.push_back(s.pending);
  std::vector<Token> drafts;
  if (p.spec_sources.ngram) {
    drafts = ngram_draft(history, k);
    if (drafts.size() < k) {
      // What other sessions of the namespace hold: a text another agent wrote, read or was told.
      std::vector<Token> extended = history;
      extended.insert(extended.end(), drafts.begin(), drafts.end());
      const std::vector<Token> recalled = memory_->recall(s.id, extended, k - drafts.size());
      drafts.insert(drafts.end(), recalled.begin(), recalled.end());
    }
  }
  // The draft model when the text holds nothing to copy (llama.cpp's order: n-gram kinds first),
  // with the other slots' asks.
  if (drafts.empty() && drafter) {
    ask.seq = s.id;
    ask.history = std::move(history);
    ask.k = k;
    ask.p_min = p.spec_p_min;
    return {};
  }
  finish_drafts(s, drafts);
  return drafts;
}

void Scheduler::finish_drafts(const Slot& s, std::vector<Token>& drafts) const {
  // An image row's id is no token to draft.
  drafts.erase(std::find_if(drafts.begin(), drafts.end(), [](Token t) { return t < 0; }), drafts.end());
  // Drafts the grammar forbids would be rejected: they are cut before the pass.
  if (s.grammar) drafts.resize(s.grammar->allowed_run(drafts));
  if (drafts.size() < static_cast<size_t>(std::max(1, s.task->params.spec_n_min))) drafts.clear();
}

void Scheduler::accept_drafts(Slot& s) {
  // Each draft stands while the slot's own choice after the one before equals it: the choice is
  // made as without drafts (the same sampler, grammar and stops, row by row), so the output is the
  // plain decode's, at any temperature (a fixed draft is accepted with the probability the model
  // gives it, and a rejected one is replaced by the model's own draw).
  const std::vector<Token> drafts = std::move(s.drafts);
  s.drafts.clear();
  size_t kept = 0;
  // Counted as they go: the answer's timings are written when a token inside the pass ends it.
  s.n_drafted += static_cast<int32_t>(drafts.size());
  metrics_.drafts_total += drafts.size();
  while (kept < drafts.size() && s.state == SlotState::Generating && s.pending == drafts[kept]) {
    memory_->advance(s.id, std::span<const Token>(&drafts[kept], 1));
    s.pending = -1;
    ++kept;
    ++s.n_drafts_accepted;
    ++metrics_.drafts_accepted_total;
    on_logits(s, ctx_.logits(s.batch_output + static_cast<int>(kept)));
  }
  if (s.idle()) return;  // finished: the memory settled the pass when the slot let its sequence go
  s.draft_policy.record(drafts.size(), kept);
  s.replay = memory_->end_drafts(s.id);
}

void Scheduler::on_memory_full() {
  if (memory_->make_room()) return;
  const auto n_active = std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.idle(); });
  Slot* reading = nullptr;  // the newest task still reading its prompt
  Slot* largest = nullptr;  // the generating slot holding the most memory
  for (Slot& s : slots_) {
    if (!s.in_batch) continue;
    if (s.state == SlotState::Prompt && (!reading || s.task->id > reading->task->id)) reading = &s;
    if (s.state == SlotState::Generating && (!largest || cached(s).size() > cached(*largest).size())) largest = &s;
  }
  if (reading && n_active > 1) {
    requeue(*reading);
  } else if (largest && cfg_.context_shift && shift_context(*largest)) {
    // The pool is n_ctx for all slots: full memory is where a lone slot's n_ctx would be.
  } else if (largest) {
    log_line("slot %d: memory is full (n_ctx %u shared by all slots): generation ends here", largest->id, cfg_.n_ctx);
    finish(*largest, StopType::Limit, /*truncated=*/true);
  } else if (reading) {
    // Should not happen: a prompt shorter than n_ctx fits once idle caches and unused pages are
    // gone (tests/server/test_liveness.py). Should it, it is a capacity condition, not a fault.
    log_line("slot %d: no room in memory for the prompt (%u cells, %zu free)", reading->id, cfg_.n_ctx,
             ctx_.cells_free_for(reading->id));
    memory_->wipe(reading->id);
    fail(*reading, HttpError(ErrorType::Unavailable, "no room in memory for the prompt; retry later"));
  }
}

void Scheduler::requeue(Slot& slot) {
  log_line("slot %d: memory is full: task %llu goes back to the queue until the other slots are done", slot.id,
           static_cast<unsigned long long>(slot.task->id));
  memory_->wipe(slot.id);
  std::shared_ptr<Task> task = slot.task;
  task->deferred_for_memory = true;
  release(slot);
  queue_.push_front(std::move(task));
}

void Scheduler::after_decode(const Batch& batch, int status, const std::string& error) {
  if (status < 0) {
    log_line("decode of %zu tokens failed: %s", batch.size(), error.c_str());
    for (Slot& s : slots_) {
      if (!s.in_batch) continue;
      memory_->wipe(s.id);
      fail(s, HttpError(ErrorType::Server, "decode failed: " + error));
    }
    return;
  }
  if (status == 1) {
    // Nothing was decoded. Drafts first: the next batch goes without them, and only if even that
    // finds no room the memory frees something.
    bool had_drafts = false;
    for (Slot& s : slots_)
      if (s.in_batch && !s.drafts.empty()) {
        had_drafts = true;
        settle_drafts(s);
      }
    if (had_drafts) {
      no_drafts_next_ = true;
      return;
    }
    on_memory_full();  // the next step builds a new batch
    return;
  }

  ++metrics_.n_decode_total;
  for (Slot& s : slots_) {
    if (!s.in_batch) continue;
    ++metrics_.n_busy_slots_total;
    if (s.state == SlotState::Generating) {
      std::vector<Token> absorbed = std::move(s.replay);
      s.replay.clear();
      absorbed.push_back(s.pending);
      memory_->advance(s.id, absorbed);
      s.pending = -1;
    } else {
      memory_->advance(s.id, std::span<const Token>(s.task->prompt).subspan(s.n_prompt_done, s.batch_prompt_tokens));
      s.n_prompt_done += s.batch_prompt_tokens;
      send_progress(s);
    }
    metrics_.n_tokens_max = std::max<uint64_t>(metrics_.n_tokens_max, cached(s).size());
    if (s.embedding) {
      for (int j = 0; j < s.batch_outputs; ++j) s.embedding->add(ctx_.embeddings(s.batch_output + j));
      if (s.n_prompt_done == s.task->prompt.size()) finish_embedding(s);
      continue;
    }
    if (s.batch_output < 0) continue;
    try {
      on_logits(s, ctx_.logits(s.batch_output));
      if (!s.drafts.empty()) accept_drafts(s);
    } catch (const std::exception& e) {
      if (!s.idle()) fail(s, HttpError(ErrorType::Server, std::string("sampling failed: ") + e.what()));
    }
  }
}

}  // namespace agentkv::server
