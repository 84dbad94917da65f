// The scheduler's slot actions (save, restore, erase, cache lookup): jobs run on the scheduler thread
// between two steps, while the caller waits.
#include "server/scheduler.h"

#include "agentkv/error.h"
#include "agentkv/session_state.h"
#include "server/server_log.h"

namespace agentkv::server {

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
  if (memory_->fake(slot.id)) throw HttpError(ErrorType::InvalidRequest, "a slot holding a fake prefix cannot be saved");
  if (!memory_->exact(slot.id))
    throw HttpError(ErrorType::InvalidRequest, "a slot whose context is being shifted cannot be saved");
  SaveOptions o;
  o.with_tokens = true;
  o.tokens = cached(slot);
  o.logits = memory_->saved_logits(slot.id, o.tokens.size());
  // The recurrent snapshots on the slot's page chain travel as the state's checkpoints.
  if (prefix_cache()) o.snapshots_salt = memory_->page_salt(slot.id, memory_->cache_namespace_of(slot.id));
  return save_seq(ctx_, slot.id, o);
}

SlotStateBlob Scheduler::save_slot(int id) {
  SlotStateBlob out;
  run_job([&] {
    const Slot& slot = idle_slot(id);
    out.blob = save_state(slot);
    out.n_tokens = cached(slot).size();
    ++metrics_.slot_states_saved_total;
    log_line("slot %d: state saved (%zu tokens, %zu bytes)", id, out.n_tokens, out.blob.size());
  });
  return out;
}

size_t Scheduler::cached_prefix(std::span<const Token> prompt, const std::string& cache_salt) {
  size_t best = 0;
  run_job([&] { best = memory_->cached_prefix(prompt, cache_namespace(cache_salt)); });
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
    // Room: the memory frees what it may; cells held by busy slots are a capacity condition of
    // the server (503), not a fault of the request.
    const size_t needed = decoded.kv_cells;
    if (!memory_->make_room_for(slot.id, needed))
      throw HttpError(ErrorType::Unavailable, what + ": needs " + std::to_string(needed) + " memory cells, " +
                                                  std::to_string(ctx_.cells_free_for(slot.id)) +
                                                  " are free while other slots are busy; retry later");
    LoadedState st;
    try {
      // Pages already cached are attached rather than copied from the state (a state file carries
      // no salt: its pages are the unsalted ones).
      st = load_seq(ctx_, blob, slot.id, what, memory_->page_salt(slot.id, 0));
    } catch (const Error& e) {
      throw HttpError(ErrorType::InvalidRequest, e.what());
    }
    const MemoryPos last = ctx_.memory().seq_pos_max(slot.id);
    if (static_cast<size_t>(last + 1) != st.tokens.size()) {
      memory_->wipe(slot.id);
      throw HttpError(ErrorType::InvalidRequest, what + ": holds " + std::to_string(last + 1) + " positions but " +
                                                     std::to_string(st.tokens.size()) + " tokens");
    }
    n_tokens = st.tokens.size();
    const size_t n_checkpoints = st.checkpoints.size();
    const size_t n_shared = st.n_shared;
    const bool with_logits = !st.logits.empty();
    slot.last_used = ++use_counter_;
    memory_->restored(slot.id, std::move(st.tokens), std::move(st.logits));
    // The state's checkpoints become snapshots on its pages, and its present recurrent state one more.
    if (prefix_cache() && ctx_.needs_snapshots() && n_tokens > 0) {
      adopt_checkpoints(ctx_, cached(slot), memory_->page_salt(slot.id, 0), std::move(st.checkpoints));
      memory_->keep_state(slot.id);
    }
    ++metrics_.slot_states_restored_total;
    log_line("slot %d: state restored from %s (%zu tokens%s, %zu checkpoints, %zu tokens from cached pages)", id,
             what.c_str(), n_tokens, with_logits ? ", with logits" : "", n_checkpoints,
             n_shared);
  });
  return n_tokens;
}

size_t Scheduler::erase_slot(int id) {
  size_t n_tokens = 0;
  run_job([&] {
    Slot& slot = idle_slot(id);
    n_tokens = cached(slot).size();
    memory_->wipe(slot.id);
    log_line("slot %d: cache erased (%zu tokens)", id, n_tokens);
  });
  return n_tokens;
}

}  // namespace agentkv::server
