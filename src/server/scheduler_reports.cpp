// What the scheduler reports: /metrics, /slots, /props' memory, and the slots' cached tokens.
#include "server/scheduler.h"

#include <algorithm>

#include "agentkv/kv_status.h"

namespace agentkv::server {

MetricsSnapshot Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MetricsSnapshot m = metrics_;
  m.requests_processing = static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.idle(); }));
  m.requests_deferred = static_cast<int>(queue_.size());
  for (const Slot& s : slots_) m.cached_tokens += cached(s).size();
  const RequestMemoryCounters c = memory_->counters();
  m.prefix_attaches_total = c.shared_attaches;
  m.checkpoints_taken_total = c.snapshots_taken;
  m.checkpoints_restored_total = c.snapshots_restored;
  m.tier_pages_sent_total = c.tier_pages_sent;
  m.tier_pages_fetched_total = c.tier_pages_fetched;
  m.tier_pages_refused_total = c.tier_pages_refused;
  m.tier_snapshots_sent_total = c.tier_snapshots_sent;
  m.tier_snapshots_fetched_total = c.tier_snapshots_fetched;
  m.memory_bytes = memory_bytes_;
  for (const Slot& s : slots_) {
    const SeqKvBytes b = seq_kv_bytes(ctx_, s.id);
    m.kv_bytes_slot_max = std::max<uint64_t>(m.kv_bytes_slot_max, b.total());
    m.kv_window_bytes += b.window;
  }
  if (const KvStatus kv = kv_status(ctx_); kv.present) {
    m.kv_cells_used = kv.cells_used;
    m.kv_cells_total = kv.n_cells;
    m.kv_hot_cells_used = kv.hot_used;
    m.kv_tail_cells_used = kv.tail_used;
    m.kv_tail_bytes = kv.tail_bytes;
    m.kv_demotions_total = kv.demotions;
  }
  if (prefix_cache()) {
    const PrefixCacheStats st = prefix_cache()->stats();
    m.pages_cached = st.pages;
    m.pages_in_use = st.pages_in_use;
    m.pages_shared = st.pages_shared;
    m.pages_free = st.pages_free;
    m.kv_cells_cached = st.cached_cells;
    m.kv_window_cells_cached = st.window_cells;
    m.snapshot_count = st.snapshots;
    m.checkpoint_bytes = st.snapshot_bytes;
    m.checkpoint_count = st.snapshots;
  }
  return m;
}

Json Scheduler::memory_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Json{{"snapshot_spacing", prefix_cache() ? prefix_cache()->snapshot_spacing() : 0},
              {"snapshot_bytes", prefix_cache() ? prefix_cache()->snapshot_bytes_each() : 0},
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
    const std::pair<uint64_t, uint64_t> residency = seq_residency(ctx_, s.id);
    const SequencePages pages = prefix_cache() ? prefix_cache()->pages_of(s.id) : SequencePages{};
    const SeqKvBytes kv_bytes = seq_kv_bytes(ctx_, s.id);
    out.push_back(Json{
        {"id", s.id},
        {"id_task", busy ? static_cast<int64_t>(s.task->id) : -1},
        {"n_ctx", cfg_.n_ctx},
        {"speculative", params.spec_n_max > 0},
        {"is_processing", busy},
        {"params", params.to_json()},
        {"n_prompt_tokens", busy ? s.task->prompt.size() : 0},
        {"n_prompt_tokens_processed", busy ? s.n_prompt_done - s.n_cache_reused : 0},
        {"n_prompt_tokens_cache", busy ? s.n_cache_reused : 0},
        {"prompt", show_prompts ? tok_.decode(cached(s), true) : std::string()},
        {"next_token", Json{{"has_next_token", busy},
                            {"has_new_line", s.has_new_line},
                            {"n_remain", n_remain},
                            {"n_decoded", s.n_decoded}}},
        {"n_tokens_cached", cached(s).size()},
        {"n_pages", (cached(s).size() + cfg_.page_tokens - 1) / cfg_.page_tokens},
        {"n_pages_cached", pages.pages},
        {"n_pages_shared", pages.shared},
        {"session_id", s.session_id},
        {"n_context_shifts", s.n_shifts},
        {"n_tokens_evicted", s.n_evicted},
        {"n_tokens_hot", residency.first},
        {"n_tokens_tail", residency.second},
        {"kv_bytes", kv_bytes.total()},
        {"kv_bytes_window", kv_bytes.window},
        {"n_draft_tokens", s.n_drafted},
        {"n_draft_tokens_accepted", s.n_drafts_accepted},
    });
  }
  return out;
}

AlignedPrompt Scheduler::align_prompt(const Tokenizer& tok, std::string_view text, const std::vector<Token>& plain,
                                     const std::string& cache_salt, std::span<const Token> before) const {
  std::lock_guard<std::mutex> lock(mutex_);
  // The last token a finished task sampled is not in its sequence (never evaluated); the memory
  // aligns to the sequence's tokens with it.
  std::vector<Token> unevaluated(slots_.size(), -1);
  for (const Slot& s : slots_)
    if (s.idle() && s.unevaluated_tail >= 0 && s.tail_at == cached(s).size())
      unevaluated[static_cast<size_t>(s.id)] = s.unevaluated_tail;
  return memory_->align_prompt(tok, text, plain, cache_namespace(cache_salt), unevaluated, before);
}

}  // namespace agentkv::server
