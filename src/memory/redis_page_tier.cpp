#include "memory/redis_page_tier.h"

#include <hiredis/hiredis.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <stdexcept>


namespace agentkv {
namespace {

constexpr auto kRetryPause = std::chrono::seconds(1);
constexpr size_t kHeldMax = 1u << 20;  // hashes remembered as stored; forgotten beyond (rewritten then)

std::string page_key(uint64_t hash) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "agentkv:page:%016" PRIx64, hash);
  return buf;
}

timeval to_timeval(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

}  // namespace

RedisTierConfig parse_redis_url(const std::string& url) {
  const std::string scheme = "redis://";
  if (url.compare(0, scheme.size(), scheme) != 0) throw std::invalid_argument("--cache-redis: expected redis://HOST[:PORT][/DB]");
  std::string rest = url.substr(scheme.size());
  RedisTierConfig c;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest.resize(slash);
    if (!db.empty()) {
      if (db.find_first_not_of("0123456789") != std::string::npos || db.size() > 4)
        throw std::invalid_argument("--cache-redis: bad database number '" + db + "'");
      c.db = std::stoi(db);
    }
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    rest.resize(colon);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      throw std::invalid_argument("--cache-redis: bad port '" + port + "'");
    c.port = std::stoi(port);
  }
  if (rest.empty()) throw std::invalid_argument("--cache-redis: no host");
  c.host = rest;
  return c;
}

}  // namespace agentkv

namespace agentkv::memory {

RedisTier::RedisTier(RedisTierConfig cfg) : cfg_(std::move(cfg)) {
  thread_ = std::thread([this] { writer(); });
}

RedisTier::~RedisTier() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (reader_.ctx) redisFree(reader_.ctx);
}

bool RedisTier::ensure(Connection& c, const char* who) {
  if (c.ctx) return true;
  const auto now = std::chrono::steady_clock::now();
  if (now < c.retry_at) return false;
  c.retry_at = now + kRetryPause;
  redisContext* ctx = redisConnectWithTimeout(cfg_.host.c_str(), cfg_.port, to_timeval(cfg_.timeout_ms));
  if (!ctx || ctx->err) {
    log("redis page tier (%s): cannot connect to %s:%d (%s); computing instead, retrying in 1 s", who,
             cfg_.host.c_str(), cfg_.port, ctx ? ctx->errstr : "out of memory");
    if (ctx) redisFree(ctx);
    return false;
  }
  redisSetTimeout(ctx, to_timeval(cfg_.timeout_ms));
  if (cfg_.db != 0) {
    auto* r = static_cast<redisReply*>(redisCommand(ctx, "SELECT %d", cfg_.db));
    const bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    if (!ok) {
      redisFree(ctx);
      return false;
    }
  }
  c.ctx = ctx;
  log("redis page tier (%s): connected to %s:%d/%d", who, cfg_.host.c_str(), cfg_.port, cfg_.db);
  return true;
}

void RedisTier::drop(Connection& c, const char* who, const char* why) {
  log("redis page tier (%s): %s; computing instead, retrying in 1 s", who, why);
  if (c.ctx) redisFree(c.ctx);
  c.ctx = nullptr;
  c.retry_at = std::chrono::steady_clock::now() + kRetryPause;
}

void RedisTier::put(uint64_t hash, std::vector<uint8_t> record) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (held_.count(hash)) return;
    if (queued_bytes_ + record.size() > cfg_.max_queued_bytes) {
      ++stats_.writes_dropped;
      return;
    }
    if (held_.size() >= kHeldMax) held_.clear();
    held_.insert(hash);  // queued: not offered again (forgotten if the write fails)
    queued_bytes_ += record.size();
    queue_.emplace_back(hash, std::move(record));
  }
  cv_.notify_all();
}

void RedisTier::writer() {
  Connection conn;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stopping_) break;
      continue;
    }
    // Up to 64 records per pipelined batch.
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> batch;
    while (!queue_.empty() && batch.size() < 64) {
      queued_bytes_ -= queue_.front().second.size();
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    writing_ = true;
    lock.unlock();
    bool ok = ensure(conn, "writer");
    if (ok) {
      for (const auto& [hash, bytes] : batch) {
        const std::string key = page_key(hash);
        redisAppendCommand(conn.ctx, "SET %b %b", key.data(), key.size(), bytes.data(), bytes.size());
      }
      for (size_t i = 0; i < batch.size() && ok; ++i) {
        void* raw = nullptr;
        ok = redisGetReply(conn.ctx, &raw) == REDIS_OK && raw &&
             static_cast<redisReply*>(raw)->type == REDIS_REPLY_STATUS;
        if (raw) freeReplyObject(raw);
      }
      if (!ok) drop(conn, "writer", "a write failed");
    }
    writer_up_ = conn.ctx != nullptr;
    lock.lock();
    writing_ = false;
    if (ok) {
      stats_.pages_written += batch.size();
    } else {
      stats_.write_errors += batch.size();
      for (const auto& b : batch) held_.erase(b.first);
    }
    cv_.notify_all();
  }
  if (conn.ctx) redisFree(conn.ctx);
}

void RedisTier::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

std::vector<std::optional<std::vector<uint8_t>>> RedisTier::get(std::span<const uint64_t> hashes) {
  std::vector<std::optional<std::vector<uint8_t>>> out(hashes.size());
  if (hashes.empty() || !ensure(reader_, "reader")) {
    reader_up_ = reader_.ctx != nullptr;
    return out;
  }
  std::vector<std::string> keys;
  std::vector<const char*> argv{"MGET"};
  std::vector<size_t> lens{4};
  keys.reserve(hashes.size());
  for (uint64_t h : hashes) keys.push_back(page_key(h));
  for (const std::string& k : keys) argv.push_back(k.data()), lens.push_back(k.size());
  auto* r = static_cast<redisReply*>(redisCommandArgv(reader_.ctx, static_cast<int>(argv.size()), argv.data(), lens.data()));
  std::lock_guard<std::mutex> lock(mutex_);
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != hashes.size()) {
    if (r) freeReplyObject(r);
    ++stats_.fetch_errors;
    drop(reader_, "reader", "a read failed");
    reader_up_ = false;
    return out;
  }
  for (size_t i = 0; i < hashes.size(); ++i) {
    const redisReply* e = r->element[i];
    if (e->type == REDIS_REPLY_STRING) {
      out[i].emplace(reinterpret_cast<const uint8_t*>(e->str), reinterpret_cast<const uint8_t*>(e->str) + e->len);
      ++stats_.pages_fetched;
      if (held_.size() < kHeldMax) held_.insert(hashes[i]);  // there already: never sent back
    } else {
      ++stats_.fetch_misses;
    }
  }
  freeReplyObject(r);
  reader_up_ = true;
  return out;
}

bool RedisTier::holds(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_.count(hash) > 0;
}

void RedisTier::forget(uint64_t hash) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_.erase(hash);
}

RedisTierStats RedisTier::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  RedisTierStats s = stats_;
  s.connected = reader_up_ || writer_up_;
  return s;
}

void RedisTier::log(const char* fmt, ...) const {
  if (!cfg_.log) return;
  char line[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  cfg_.log(line);
}

}  // namespace agentkv::memory

namespace agentkv {

std::unique_ptr<RedisPageTier> open_redis_page_tier(RedisTierConfig cfg) {
  return std::make_unique<memory::RedisTier>(std::move(cfg));
}

}  // namespace agentkv
