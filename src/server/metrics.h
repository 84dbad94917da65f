// Server counters and their Prometheus text, with llama-server's metric names (prefix
// "llamacpp:") so existing dashboards and scrapers work unchanged.
#pragma once
#include <cstdint>
#include <string>

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
  int requests_processing = 0;
  int requests_deferred = 0;
};

// Prometheus exposition format (text/plain; version=0.0.4).
std::string prometheus_text(const MetricsSnapshot& m);

}  // namespace agentkv::server
