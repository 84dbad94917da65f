// Pages shared between instances through Redis (issue 19; docs/deploy.md): records are written in
// the background as pages fill and read with one MGET when a prompt's chain continues past what
// this instance holds. Redis being down or slow never fails a request: reads return nothing (the
// prompt is computed), writes are dropped, and the connection is retried after a pause. Keys are
// "agentkv:page:<chain hash>"; the chain hash already names the model, KV types, page size and
// cache salt. Redis's own maxmemory policy bounds the tier (allkeys-lru recommended).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "agentkv/page_tier.h"

struct redisContext;

namespace agentkv::server {

struct RedisTierConfig {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  int timeout_ms = 250;                 // connect and per-command limit
  size_t max_queued_bytes = 256u << 20;  // writes waiting beyond this are dropped
};
// redis://HOST[:PORT][/DB]; throws std::invalid_argument otherwise.
RedisTierConfig parse_redis_url(const std::string& url);

struct RedisTierStats {
  uint64_t pages_written = 0, write_errors = 0, writes_dropped = 0;
  uint64_t pages_fetched = 0, fetch_misses = 0, fetch_errors = 0;
  bool connected = false;
};

class RedisPageTier final : public PageTier {
 public:
  explicit RedisPageTier(RedisTierConfig cfg);
  ~RedisPageTier() override;
  RedisPageTier(const RedisPageTier&) = delete;
  RedisPageTier& operator=(const RedisPageTier&) = delete;

  void put(uint64_t hash, std::vector<uint8_t> record) override;
  std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) override;
  bool holds(uint64_t hash) const override;
  void forget(uint64_t hash) override;  // the next put rewrites the key
  RedisTierStats stats() const;
  // Waits until every queued write was sent (or dropped): tests and shutdown.
  void flush();

 private:
  struct Connection {
    redisContext* ctx = nullptr;
    std::chrono::steady_clock::time_point retry_at{};
  };
  bool ensure(Connection& c, const char* who);
  void drop(Connection& c, const char* who, const char* why);
  void writer();

  RedisTierConfig cfg_;
  Connection reader_;  // the scheduler thread's
  mutable std::mutex mutex_;  // queue_, held_, stats_
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, std::vector<uint8_t>>> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool stopping_ = false;
  std::unordered_set<uint64_t> held_;
  RedisTierStats stats_;
  std::atomic<bool> reader_up_{false}, writer_up_{false};
  std::thread thread_;
};

}  // namespace agentkv::server
