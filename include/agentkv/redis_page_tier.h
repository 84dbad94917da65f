// Pages shared between instances through Redis (issue 19; docs/deploy.md): a PageTier whose records
// are written in the background as pages fill and read with one MGET when a prompt's chain
// continues past what this instance holds. Redis being down or slow never fails a request: reads
// return nothing (the prompt is computed), writes are dropped, and the connection is retried after
// a pause. Keys are "agentkv:page:<chain hash>"; the chain hash already names the model, KV types,
// page size and cache salt. Redis's own maxmemory policy bounds the tier (allkeys-lru recommended).
// The memory implements it (src/memory/redis_page_tier.h), beside the disk and warm tiers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agentkv/page_tier.h"

namespace agentkv {

struct RedisTierConfig {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  int timeout_ms = 250;                 // connect and per-command limit
  size_t max_queued_bytes = 256u << 20;  // writes waiting beyond this are dropped
  std::function<void(const std::string&)> log;  // connection changes, one line each (none: silent)
};
// redis://HOST[:PORT][/DB]; throws std::invalid_argument otherwise.
RedisTierConfig parse_redis_url(const std::string& url);

struct RedisTierStats {
  uint64_t pages_written = 0, write_errors = 0, writes_dropped = 0;
  uint64_t pages_fetched = 0, fetch_misses = 0, fetch_errors = 0;
  bool connected = false;
};

class RedisPageTier : public PageTier {
 public:
  virtual RedisTierStats stats() const = 0;
  // Waits until every queued write was sent (or dropped): tests and shutdown.
  virtual void flush() = 0;
};

// Connects lazily (a server that is down is retried, never an error).
std::unique_ptr<RedisPageTier> open_redis_page_tier(RedisTierConfig cfg);

}  // namespace agentkv
