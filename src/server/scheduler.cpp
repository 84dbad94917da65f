#include "server/scheduler.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "server/server_log.h"

namespace agentkv::server {

namespace {

double ms_between(Slot::Clock::time_point a, Slot::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

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

Scheduler::Scheduler(Context& ctx, const Tokenizer& tok, SchedulerConfig cfg) : ctx_(ctx), tok_(tok), cfg_(cfg) {
  if (cfg_.n_slots < 1 || cfg_.n_slots > static_cast<int>(ctx.params().n_seq_max))
    throw Error("scheduler: " + std::to_string(cfg_.n_slots) + " slots need a context with as many sequences (n_seq_max " +
                std::to_string(ctx.params().n_seq_max) + ")");
  cfg_.n_batch = std::max<uint32_t>(1, std::min(cfg_.n_batch, ctx.params().n_ubatch));
  slots_.resize(static_cast<size_t>(cfg_.n_slots));
  for (int i = 0; i < cfg_.n_slots; ++i) slots_[static_cast<size_t>(i)].id = i;
}

Scheduler::~Scheduler() { stop(); }

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

MetricsSnapshot Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MetricsSnapshot m = metrics_;
  m.requests_processing = static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.idle(); }));
  m.requests_deferred = static_cast<int>(queue_.size());
  return m;
}

Json Scheduler::slots_json(const CompletionParams& defaults) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Json out = Json::array();
  for (const Slot& s : slots_) {
    const bool busy = !s.idle();
    const CompletionParams& params = busy ? s.task->params : defaults;
    const int64_t n_remain = !busy || params.n_predict < 0 ? -1 : params.n_predict - s.n_decoded;
    out.push_back(Json{
        {"id", s.id},
        {"id_task", busy ? static_cast<int64_t>(s.task->id) : -1},
        {"n_ctx", cfg_.n_ctx},
        {"speculative", false},
        {"is_processing", busy},
        {"params", params.to_json()},
        {"n_prompt_tokens", busy ? s.task->prompt.size() : 0},
        {"n_prompt_tokens_processed", busy ? s.n_prompt_done - s.n_cache_reused : 0},
        {"n_prompt_tokens_cache", busy ? s.n_cache_reused : 0},
        {"prompt", tok_.decode(s.cache.tokens(), true)},
        {"next_token", Json{{"has_next_token", busy},
                            {"has_new_line", s.has_new_line},
                            {"n_remain", n_remain},
                            {"n_decoded", s.n_decoded}}},
        {"n_tokens_cached", s.cache.size()},
        {"session_id", s.session_id},
    });
  }
  return out;
}

void Scheduler::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || any_active(); });
    if (stopping_) return;
    drop_cancelled();
    assign_queued();
    Batch batch;
    if (!build_batch(batch)) {
      // Only tasks waiting for a busy slot that is not decoding: nothing to do until woken.
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      continue;
    }
    lock.unlock();
    int status = 0;
    std::string error;
    try {
      status = ctx_.decode(batch);
    } catch (const std::exception& e) {
      status = -1;
      error = e.what();
    }
    lock.lock();
    after_decode(batch, status, error);
  }
}

void Scheduler::drop_cancelled() {
  for (Slot& slot : slots_) {
    if (slot.idle() || !slot.task->channel->cancelled()) continue;
    log_line("slot %d: task %llu cancelled (client disconnected); cache keeps %zu tokens", slot.id,
             static_cast<unsigned long long>(slot.task->id), slot.cache.size());
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
    for (const Slot& s : slots_) candidates.push_back({s.id, s.idle(), s.cache.tokens(), s.last_used, s.session_id});
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
  const CompletionParams& p = task->params;
  const std::vector<Token>& prompt = task->prompt;
  if (prompt.empty() || prompt.size() >= cfg_.n_ctx) {  // the HTTP layer refuses these first
    task->channel->push({TaskEvent::Kind::Error, {}, {}, HttpError(ErrorType::ExceedContextSize,
                         "request (" + std::to_string(prompt.size()) + " tokens) exceeds the available context size (" +
                         std::to_string(cfg_.n_ctx) + " tokens), try increasing it")});
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

  const size_t common = common_prefix(slot.cache.tokens(), prompt);
  const Token cached_at_divergence = common < slot.cache.size() ? slot.cache.tokens()[common] : -1;
  const ReuseResult r = slot.cache.reuse_for(prompt, p.cache_prompt, ctx_.memory(), slot.id);
  log_line("slot %d: task %llu (by %s, similarity %.2f): prompt %zu tokens, cache %zu, common prefix %zu, reused %zu, "
           "to evaluate %zu%s",
           slot.id, static_cast<unsigned long long>(task->id), slot_reason_name(choice.reason), choice.similarity,
           prompt.size(), r.n_cached, r.n_common, r.n_kept, prompt.size() - r.n_kept,
           p.cache_prompt ? "" : " (cache_prompt=false)");
  if (p.cache_prompt && cached_at_divergence >= 0 && common < prompt.size()) {
    log_line("slot %d: prompt diverges from the cache at position %zu: cached token %d '%s', new token %d '%s'",
             slot.id, common, cached_at_divergence,
             printable(tok_.token_to_piece(cached_at_divergence, true)).c_str(), prompt[common],
             printable(tok_.token_to_piece(prompt[common], true)).c_str());
  }
  if (r.state_refused)
    log_line("slot %d: the recurrent state cannot drop a suffix: the prompt is evaluated from the start", slot.id);

  slot.task = std::move(task);
  slot.state = SlotState::Prompt;
  slot.n_prompt_done = r.n_kept;
  slot.n_cache_reused = r.n_kept;
  SamplerParams sp = p.sampling;
  if (sp.seed == kRandomSeed) sp.seed = std::random_device{}();
  slot.sampler.emplace(sp);
  slot.stop_checker.emplace(p.stop);
  slot.pending = -1;
  slot.n_decoded = 0;
  slot.generated_text.clear();
  slot.generated_tokens.clear();
  slot.has_new_line = false;
  slot.t_start = Slot::Clock::now();
  metrics_.prompt_tokens_cached_total += r.n_kept;
}

bool Scheduler::build_batch(Batch& batch) {
  for (Slot& s : slots_) {
    s.batch_output = -1;
    s.batch_prompt_tokens = 0;
    s.in_batch = false;
  }
  size_t budget = cfg_.n_batch;
  int n_outputs = 0;
  // Generating slots first: one token each keeps every stream moving while prompts are read.
  for (Slot& s : slots_) {
    if (s.state != SlotState::Generating || s.pending < 0 || budget == 0) continue;
    batch.add(s.pending, static_cast<memory::Pos>(s.cache.size()), {s.id}, true);
    s.batch_output = n_outputs++;
    s.in_batch = true;
    --budget;
  }
  const size_t n = slots_.size();
  for (size_t k = 0; k < n && budget > 0; ++k) {
    Slot& s = slots_[(prompt_rotation_ + k) % n];
    if (s.state != SlotState::Prompt) continue;
    const std::vector<Token>& prompt = s.task->prompt;
    const size_t remaining = prompt.size() - s.n_prompt_done;
    const size_t take = std::min(remaining, budget);
    const bool last = take == remaining;
    batch.add_sequence(prompt.data() + s.n_prompt_done, take, static_cast<memory::Pos>(s.n_prompt_done), s.id, last);
    s.batch_prompt_tokens = take;
    s.in_batch = true;
    if (last) s.batch_output = n_outputs++;
    budget -= take;
  }
  ++prompt_rotation_;
  return batch.size() > 0;
}

bool Scheduler::free_idle_memory() {
  Slot* lru = nullptr;
  for (Slot& s : slots_)
    if (s.idle() && s.cache.size() > 0 && (!lru || s.last_used < lru->last_used)) lru = &s;
  if (!lru) return false;
  log_line("slot %d: memory is full; dropping this idle slot's cache (%zu tokens)", lru->id, lru->cache.size());
  ctx_.memory().seq_rm(lru->id, -1, -1);
  lru->cache.clear();
  return true;
}

void Scheduler::on_memory_full() {
  if (free_idle_memory()) return;
  const auto n_active = std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.idle(); });
  Slot* reading = nullptr;  // the newest task still reading its prompt
  Slot* largest = nullptr;  // the generating slot holding the most memory
  for (Slot& s : slots_) {
    if (!s.in_batch) continue;
    if (s.state == SlotState::Prompt && (!reading || s.task->id > reading->task->id)) reading = &s;
    if (s.state == SlotState::Generating && (!largest || s.cache.size() > largest->cache.size())) largest = &s;
  }
  if (reading && n_active > 1) {
    requeue(*reading);
  } else if (largest) {
    log_line("slot %d: memory is full (n_ctx %u shared by all slots): generation ends here", largest->id, cfg_.n_ctx);
    finish(*largest, StopType::Limit, /*truncated=*/true);
  } else if (reading) {  // cannot happen: a prompt shorter than n_ctx fits once the others are gone
    ctx_.memory().seq_rm(reading->id, -1, -1);
    reading->cache.clear();
    fail(*reading, HttpError(ErrorType::Server, "no room in memory for the prompt"));
  }
}

void Scheduler::requeue(Slot& slot) {
  log_line("slot %d: memory is full: task %llu goes back to the queue until the other slots are done", slot.id,
           static_cast<unsigned long long>(slot.task->id));
  ctx_.memory().seq_rm(slot.id, -1, -1);
  slot.cache.clear();
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
      ctx_.memory().seq_rm(s.id, -1, -1);
      s.cache.clear();
      fail(s, HttpError(ErrorType::Server, "decode failed: " + error));
    }
    return;
  }
  if (status == 1) {
    on_memory_full();  // the next step builds a new batch
    return;
  }

  ++metrics_.n_decode_total;
  for (Slot& s : slots_) {
    if (!s.in_batch) continue;
    ++metrics_.n_busy_slots_total;
    if (s.state == SlotState::Generating) {
      s.cache.append(s.pending);
      s.pending = -1;
    } else {
      const std::vector<Token>& prompt = s.task->prompt;
      for (size_t i = 0; i < s.batch_prompt_tokens; ++i) s.cache.append(prompt[s.n_prompt_done + i]);
      s.n_prompt_done += s.batch_prompt_tokens;
    }
    metrics_.n_tokens_max = std::max<uint64_t>(metrics_.n_tokens_max, s.cache.size());
    if (s.batch_output < 0) continue;
    try {
      on_logits(s, ctx_.logits(s.batch_output));
    } catch (const std::exception& e) {
      fail(s, HttpError(ErrorType::Server, std::string("sampling failed: ") + e.what()));
    }
  }
}

Timings Scheduler::timings_of(const Slot& slot, Slot::Clock::time_point now) const {
  Timings t;
  t.cache_n = static_cast<int64_t>(slot.n_cache_reused);
  t.prompt_n = static_cast<int64_t>(slot.n_prompt_done - slot.n_cache_reused);
  t.predicted_n = slot.n_decoded;
  if (slot.state == SlotState::Prompt) {
    t.prompt_ms = ms_between(slot.t_start, now);
  } else {
    t.prompt_ms = ms_between(slot.t_start, slot.t_first_token);
    t.predicted_ms = ms_between(slot.t_first_token, now);
  }
  return t;
}

void Scheduler::on_logits(Slot& slot, const float* logits) {
  const CompletionParams& p = slot.task->params;
  const auto now = Slot::Clock::now();
  if (slot.state == SlotState::Prompt) {
    slot.state = SlotState::Generating;
    slot.t_first_token = now;
    metrics_.prompt_tokens_total += slot.n_prompt_done - slot.n_cache_reused;
    metrics_.prompt_ms_total += ms_between(slot.t_start, now);
    if (p.n_predict == 0) {  // only fill the cache
      finish(slot, StopType::Limit);
      return;
    }
  }

  const Token id = slot.sampler->sample(logits, ctx_.model().n_vocab(), slot.cache.tokens());
  ++slot.n_decoded;
  slot.pending = id;

  StopType stop = StopType::None;
  bool truncated = false;
  std::string text;
  if (tok_.is_eog(id)) {
    stop = StopType::Eos;
  } else {
    const std::string piece = tok_.token_to_piece(id, /*special=*/false);
    if (piece.find('\n') != std::string::npos) slot.has_new_line = true;
    if (p.return_tokens) slot.generated_tokens.push_back(id);
    StopChecker::Step step = slot.stop_checker->push(piece);
    text = std::move(step.text);
    if (step.stopped) stop = StopType::Word;
  }
  if (stop == StopType::None && p.n_predict >= 0 && slot.n_decoded >= p.n_predict) stop = StopType::Limit;
  if (stop == StopType::None && slot.cache.size() + 1 >= cfg_.n_ctx) {
    stop = StopType::Limit;  // the next token would not fit: llama-server's "truncated"
    truncated = true;
  }
  if (stop != StopType::None && stop != StopType::Word) text += slot.stop_checker->flush();
  slot.generated_text += text;

  if (p.stream && !text.empty()) {
    TokenEvent ev;
    ev.text = text;
    ev.token = id;
    ev.n_decoded = slot.n_decoded;
    ev.id_slot = slot.id;
    ev.n_prompt = static_cast<int32_t>(slot.task->prompt.size());
    if (p.timings_per_token) ev.timings = timings_of(slot, now);
    slot.task->channel->push({TaskEvent::Kind::Token, std::move(ev), {}, std::nullopt});
  }
  if (stop != StopType::None) finish(slot, stop, truncated);
}

void Scheduler::finish(Slot& slot, StopType stop, bool truncated) {
  const auto now = Slot::Clock::now();
  FinalResult r;
  r.content = slot.generated_text;
  r.tokens = slot.generated_tokens;
  r.stop = stop;
  r.stopping_word = stop == StopType::Word ? slot.stop_checker->matched() : "";
  r.truncated = truncated;
  r.has_new_line = slot.has_new_line;
  r.id_slot = slot.id;
  r.n_prompt = static_cast<int32_t>(slot.task->prompt.size());
  r.n_decoded = slot.n_decoded;
  r.n_cached = static_cast<int32_t>(slot.cache.size());
  r.timings = timings_of(slot, now);
  metrics_.tokens_predicted_total += static_cast<uint64_t>(slot.n_decoded);
  metrics_.predicted_ms_total += r.timings.predicted_ms;
  log_line("slot %d: task %llu done (stop %s): prompt %d tokens (%lld cached, %lld evaluated in %.1f ms), "
           "%d generated in %.1f ms; cache holds %zu tokens",
           slot.id, static_cast<unsigned long long>(slot.task->id), stop_type_name(stop), r.n_prompt,
           static_cast<long long>(r.timings.cache_n), static_cast<long long>(r.timings.prompt_n), r.timings.prompt_ms,
           r.n_decoded, r.timings.predicted_ms, slot.cache.size());
  slot.task->channel->push({TaskEvent::Kind::Final, {}, std::move(r), std::nullopt});
  release(slot);
}

void Scheduler::fail(Slot& slot, const HttpError& error) {
  log_line("slot %d: task %llu failed: %s", slot.id, static_cast<unsigned long long>(slot.task->id), error.what());
  slot.task->channel->push({TaskEvent::Kind::Error, {}, {}, error});
  release(slot);
}

void Scheduler::release(Slot& slot) {
  slot.state = SlotState::Idle;
  slot.last_used = ++use_counter_;
  slot.task.reset();
  slot.sampler.reset();
  slot.stop_checker.reset();
  slot.pending = -1;
}

}  // namespace agentkv::server
