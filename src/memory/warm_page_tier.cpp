#include "memory/warm_page_tier.h"

#include <chrono>
#include <cstring>

namespace agentkv::memory {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

WarmPageTier::WarmPageTier(WarmTierConfig cfg)
    : cfg_(cfg),
      codec_(cfg_.codec ? cfg_.codec : std::shared_ptr<const WarmCodec>(make_exact_warm_codec())),
      queue_(cfg_.max_queued_bytes, [this](uint64_t hash, std::vector<uint8_t>& record) { store(hash, record); }) {}

WarmPageTier::~WarmPageTier() = default;

void WarmPageTier::put(uint64_t hash, std::vector<uint8_t> record) {
  if (holds(hash)) return;
  if (!queue_.push(hash, std::move(record))) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.stores_dropped;
  }
}

void WarmPageTier::store(uint64_t hash, const std::vector<uint8_t>& record) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> encoded = codec_->encode(record);
  const double spent = seconds_since(t0);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.compress_seconds += spent;
  if (encoded.empty() || encoded.size() > cfg_.max_bytes) {
    ++stats_.stores_dropped;
    return;
  }
  erase(hash);
  order_.insert(hash, encoded.size());
  raw_bytes_ += record.size();
  encoded_[hash] = std::make_shared<const std::vector<uint8_t>>(std::move(encoded));
  ++stats_.pages_stored;
  for (uint64_t victim : order_.evict_over(cfg_.max_bytes)) {
    erase(victim);
    ++stats_.pages_evicted;
  }
}

std::vector<std::optional<std::vector<uint8_t>>> WarmPageTier::get(std::span<const uint64_t> hashes) {
  std::vector<std::optional<std::vector<uint8_t>>> out(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    std::shared_ptr<const std::vector<uint8_t>> encoded;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = encoded_.find(hashes[i]);
      if (it == encoded_.end()) {
        ++stats_.misses;
        continue;
      }
      order_.touch(hashes[i]);  // used: the last to be dropped
      encoded = it->second;     // decompressed without the lock
    }
    const auto t0 = std::chrono::steady_clock::now();
    out[i] = codec_->decode(*encoded);
    const double spent = seconds_since(t0);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.decompress_seconds += spent;
    if (out[i]) {
      ++stats_.hits;
      stats_.bytes_decompressed += out[i]->size();
    } else {
      ++stats_.misses;  // cannot happen for the tier's own encodings; dropped so it is not tried again
      if (const auto it = encoded_.find(hashes[i]); it != encoded_.end() && it->second == encoded) erase(hashes[i]);
    }
  }
  return out;
}

bool WarmPageTier::holds(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return order_.contains(hash) || queue_.queued(hash);
}

void WarmPageTier::forget(uint64_t hash) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (erase(hash)) ++stats_.pages_forgotten;
}

bool WarmPageTier::erase(uint64_t hash) {
  const auto it = encoded_.find(hash);
  if (it == encoded_.end()) return false;
  raw_bytes_ -= WarmCodec::record_size(*it->second);
  encoded_.erase(it);
  order_.erase(hash);
  return true;
}

std::string WarmPageTier::codec_name() const { return codec_->name(); }

WarmTierStats WarmPageTier::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  WarmTierStats s = stats_;
  s.pages = order_.size();
  s.bytes = order_.bytes();
  s.raw_bytes = raw_bytes_;
  s.pending = queue_.pending();
  return s;
}

void WarmPageTier::flush() { queue_.flush(); }

}  // namespace agentkv::memory
