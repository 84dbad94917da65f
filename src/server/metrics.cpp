#include "server/metrics.h"

#include "agentkv/evict_policy.h"

#include <cstdio>

namespace agentkv::server {

namespace {
void add_metric(std::string& out, const char* type, const char* name, const char* help, double value) {
  char number[64];
  std::snprintf(number, sizeof(number), "%.17g", value);
  out += std::string("# HELP llamacpp:") + name + " " + help + "\n";
  out += std::string("# TYPE llamacpp:") + name + " " + type + "\n";
  out += std::string("llamacpp:") + name + " " + number + "\n";
}
double rate(double n, double ms) { return ms > 0.0 ? 1e3 * n / ms : 0.0; }
}  // namespace

std::string prometheus_text(const MetricsSnapshot& m) {
  std::string out;
  add_metric(out, "counter", "prompt_tokens_total", "Number of prompt tokens processed.",
             static_cast<double>(m.prompt_tokens_total));
  add_metric(out, "counter", "prompt_seconds_total", "Prompt process time", m.prompt_ms_total / 1e3);
  add_metric(out, "counter", "tokens_predicted_total", "Number of generation tokens processed.",
             static_cast<double>(m.tokens_predicted_total));
  add_metric(out, "counter", "tokens_predicted_seconds_total", "Predict process time", m.predicted_ms_total / 1e3);
  add_metric(out, "counter", "n_decode_total", "Total number of llama_decode() calls",
             static_cast<double>(m.n_decode_total));
  add_metric(out, "counter", "n_tokens_max", "Largest observed n_tokens.", static_cast<double>(m.n_tokens_max));
  add_metric(out, "counter", "prompt_tokens_cached_total", "Number of prompt tokens reused from slot caches.",
             static_cast<double>(m.prompt_tokens_cached_total));
  add_metric(out, "counter", "checkpoints_taken_total", "Recurrent snapshots taken on page chains (hybrid models; llama-server's context checkpoints).",
             static_cast<double>(m.checkpoints_taken_total));
  add_metric(out, "counter", "checkpoints_restored_total", "Rollbacks of a slot to a recurrent snapshot on its page chain.",
             static_cast<double>(m.checkpoints_restored_total));
  add_metric(out, "counter", "saved_logits_used_total", "Prompts answered from saved logits (no token evaluated).",
             static_cast<double>(m.saved_logits_used_total));
  add_metric(out, "counter", "slot_states_saved_total", "Slot states saved (slot save, prefill).",
             static_cast<double>(m.slot_states_saved_total));
  add_metric(out, "counter", "slot_states_restored_total", "Slot states restored (slot restore, adopt).",
             static_cast<double>(m.slot_states_restored_total));
  const double prompt_all = static_cast<double>(m.prompt_tokens_total + m.prompt_tokens_cached_total);
  add_metric(out, "gauge", "prompt_cache_hit_rate", "Prompt tokens reused / prompt tokens, since start.",
             prompt_all > 0 ? static_cast<double>(m.prompt_tokens_cached_total) / prompt_all : 0.0);
  add_metric(out, "gauge", "checkpoint_bytes", "Bytes held by recurrent snapshots.",
             static_cast<double>(m.checkpoint_bytes));
  add_metric(out, "gauge", "checkpoints", "Recurrent snapshots held.", static_cast<double>(m.checkpoint_count));
  add_metric(out, "counter", "prefix_cache_queries_total", "Prompt tokens looked up in the prefix index.",
             static_cast<double>(m.prefix_cache_queries_total));
  add_metric(out, "counter", "prefix_cache_hits_total", "Prompt tokens attached from cached pages.",
             static_cast<double>(m.prefix_cache_hits_total));
  add_metric(out, "counter", "prefix_attaches_total", "Prompts that attached pages another task computed.",
             static_cast<double>(m.prefix_attaches_total));
  add_metric(out, "gauge", "pages_cached", "KV pages the prefix index names.", static_cast<double>(m.pages_cached));
  add_metric(out, "gauge", "pages_in_use", "Cached KV pages some slot uses now.", static_cast<double>(m.pages_in_use));
  add_metric(out, "gauge", "pages_shared", "Cached KV pages two or more slots use (stored once).",
             static_cast<double>(m.pages_shared));
  add_metric(out, "gauge", "pages_free", "Empty KV cells, in pages.", static_cast<double>(m.pages_free));
  add_metric(out, "gauge", "kv_cells_cached", "KV cells the prefix cache holds (slots may use them too).",
             static_cast<double>(m.kv_cells_cached));
  add_metric(out, "gauge", "kv_window_cells_cached",
             "Sliding-window rows (window-part cells) the prefix cache's pages hold, so a prompt resumes where it leaves them (--swa-cache).",
             static_cast<double>(m.kv_window_cells_cached));
  add_metric(out, "counter", "context_shifts_total", "Context shifts (--context-shift) of generations that reached n_ctx.",
             static_cast<double>(m.context_shifts_total));
  for (EvictPolicy p : {EvictPolicy::Positional, EvictPolicy::Sinks, EvictPolicy::KeyDiff, EvictPolicy::SnapKV}) {
    const std::string name = std::string("evicted_tokens_") + evict_policy_name(p) + "_total";
    const std::string help = std::string("Positions context shifts dropped with the ") + evict_policy_name(p) + " policy.";
    add_metric(out, "counter", name.c_str(), help.c_str(), static_cast<double>(m.evicted_tokens_total[static_cast<size_t>(p)]));
  }
  add_metric(out, "counter", "tier_pages_sent_total", "Pages offered to the shared page tier.",
             static_cast<double>(m.tier_pages_sent_total));
  add_metric(out, "counter", "tier_pages_fetched_total", "Pages brought in from the shared page tier.",
             static_cast<double>(m.tier_pages_fetched_total));
  add_metric(out, "counter", "tier_pages_refused_total", "Shared-tier records that were not the page expected.",
             static_cast<double>(m.tier_pages_refused_total));
  add_metric(out, "counter", "tier_snapshots_sent_total", "Hybrid recurrent snapshots offered to the page tier.",
             static_cast<double>(m.tier_snapshots_sent_total));
  add_metric(out, "counter", "tier_snapshots_fetched_total", "Hybrid recurrent snapshots brought in from the page tier.",
             static_cast<double>(m.tier_snapshots_fetched_total));
  add_metric(out, "gauge", "kv_cells_used", "KV cells in use (slots and cached pages).",
             static_cast<double>(m.kv_cells_used));
  add_metric(out, "gauge", "kv_cells_total", "KV cells of the memory.", static_cast<double>(m.kv_cells_total));
  add_metric(out, "gauge", "kv_hot_cells_used", "KV cells in use whose rows are hot (--kv-hot; all of them without it).",
             static_cast<double>(m.kv_hot_cells_used));
  add_metric(out, "gauge", "kv_tail_cells_used", "KV cells in use whose rows are in the tail (--kv-hot).",
             static_cast<double>(m.kv_tail_cells_used));
  add_metric(out, "gauge", "kv_tail_bytes", "Bytes reserved for tail K/V rows (--kv-hot).", static_cast<double>(m.kv_tail_bytes));
  add_metric(out, "counter", "kv_demotions_total", "KV cells whose rows moved from hot to the tail (--kv-hot).",
             static_cast<double>(m.kv_demotions_total));
  add_metric(out, "counter", "draft_tokens_total", "Speculative decoding: drafted tokens verified (--spec-type).",
             static_cast<double>(m.drafts_total));
  add_metric(out, "counter", "draft_tokens_accepted_total", "Speculative decoding: drafted tokens accepted.",
             static_cast<double>(m.drafts_accepted_total));
  add_metric(out, "counter", "draft_tokens_replayed_total",
             "Speculative decoding: accepted tokens evaluated a second time after a rejection (0 while every hybrid "
             "state replays them from the pass's recorded inputs).",
             static_cast<double>(m.drafts_replayed_total));
  add_metric(out, "gauge", "draft_acceptance_rate", "Speculative decoding: accepted / drafted since start (0: none drafted).",
             m.drafts_total > 0 ? static_cast<double>(m.drafts_accepted_total) / static_cast<double>(m.drafts_total) : 0.0);
  add_metric(out, "gauge", "snapshots", "Recurrent-state snapshots attached to cached pages (hybrid models).",
             static_cast<double>(m.snapshot_count));
  add_metric(out, "gauge", "memory_bytes", "Bytes of K/V rows and recurrent states held by all slots.",
             static_cast<double>(m.memory_bytes));
  add_metric(out, "gauge", "kv_bytes_slot_max", "The most K/V bytes one slot's sequence holds (full layers' rows + its sliding window).",
             static_cast<double>(m.kv_bytes_slot_max));
  add_metric(out, "gauge", "kv_window_bytes", "K/V bytes the slots hold for sliding-window layers (only their windows; 0 with --swa-full).",
             static_cast<double>(m.kv_window_bytes));
  add_metric(out, "gauge", "cached_tokens", "Tokens held by all slots' caches.", static_cast<double>(m.cached_tokens));
  add_metric(out, "gauge", "n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             m.n_decode_total ? static_cast<double>(m.n_busy_slots_total) / static_cast<double>(m.n_decode_total) : 0.0);
  add_metric(out, "gauge", "prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
             rate(static_cast<double>(m.prompt_tokens_total), m.prompt_ms_total));
  add_metric(out, "gauge", "predicted_tokens_seconds", "Average generation throughput in tokens/s.",
             rate(static_cast<double>(m.tokens_predicted_total), m.predicted_ms_total));
  add_metric(out, "gauge", "requests_processing", "Number of requests processing.", m.requests_processing);
  add_metric(out, "gauge", "requests_deferred", "Number of requests deferred.", m.requests_deferred);
  return out;
}

std::string prometheus_text(const DiskTierStats& d) {
  std::string out;
  add_metric(out, "gauge", "disk_tier_pages", "KV page records in the --cache-dir folder.", static_cast<double>(d.pages_on_disk));
  add_metric(out, "gauge", "disk_tier_bytes", "Bytes of those records.", static_cast<double>(d.bytes_on_disk));
  add_metric(out, "gauge", "disk_tier_pages_found_at_start", "Records the folder held when the server started.",
             static_cast<double>(d.pages_found_at_start));
  add_metric(out, "gauge", "disk_tier_writes_pending", "Records waiting to be written.",
             static_cast<double>(d.writes_pending));
  add_metric(out, "counter", "disk_tier_pages_written_total", "Records written.", static_cast<double>(d.pages_written));
  add_metric(out, "counter", "disk_tier_pages_read_total", "Records read.", static_cast<double>(d.pages_read));
  add_metric(out, "counter", "disk_tier_misses_total", "Records asked for that the folder did not hold.",
             static_cast<double>(d.misses));
  add_metric(out, "counter", "disk_tier_loaded_bytes_total", "Bytes of the records read.", static_cast<double>(d.bytes_read));
  add_metric(out, "counter", "disk_tier_load_seconds_total", "Time spent reading records.", d.load_seconds);
  add_metric(out, "counter", "disk_tier_write_errors_total", "Records that could not be written.",
             static_cast<double>(d.write_errors));
  add_metric(out, "counter", "disk_tier_writes_dropped_total", "Records dropped: too many waiting to be written.",
             static_cast<double>(d.writes_dropped));
  add_metric(out, "counter", "disk_tier_pages_forgotten_total", "Records deleted after their reader refused them.",
             static_cast<double>(d.pages_forgotten));
  add_metric(out, "counter", "disk_tier_pages_evicted_total", "Records deleted to stay within --cache-dir-mib.",
             static_cast<double>(d.pages_evicted));
  return out;
}

std::string prometheus_text(const VisionEncoder::Stats& v) {
  std::string out;
  add_metric(out, "counter", "images_encoded_total", "Images decoded and run through the vision projector.",
             static_cast<double>(v.images_encoded));
  add_metric(out, "counter", "image_cache_hits_total", "Images found in the encoder cache (not encoded again).",
             static_cast<double>(v.cache_hits));
  add_metric(out, "counter", "image_encode_seconds_total", "Time spent decoding and encoding images.", v.encode_seconds);
  add_metric(out, "gauge", "image_cache_bytes", "Bytes of image rows the encoder cache holds.",
             static_cast<double>(v.cache_bytes));
  return out;
}

std::string prometheus_text(const WarmTierStats& w) {
  std::string out;
  auto num = [](auto v) { return static_cast<double>(v); };
  add_metric(out, "gauge", "warm_tier_pages", "KV page records held compressed in RAM (--cache-warm).", num(w.pages));
  add_metric(out, "gauge", "warm_tier_bytes", "Compressed bytes of those records.", num(w.bytes));
  add_metric(out, "gauge", "warm_tier_record_bytes", "Their bytes uncompressed.", num(w.raw_bytes));
  add_metric(out, "gauge", "warm_tier_stores_pending", "Records waiting to be compressed.", num(w.pending));
  add_metric(out, "counter", "warm_tier_pages_stored_total", "Records compressed and kept.", num(w.pages_stored));
  add_metric(out, "counter", "warm_tier_stores_dropped_total", "Records dropped: too many waiting, or larger than the tier.",
             num(w.stores_dropped));
  add_metric(out, "counter", "warm_tier_pages_evicted_total", "Records dropped to stay within --cache-warm.",
             num(w.pages_evicted));
  add_metric(out, "counter", "warm_tier_pages_forgotten_total", "Records dropped after their reader refused them.",
             num(w.pages_forgotten));
  add_metric(out, "counter", "warm_tier_hits_total", "Records asked for and found.", num(w.hits));
  add_metric(out, "counter", "warm_tier_misses_total", "Records asked for and not held.", num(w.misses));
  add_metric(out, "counter", "warm_tier_compress_seconds_total", "Time spent compressing records.", w.compress_seconds);
  add_metric(out, "counter", "warm_tier_load_seconds_total", "Time spent decompressing records asked for.",
             w.decompress_seconds);
  add_metric(out, "counter", "warm_tier_loaded_bytes_total", "Record bytes produced by those loads.",
             num(w.bytes_decompressed));
  return out;
}

}  // namespace agentkv::server
