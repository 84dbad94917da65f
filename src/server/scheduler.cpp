#include "server/scheduler.h"

#include <algorithm>
#include <cstdlib>
#include <random>

#include "agentkv/error.h"
#include "agentkv/session_state.h"
#include "server/logprobs.h"
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

Scheduler::Scheduler(Context& ctx, const Tokenizer& tok, SchedulerConfig cfg)
    : ctx_(ctx), tok_(tok), cfg_(cfg) {
  if (cfg_.n_slots < 1 || cfg_.n_slots > static_cast<int>(ctx.params().n_seq_max))
    throw Error("scheduler: " + std::to_string(cfg_.n_slots) + " slots need a context with as many sequences (n_seq_max " +
                std::to_string(ctx.params().n_seq_max) + ")");
  cfg_.n_batch = std::max<uint32_t>(1, std::min(cfg_.n_batch, ctx.params().n_ubatch));
  // The memory's prefix cache holds every slot's pages and (hybrid) recurrent snapshots; it needs
  // the unified KV cache and one spare sequence id to hold cached pages.
  if (ctx.params().n_seq_max > static_cast<uint32_t>(cfg_.n_slots)) {
    PrefixCacheConfig pc;
    pc.page_tokens = cfg_.page_tokens;
    pc.holder = cfg_.n_slots;
    pc.model_fingerprint = cfg_.model_fingerprint;
    pc.snapshot_bytes = cfg_.checkpoint_bytes;
    prefix_cache_ = ctx_.enable_prefix_cache(pc);  // null without a unified KV cache
  }
  slots_.resize(static_cast<size_t>(cfg_.n_slots));
  for (int i = 0; i < cfg_.n_slots; ++i) slots_[static_cast<size_t>(i)].id = i;
  const char* check = std::getenv("AGENTKV_CHECK_MEMORY");
  verify_memory_ = check && *check && std::string(check) != "0";
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::set_page_tier(PageTier* tier) {
  if (prefix_cache_) prefix_cache_->set_tier(tier);
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

void Scheduler::run_job(std::function<void()> fn) {
  auto job = std::make_shared<Job>();
  job->fn = std::move(fn);
  std::future<void> done = job->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw HttpError(ErrorType::Unavailable, "the server is shutting down");
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
  done.get();
}

void Scheduler::run_jobs() {
  while (!jobs_.empty()) {
    std::shared_ptr<Job> job = std::move(jobs_.front());
    jobs_.pop_front();
    try {
      job->fn();
      job->done.set_value();
    } catch (...) {
      job->done.set_exception(std::current_exception());
    }
  }
}

Slot& Scheduler::idle_slot(int id) {
  if (id < 0 || id >= static_cast<int>(slots_.size()))
    throw HttpError(ErrorType::InvalidRequest, "slot " + std::to_string(id) + " does not exist: the server has " +
                                                   std::to_string(slots_.size()) + " slots");
  Slot& slot = slots_[static_cast<size_t>(id)];
  if (!slot.idle()) throw HttpError(ErrorType::Unavailable, "slot " + std::to_string(id) + " is busy");
  return slot;
}

std::vector<uint8_t> Scheduler::save_state(const Slot& slot) const {
  if (slot.fake_prefix) throw HttpError(ErrorType::InvalidRequest, "a slot holding a fake prefix cannot be saved");
  if (slot.shifted) throw HttpError(ErrorType::InvalidRequest, "a slot whose context is being shifted cannot be saved");
  SaveOptions o;
  o.with_tokens = true;
  o.tokens = slot.cache.tokens();
  o.logits = slot.cache.saved_logits(slot.cache.size());
  // The recurrent snapshots on the slot's page chain travel as the state's checkpoints.
  if (prefix_cache_) o.snapshots_salt = page_salt(slot);
  return save_seq(ctx_, slot.id, o);
}

SlotStateBlob Scheduler::save_slot(int id) {
  SlotStateBlob out;
  run_job([&] {
    const Slot& slot = idle_slot(id);
    out.blob = save_state(slot);
    out.n_tokens = slot.cache.size();
    ++metrics_.slot_states_saved_total;
    log_line("slot %d: state saved (%zu tokens, %zu bytes)", id, out.n_tokens, out.blob.size());
  });
  return out;
}

size_t Scheduler::cached_prefix(std::span<const Token> prompt, const std::string& cache_salt) {
  size_t best = 0;
  run_job([&] {
    if (!prefix_cache_) return;
    const uint64_t salt = cache_namespace(cache_salt);
    for (int id = 0; id < (cfg_.share_prefixes ? 1 : cfg_.n_slots); ++id)
      best = std::max(best, prefix_cache_->lookup(prompt, page_salt_for(id, salt), prompt.size()));
  });
  return best;
}

size_t Scheduler::restore_slot(int id, std::span<const uint8_t> blob, const std::string& what) {
  size_t n_tokens = 0;
  run_job([&] {
    Slot& slot = idle_slot(id);
    // Refuse what cannot become a prompt cache before memory changes.
    const StateSummary decoded = summarize_state(blob, what);
    if (!decoded.has_tokens)
      throw HttpError(ErrorType::InvalidRequest, what + ": carries no tokens, so it cannot become a slot's cache");
    // Room: idle slots' caches go first, as for a prompt; cells held by busy slots are a
    // capacity condition of the server (503), not a fault of the request.
    const size_t needed = decoded.kv_cells;
    auto make_room = [&] {
      while (needed > cells_free_for(slot.id) && free_idle_memory(slot.id)) continue;
    };
    make_room();
    if (needed > cells_free_for(slot.id) && slot.cache.size() > 0) {
      // The slot's own cells are cached pages too (held for the cache even once the slot lets
      // them go): the state replaces them anyway, so the slot lets go and they become evictable.
      wipe(slot);
      make_room();
    }
    if (needed > cells_free_for(slot.id))
      throw HttpError(ErrorType::Unavailable, what + ": needs " + std::to_string(needed) + " memory cells, " +
                                                  std::to_string(cells_free_for(slot.id)) +
                                                  " are free while other slots are busy; retry later");
    LoadedState st;
    try {
      // Pages already cached are attached rather than copied from the state (a state file carries
      // no salt: its pages are the unsalted ones).
      st = load_seq(ctx_, blob, slot.id, what, page_salt_for(slot.id, 0));
    } catch (const Error& e) {
      throw HttpError(ErrorType::InvalidRequest, e.what());
    }
    const MemoryPos last = ctx_.memory().seq_pos_max(slot.id);
    if (static_cast<size_t>(last + 1) != st.tokens.size()) {
      wipe(slot);
      throw HttpError(ErrorType::InvalidRequest, what + ": holds " + std::to_string(last + 1) + " positions but " +
                                                     std::to_string(st.tokens.size()) + " tokens");
    }
    n_tokens = st.tokens.size();
    const size_t n_checkpoints = st.checkpoints.size();
    const size_t n_shared = st.n_shared;
    slot.cache.assume(std::move(st.tokens), std::move(st.logits));
    slot.cache_salt = 0;  // a state file carries no salt
    slot.forget_sent_beyond(0);
    slot.last_used = ++use_counter_;
    adopt_restored(slot, std::move(st.checkpoints));
    ++metrics_.slot_states_restored_total;
    log_line("slot %d: state restored from %s (%zu tokens%s, %zu checkpoints, %zu tokens from cached pages)", id,
             what.c_str(), n_tokens, slot.cache.saved_logits(n_tokens).empty() ? "" : ", with logits", n_checkpoints,
             n_shared);
  });
  return n_tokens;
}

size_t Scheduler::erase_slot(int id) {
  size_t n_tokens = 0;
  run_job([&] {
    Slot& slot = idle_slot(id);
    n_tokens = slot.cache.size();
    wipe(slot);
    log_line("slot %d: cache erased (%zu tokens)", id, n_tokens);
  });
  return n_tokens;
}

void Scheduler::wipe(Slot& slot) {
  ctx_.memory().seq_rm(slot.id, -1, -1);
  slot.cache.clear();
  slot.fake_prefix = false;
  slot.shifted = false;
  slot.forget_sent_beyond(0);
  slot.cache_salt = 0;
}

void Scheduler::publish(Slot& slot, bool with_tail) {
  if (!prefix_cache_ || slot.fake_prefix || slot.shifted || slot.cache.size() == 0) return;
  const size_t P = cfg_.page_tokens;
  // Between task ends only whole pages are new, and only when one has filled up.
  if (!with_tail && slot.cache.size() / P <= slot.published / P) return;
  prefix_cache_->publish(slot.id, slot.cache.tokens(), page_salt(slot), with_tail);
  slot.published = slot.cache.size();
  send_to_tier(slot, with_tail);
}

void Scheduler::send_to_tier(Slot& slot, bool with_tail) {
  if (!prefix_cache_ || !prefix_cache_->has_tier() || slot.fake_prefix) return;
  metrics_.tier_pages_sent_total += prefix_cache_->send_pages(slot.cache.tokens(), page_salt(slot), with_tail, slot.tier_sent);
}

void Scheduler::send_snapshot_to_tier(Slot& slot) {
  if (!prefix_cache_ || !prefix_cache_->has_tier() || slot.fake_prefix) return;
  send_to_tier(slot, /*with_tail=*/true);  // the K/V the snapshot follows
  if (prefix_cache_->send_snapshot(slot.cache.tokens(), page_salt(slot))) ++metrics_.tier_snapshots_sent_total;
}

size_t Scheduler::fetch_from_tier(Slot& slot, std::span<const Token> prompt) {
  if (!prefix_cache_ || !prefix_cache_->has_tier() || prompt.size() < 2) return 0;
  const std::span<const Token> usable = prompt.first(prompt.size() - 1);  // the last token is evaluated
  // The pool may be full of the slot's own cache (another conversation): when the tier gives
  // more of this prompt than that cache does, the slot lets it go (its pages stay indexed, as
  // unused, evictable pages) so the fetched ones find cells. attach_shared would drop it anyway.
  auto make_room = [&](size_t reach) {
    if (reach > own_reuse_estimate(slot, prompt) && slot.cache.size() > 0) {
      const uint64_t cache_salt = slot.cache_salt;
      wipe(slot);
      slot.cache_salt = cache_salt;
    }
  };
  const TierFetch got = prefix_cache_->fetch(usable, page_salt(slot), make_room);
  for (const std::string& why : got.refused)
    log_line("slot %d: %s: dropped, its tokens are computed again", slot.id, why.c_str());
  metrics_.tier_pages_refused_total += got.refused.size();
  metrics_.tier_pages_fetched_total += got.pages;
  if (got.pages > 0)
    log_line("slot %d: fetched %zu pages (K/V through position %zu) from the page tier", slot.id, got.pages, got.kv_through);
  if (got.snapshot) {
    ++metrics_.tier_snapshots_fetched_total;
    log_line("slot %d: fetched the recurrent snapshot at position %zu from the page tier", slot.id, got.snapshot_at);
  }
  return got.pages;
}

uint64_t Scheduler::page_salt_for(int slot_id, uint64_t cache_salt) const {
  return agentkv::page_salt(cache_salt, slot_id, cfg_.share_prefixes);
}

uint64_t Scheduler::page_salt(const Slot& slot) const { return page_salt_for(slot.id, slot.cache_salt); }

void Scheduler::adopt_restored(Slot& slot, std::vector<LoadedCheckpoint> checkpoints) {
  if (!prefix_cache_ || slot.cache.size() == 0) return;
  // The restored sequence's pages join the index; its checkpoints become snapshots on them, and
  // its present recurrent state one more at the end.
  publish(slot, /*with_tail=*/true);
  if (!hybrid()) return;
  adopt_checkpoints(ctx_, slot.cache.tokens(), page_salt(slot), std::move(checkpoints));
  take_checkpoint(slot);
}

size_t Scheduler::own_reuse_estimate(const Slot& slot, std::span<const Token> prompt) const {
  const size_t common = common_prefix(slot.cache.tokens(), prompt);
  const bool whole_with_logits = common == prompt.size() && !slot.cache.saved_logits(prompt.size()).empty();
  const size_t keep = whole_with_logits ? common : std::min(common, prompt.size() - 1);
  if (!hybrid() || keep == slot.cache.size()) return keep;
  // A recurrent state cannot drop a suffix: the slot goes back to its latest snapshot (its own
  // pages, attached again).
  return prefix_cache_ ? prefix_cache_->lookup(prompt.first(keep), page_salt(slot), keep) : 0;
}

size_t Scheduler::attach_shared(Slot& slot, std::span<const Token> prompt, size_t own_keep) {
  if (!prefix_cache_ || prompt.size() < 2) return 0;
  const uint64_t salt = page_salt(slot);
  // At least the last prompt token is evaluated: its logits are needed.
  const size_t shared = prefix_cache_->lookup(prompt, salt, prompt.size() - 1);
  if (shared <= own_keep) return 0;
  const uint64_t cache_salt = slot.cache_salt;
  wipe(slot);
  slot.cache_salt = cache_salt;
  const size_t n = prefix_cache_->attach(slot.id, prompt, salt, prompt.size() - 1);
  slot.cache.assume(std::vector<Token>(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n)));
  slot.published = n;
  return n;
}

void Scheduler::take_checkpoint(Slot& slot) {
  if (!hybrid() || !prefix_cache_ || slot.fake_prefix || slot.cache.size() == 0) return;
  // The recurrent state attached to the slot's page chain: this slot (after a divergence) and any
  // slot whose prompt continues the chain can start here.
  if (prefix_cache_->snapshot(slot.id, slot.cache.tokens(), page_salt(slot))) {
    ++metrics_.checkpoints_taken_total;
    send_snapshot_to_tier(slot);
  }
  slot.published = slot.cache.size();
}

// Where a slot's prompt leaves hybrid snapshots is the memory's decision (PrefixCache::
// next_snapshot_point, none without a recurrent state); the scheduler cuts its prompt chunks
// there. A fake prefix has no state.
size_t Scheduler::next_snapshot_point(const Slot& slot) const {
  if (!prefix_cache_ || slot.fake_prefix) return 0;
  return prefix_cache_->next_snapshot_point(slot.n_prompt_done, slot.task->prompt.size(), slot.task->snapshot_points);
}

bool Scheduler::snapshot_point_at(const Slot& slot, size_t n) const {
  if (!prefix_cache_ || slot.fake_prefix) return false;
  return prefix_cache_->snapshot_belongs_at(n, slot.task->prompt.size(), slot.task->snapshot_points);
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
  for (const Slot& s : slots_) m.cached_tokens += s.cache.size();
  m.memory_bytes = memory_bytes_;
  if (const KvStatus kv = ctx_.kv_status(); kv.present) {
    m.kv_cells_used = kv.cells_used;
    m.kv_cells_total = kv.n_cells;
    m.kv_hot_cells_used = kv.hot_used;
    m.kv_tail_cells_used = kv.tail_used;
    m.kv_tail_bytes = kv.tail_bytes;
    m.kv_demotions_total = kv.demotions;
  }
  if (prefix_cache_) {
    const PrefixCacheStats st = prefix_cache_->stats();
    m.pages_cached = st.pages;
    m.pages_in_use = st.pages_in_use;
    m.pages_shared = st.pages_shared;
    m.pages_free = st.pages_free;
    m.kv_cells_cached = st.cached_cells;
    m.snapshot_count = st.snapshots;
    m.checkpoint_bytes = st.snapshot_bytes;
    m.checkpoint_count = st.snapshots;
  }
  return m;
}

Json Scheduler::memory_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Json{{"snapshot_spacing", prefix_cache_ ? prefix_cache_->snapshot_spacing() : 0},
              {"snapshot_bytes", prefix_cache_ ? prefix_cache_->snapshot_bytes_each() : 0},
              {"snapshot_budget_bytes", cfg_.checkpoint_bytes}};
}

Json Scheduler::slots_json(const CompletionParams& defaults, bool show_prompts) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Json out = Json::array();
  for (const Slot& s : slots_) {
    const bool busy = !s.idle();
    const CompletionParams& params = busy ? s.task->params : defaults;
    const int64_t n_remain = !busy || params.n_predict < 0 ? -1 : params.n_predict - s.n_decoded;
    // --kv-hot: where the slot's K/V rows are (its sequence id is its id)
    const std::pair<uint64_t, uint64_t> residency = ctx_.seq_residency(s.id);
    const SequencePages pages = prefix_cache_ ? prefix_cache_->pages_of(s.id) : SequencePages{};
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
        {"prompt", show_prompts ? tok_.decode(s.cache.tokens(), true) : std::string()},
        {"next_token", Json{{"has_next_token", busy},
                            {"has_new_line", s.has_new_line},
                            {"n_remain", n_remain},
                            {"n_decoded", s.n_decoded}}},
        {"n_tokens_cached", s.cache.size()},
        {"n_pages", (s.cache.size() + cfg_.page_tokens - 1) / cfg_.page_tokens},
        {"n_pages_cached", pages.pages},
        {"n_pages_shared", pages.shared},
        {"session_id", s.session_id},
        {"n_context_shifts", s.n_shifts},
        {"n_tokens_evicted", s.n_evicted},
        {"n_tokens_hot", residency.first},
        {"n_tokens_tail", residency.second},
    });
  }
  return out;
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
    try {
      status = ctx_.decode(batch);
    } catch (const std::exception& e) {
      status = -1;
      error = e.what();
    }
    lock.lock();
    after_decode(batch, status, error);
    verify_memory();
  }
}

void Scheduler::verify_memory() const {
  if (!verify_memory_ || !prefix_cache_) return;
  try {
    prefix_cache_->verify();
  } catch (const std::exception& e) {
    log_line("AGENTKV_CHECK_MEMORY: memory invariant broken: %s", e.what());
    std::abort();
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
    for (const Slot& s : slots_) {
      // A cache of another cache_salt is no candidate for prefix similarity.
      const std::span<const Token> cached =
          s.cache_salt == cache_namespace(task.params.cache_salt) ? s.cache.tokens() : std::span<const Token>();
      candidates.push_back({s.id, s.idle(), cached, s.last_used, s.session_id});
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

  // A cache filled under another cache_salt is another tenant's: it is not reused.
  const uint64_t salt = cache_namespace(p.cache_salt);
  if (slot.cache_salt != salt) {
    if (slot.cache.size() > 0) wipe(slot);
    slot.cache_salt = salt;
  }
  const size_t common = common_prefix(slot.cache.tokens(), prompt);
  const Token cached_at_divergence = common < slot.cache.size() ? slot.cache.tokens()[common] : -1;
  ReuseResult r;
  if (p.n_fake_cached > 0) {
    const size_t n_fake = static_cast<size_t>(p.n_fake_cached);
    if (n_fake >= prompt.size()) {  // the HTTP layer refuses this first
      task->channel->push({TaskEvent::Kind::Error, {}, {}, invalid_request("n_fake_cached must be below the prompt length")});
      return;
    }
    r.n_cached = slot.cache.size();
    wipe(slot);
    while (true) {
      try {
        ctx_.seq_fake_prefix(slot.id, static_cast<MemoryPos>(n_fake));
        break;
      } catch (const Error& e) {
        if (free_idle_memory()) continue;
        task->channel->push({TaskEvent::Kind::Error, {}, {}, invalid_request(std::string("n_fake_cached: ") + e.what())});
        return;
      }
    }
    slot.cache.assume(std::vector<Token>(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n_fake)));
    slot.fake_prefix = true;
    r.n_kept = n_fake;
    log_line("slot %d: fake prefix of %zu positions (metadata only)", slot.id, n_fake);
  } else {
    // A prompt evaluated without the cache replaces the slot's cache (as in llama-server): the
    // pages only this slot used go.
    if (!p.cache_prompt && prefix_cache_) {
      prefix_cache_->forget_own(slot.id);
      slot.forget_sent_beyond(0);
    }
    // Pages any slot computed (the prefix cache) when they give more than the slot's own cache.
    const size_t n_cached = slot.cache.size();
    if (p.cache_prompt) fetch_from_tier(slot, prompt);
    const size_t attached = p.cache_prompt ? attach_shared(slot, prompt, own_reuse_estimate(slot, prompt)) : 0;
    if (attached > 0) {
      r.n_cached = n_cached;
      r.n_common = common;
      r.n_kept = attached;
      ++metrics_.prefix_attaches_total;
      log_line("slot %d: attached %zu prompt tokens from cached pages", slot.id, attached);
    } else {
      r = slot.cache.reuse_for(prompt, p.cache_prompt, ctx_.memory(), slot.id, prefix_cache_, page_salt(slot));
    }
  }
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
  if (r.checkpoint_restored) {
    ++metrics_.checkpoints_restored_total;
    log_line("slot %d: rolled back to the checkpoint after token %zu (the recurrent snapshot on its page chain)",
             slot.id, r.n_kept);
  }

  // What was published beyond the kept prefix is gone from the slot: publish again from there.
  slot.forget_sent_beyond(slot.cache.size());
  slot.task = std::move(task);
  slot.state = SlotState::Prompt;
  slot.n_prompt_done = r.n_kept;
  slot.n_cache_reused = r.n_kept;
  SamplerParams sp = p.sampling;
  if (sp.seed == kRandomSeed) sp.seed = std::random_device{}();
  slot.sampler.emplace(sp);
  if (cfg_.embeddings && r.n_kept != 0) {  // every row is pooled: nothing may come from a cache
    wipe(slot);
    r = ReuseResult{};
  }
  slot.embedding.reset();
  if (cfg_.embeddings) slot.embedding.emplace(cfg_.pooling, ctx_.model().n_embd(), prompt.size());
  slot.stop_checker.emplace(p.stop);
  slot.grammar.reset();
  slot.probs.clear();
  slot.probs_sent = 0;
  if (p.grammar.grammar) {
    try {
      if (!token_trie_) {
        const auto t0 = Slot::Clock::now();
        token_trie_ = std::make_unique<grammar::TokenTrie>(tok_);
        log_line("grammar: token trie of %d tokens built in %.1f ms (%zu nodes)", token_trie_->n_vocab(),
                 ms_between(t0, Slot::Clock::now()), token_trie_->nodes().size());
      }
      slot.grammar.emplace(matchers_.get(p.grammar.grammar), *token_trie_, p.grammar);
    } catch (const std::exception& e) {
      fail(slot, invalid_request(std::string("grammar: ") + e.what()));
      return;
    }
  }
  slot.pending = -1;
  slot.n_decoded = 0;
  slot.generated_text.clear();
  slot.generated_tokens.clear();
  slot.tokens_sent = 0;
  slot.has_new_line = false;
  slot.t_start = t_launch;
  if (!slot.fake_prefix) metrics_.prompt_tokens_cached_total += r.n_kept;
  if (p.cache_prompt && !slot.fake_prefix) {
    metrics_.prefix_cache_queries_total += prompt.size();
    metrics_.prefix_cache_hits_total += r.n_kept;
  }
  send_progress(slot);  // what came from the cache
  if (r.use_saved_logits) {
    // The whole prompt and the logits after it are cached: sample now, evaluate nothing.
    ++metrics_.saved_logits_used_total;
    log_line("slot %d: the prompt is entirely cached with its logits: nothing to evaluate", slot.id);
    on_logits(slot, slot.cache.saved_logits(prompt.size()).data(), /*from_cache=*/true);
  }
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
    batch.add(s.pending, static_cast<MemoryPos>(s.cache.size()), {s.id}, true);
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
    size_t take = std::min(remaining, budget);
    // A snapshot point ends this chunk, so that the state there can be kept.
    const size_t point = next_snapshot_point(s);
    if (point > 0 && s.n_prompt_done + take > point) take = point - s.n_prompt_done;
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
    batch.add_sequence(prompt.data() + s.n_prompt_done, take, static_cast<MemoryPos>(s.n_prompt_done), s.id, last);
    if (last) s.batch_output = n_outputs++;
    budget -= take;
  }
  ++prompt_rotation_;
  return batch.size() > 0;
}

size_t Scheduler::cells_free_for(int slot_id) const { return ctx_.cells_free_for(slot_id); }

bool Scheduler::free_idle_memory(int except_slot) {
  // Cached pages no slot uses go first, least recently used first.
  if (prefix_cache_ && prefix_cache_->evict(cfg_.n_batch) > 0) return true;
  Slot* lru = nullptr;
  for (Slot& s : slots_)
    if (s.id != except_slot && s.idle() && s.cache.size() > 0 && (!lru || s.last_used < lru->last_used)) lru = &s;
  if (!lru) return false;
  log_line("slot %d: memory is full; dropping this idle slot's cache (%zu tokens)", lru->id, lru->cache.size());
  wipe(*lru);
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
  } else if (largest && cfg_.context_shift && shift_context(*largest)) {
    // The pool is n_ctx for all slots: full memory is where a lone slot's n_ctx would be.
  } else if (largest) {
    log_line("slot %d: memory is full (n_ctx %u shared by all slots): generation ends here", largest->id, cfg_.n_ctx);
    finish(*largest, StopType::Limit, /*truncated=*/true);
  } else if (reading) {
    // Should not happen: a prompt shorter than n_ctx fits once idle caches and unused pages are
    // gone (tests/server/test_liveness.py). Should it, it is a capacity condition, not a fault.
    log_line("slot %d: no room in memory for the prompt (%u cells, %zu free)", reading->id, cfg_.n_ctx,
             cells_free_for(reading->id));
    wipe(*reading);
    fail(*reading, HttpError(ErrorType::Unavailable, "no room in memory for the prompt; retry later"));
  }
}

void Scheduler::requeue(Slot& slot) {
  log_line("slot %d: memory is full: task %llu goes back to the queue until the other slots are done", slot.id,
           static_cast<unsigned long long>(slot.task->id));
  wipe(slot);
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
      wipe(s);
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
      send_progress(s);
      // The end of this turn's prompt, and the points next_snapshot_point cut the batches at.
      if (s.n_prompt_done == prompt.size() || snapshot_point_at(s, s.n_prompt_done)) take_checkpoint(s);
    }
    publish(s, /*with_tail=*/false);
    metrics_.n_tokens_max = std::max<uint64_t>(metrics_.n_tokens_max, s.cache.size());
    if (s.embedding) {
      for (int j = 0; j < s.batch_outputs; ++j) s.embedding->add(ctx_.embeddings(s.batch_output + j));
      if (s.n_prompt_done == s.task->prompt.size()) finish_embedding(s);
      continue;
    }
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

void Scheduler::on_logits(Slot& slot, const float* logits, bool from_cache) {
  const CompletionParams& p = slot.task->params;
  const auto now = Slot::Clock::now();
  const size_t n_vocab = static_cast<size_t>(ctx_.model().n_vocab());
  if (slot.state == SlotState::Prompt) {
    slot.state = SlotState::Generating;
    if (!from_cache && !slot.fake_prefix) slot.cache.keep_logits({logits, n_vocab});
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
  Token id = -1;
  if (slot.grammar) {
    id = slot.grammar->sample(*slot.sampler, to_sample, ctx_.model().n_vocab(), slot.cache.tokens(), slot.grammar_logits);
    if (id < 0) {
      log_line("slot %d: the grammar allows no token here: generation ends", slot.id);
      finish(slot, StopType::Eos);
      return;
    }
  } else {
    id = slot.sampler->sample(to_sample, ctx_.model().n_vocab(), slot.cache.tokens());
  }
  ++slot.n_decoded;
  slot.pending = id;
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
    const std::string piece = tok_.token_to_piece(id, /*special=*/false);
    if (slot.grammar) slot.grammar->accept(id, piece);
    if (piece.find('\n') != std::string::npos) slot.has_new_line = true;
    if (p.return_tokens) slot.generated_tokens.push_back(id);
    StopChecker::Step step = slot.stop_checker->push(piece);
    text = std::move(step.text);
    if (step.stopped) stop = StopType::Word;
  }
  if (stop == StopType::None && p.n_predict >= 0 && slot.n_decoded >= p.n_predict) stop = StopType::Limit;
  // --kv-budget shifts before the context is full; the context's end always does.
  const bool over_budget = cfg_.context_shift && cfg_.kv_budget > 0 && slot.cache.size() + 1 >= cfg_.kv_budget;
  if (stop == StopType::None && over_budget && slot.cache.size() + 1 < cfg_.n_ctx) shift_context(slot);
  if (stop == StopType::None && slot.cache.size() + 1 >= cfg_.n_ctx && !(cfg_.context_shift && shift_context(slot))) {
    stop = StopType::Limit;  // the next token would not fit: llama-server's "truncated"
    truncated = true;
  }
  if (stop != StopType::None && stop != StopType::Word) text += slot.stop_checker->flush();
  // The logits after the last cached token: a later prompt equal to the cache needs no evaluation.
  if (stop != StopType::None && slot.n_decoded > 1 && !slot.fake_prefix) slot.cache.keep_logits({logits, n_vocab});
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
  const int n_past = static_cast<int>(slot.cache.size());
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
  std::vector<Token> tokens = slot.cache.tokens();
  for (auto it = dropped.rbegin(); it != dropped.rend(); ++it) tokens.erase(tokens.begin() + *it);
  slot.cache.assume(std::move(tokens));
  // What a later prefill computes again is only the front no shift has touched.
  const size_t untouched = static_cast<size_t>(dropped.front());
  slot.shift_keep = slot.shifted ? std::min(slot.shift_keep, untouched) : untouched;
  slot.shifted = true;
  ++metrics_.context_shifts_total;
  metrics_.evicted_tokens_total[static_cast<size_t>(req.policy)] += dropped.size();
  ++slot.n_shifts;
  slot.n_evicted += dropped.size();
  return true;
}

void Scheduler::finish(Slot& slot, StopType stop, bool truncated) {
  const auto now = Slot::Clock::now();
  truncated = truncated || slot.shifted;  // llama-server reports a shifted generation as truncated
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
  r.n_cached = static_cast<int32_t>(slot.cache.size());
  r.timings = timings_of(slot, now);
  r.probs.assign(slot.probs.begin() + static_cast<std::ptrdiff_t>(slot.task->params.stream ? slot.probs_sent : 0),
                 slot.probs.end());
  if (slot.n_decoded > 0) take_checkpoint(slot);  // the end of this turn's generation
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
           r.n_decoded, r.timings.predicted_ms, slot.cache.size());
  slot.task->channel->push({TaskEvent::Kind::Final, {}, std::move(r), std::nullopt});
  release(slot);
}

void Scheduler::finish_embedding(Slot& slot) {
  const auto now = Slot::Clock::now();
  FinalResult r;
  r.id_slot = slot.id;
  r.n_prompt = static_cast<int32_t>(slot.task->prompt.size());
  r.n_cached = static_cast<int32_t>(slot.cache.size());
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

void Scheduler::release(Slot& slot) {
  // A fake prefix is no cache: its cells hold zeros, not the prompt's keys.
  if (slot.fake_prefix) wipe(slot);
  if (slot.shifted) {  // only the front the shift kept is what a prefill computes (shifts need a dense memory)
    if (!slot.cache.keep_first(slot.shift_keep, ctx_.memory(), slot.id)) wipe(slot);
    slot.forget_sent_beyond(slot.cache.size());
    slot.shifted = false;
  }
  publish(slot, /*with_tail=*/true);
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
  slot.tail_at = slot.cache.size();
  slot.pending = -1;
}

std::vector<std::vector<Token>> Scheduler::cached_sequences() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::vector<Token>> out;
  for (const Slot& s : slots_) {
    if (s.fake_prefix || s.cache.size() == 0) continue;
    out.push_back(s.cache.tokens());
    // A finished answer ends with a token that was sampled, not evaluated: with it the cached text
    // reaches the answer's end, where the next prompt's own tokenization resumes.
    if (s.idle() && s.unevaluated_tail >= 0 && s.tail_at == s.cache.size()) out.back().push_back(s.unevaluated_tail);
  }
  return out;
}

}  // namespace agentkv::server
