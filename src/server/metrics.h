// Server counters and their Prometheus text, with llama-server's metric names (prefix
// "llamacpp:") so existing dashboards and scrapers work unchanged.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "agentkv/page_tier.h"
#include "agentkv/vision.h"

namespace agentkv::server {

struct MetricsSnapshot {
  uint64_t prompt_tokens_total = 0;     // prompt tokens evaluated (cached ones excluded)
  double prompt_ms_total = 0.0;
  uint64_t tokens_predicted_total = 0;
  double predicted_ms_total = 0.0;
  uint64_t n_decode_total = 0;          // decode calls
  uint64_t n_busy_slots_total = 0;      // sum over decode calls of the slots in the batch
  uint64_t n_tokens_max = 0;            // largest sequence seen (prompt + generated)
  uint64_t prompt_tokens_cached_total = 0;  // agentkv addition: prompt tokens reused from caches
  uint64_t checkpoints_taken_total = 0;     // hybrid models: recurrent snapshots taken on page chains
  uint64_t checkpoints_restored_total = 0;  // ... and a slot rolled back to (its own snapshot)
  uint64_t saved_logits_used_total = 0;     // prompts answered from saved logits (nothing evaluated)
  uint64_t slot_states_saved_total = 0;     // slot save, prefill
  uint64_t slot_states_restored_total = 0;  // slot restore, adopt
  uint64_t checkpoint_bytes = 0;            // gauge: bytes the index's snapshots hold
  uint64_t checkpoint_count = 0;            // gauge: snapshots held
  uint64_t cached_tokens = 0;               // gauge: tokens all slots' caches hold
  uint64_t memory_bytes = 0;                // gauge: K/V rows + recurrent states held (at the last task end)
  uint64_t kv_bytes_slot_max = 0;           // gauge: the most K/V bytes one slot's sequence holds (main + window part)
  uint64_t kv_window_bytes = 0;             // gauge: K/V bytes the slots hold in the window part (sliding-window layers)
  uint64_t prefix_cache_queries_total = 0;  // prompt tokens looked up in the prefix index (vLLM's name)
  uint64_t prefix_cache_hits_total = 0;     // ... of which came from the slot's own cache or cached pages
  uint64_t prefix_attaches_total = 0;       // prompts that attached cached pages (not their slot's own cache)
  uint64_t pages_cached = 0;                // gauge: pages the prefix index names
  uint64_t pages_in_use = 0;                // gauge: ... that some slot uses now
  uint64_t pages_shared = 0;                // gauge: ... that two or more slots use (stored once)
  uint64_t pages_free = 0;                  // gauge: empty KV cells, in pages
  uint64_t kv_cells_cached = 0;             // gauge: KV cells the prefix cache holds (some also used by slots)
  uint64_t kv_window_cells_cached = 0;      // gauge: window-part cells cached pages hold (sliding-window models, --swa-cache)
  uint64_t context_shifts_total = 0;        // --context-shift: generations that dropped the middle of their sequence
  std::array<uint64_t, 4> evicted_tokens_total{};  // ... positions they dropped, per policy (EvictPolicy order)
  uint64_t tier_pages_sent_total = 0;       // pages offered to the shared page tier (--cache-redis)
  uint64_t tier_pages_fetched_total = 0;    // ... and brought in from it
  uint64_t tier_pages_refused_total = 0;    // ... records that were not the page expected
  uint64_t tier_snapshots_sent_total = 0;   // hybrid: recurrent snapshots offered to the page tier
  uint64_t tier_snapshots_fetched_total = 0;  // ... and brought in from it
  uint64_t kv_cells_used = 0;               // gauge: KV cells in use (slots and cached pages)
  uint64_t kv_cells_total = 0;              // gauge
  uint64_t kv_hot_cells_used = 0;           // gauge: --kv-hot: used cells whose rows are hot
  uint64_t kv_tail_cells_used = 0;          // gauge: ... whose rows are in the tail
  uint64_t kv_tail_bytes = 0;               // gauge: the tail's K/V storage
  uint64_t kv_demotions_total = 0;          // cells whose rows moved from hot to the tail
  uint64_t snapshot_count = 0;              // gauge: hybrid snapshots attached to pages
  uint64_t drafts_total = 0;                // speculative decoding: drafted tokens verified
  uint64_t drafts_accepted_total = 0;       // ... and accepted
  uint64_t drafts_replayed_total = 0;       // accepted tokens evaluated again (a recurrent state that could not replay them)
  int requests_processing = 0;
  int requests_deferred = 0;
};

// Prometheus exposition format (text/plain; version=0.0.4).
std::string prometheus_text(const MetricsSnapshot& m);
// The disk page tier's figures (--cache-dir), appended to the above when it is on.
std::string prometheus_text(const DiskTierStats& d);
std::string prometheus_text(const WarmTierStats& w);
std::string prometheus_text(const VisionEncoder::Stats& v);

}  // namespace agentkv::server
