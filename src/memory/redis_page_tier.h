// The Redis page tier (agentkv/redis_page_tier.h): one connection for the reader (the scheduler's
// thread) and one for a background writer that drains a bounded queue.
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

#include "agentkv/redis_page_tier.h"

struct redisContext;

namespace agentkv::memory {

class RedisTier final : public RedisPageTier {
 public:
  explicit RedisTier(RedisTierConfig cfg);
  ~RedisTier() override;
  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  void put(uint64_t hash, std::vector<uint8_t> record) override;
  std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) override;
  bool holds(uint64_t hash) const override;
  void forget(uint64_t hash) override;  // the next put rewrites the key
  RedisTierStats stats() const override;
  void flush() override;

 private:
  struct Connection {
    redisContext* ctx = nullptr;
    std::chrono::steady_clock::time_point retry_at{};
  };
  bool ensure(Connection& c, const char* who);
  void drop(Connection& c, const char* who, const char* why);
  void writer();
  void log(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

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

}  // namespace agentkv::memory
