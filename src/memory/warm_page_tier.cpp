#include "memory/warm_page_tier.h"

#include <chrono>
#include <cstring>

#include <zstd.h>

namespace agentkv::memory {
namespace {

constexpr uint32_t kWarmMagic = 0x5a574b41;  // "AKWZ"
constexpr size_t kHeader = 12;                // magic, the record's size (u64)
constexpr uint64_t kMaxRecord = 1ull << 32;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t record_size_of(const std::vector<uint8_t>& encoded) {
  uint64_t n = 0;
  std::memcpy(&n, encoded.data() + 4, sizeof n);
  return n;
}

}  // namespace

std::vector<uint8_t> encode_warm_record(const std::vector<uint8_t>& record, int zstd_level) {
  // Even bytes, then odd bytes: for f16 K/V the odd (high) bytes repeat a few sign/exponent values.
  const size_t n = record.size(), n_even = (n + 1) / 2;
  std::vector<uint8_t> planes(n);
  for (size_t i = 0; i < n; ++i) planes[(i & 1) ? n_even + i / 2 : i / 2] = record[i];
  std::vector<uint8_t> out(kHeader + ZSTD_compressBound(n));
  std::memcpy(out.data(), &kWarmMagic, 4);
  const uint64_t size = n;
  std::memcpy(out.data() + 4, &size, sizeof size);
  const size_t z = ZSTD_compress(out.data() + kHeader, out.size() - kHeader, planes.data(), n, zstd_level);
  if (ZSTD_isError(z)) return {};  // cannot happen with a compressBound buffer; an empty encoding decodes to nothing
  out.resize(kHeader + z);
  out.shrink_to_fit();
  return out;
}

std::optional<std::vector<uint8_t>> decode_warm_record(const std::vector<uint8_t>& encoded) {
  if (encoded.size() < kHeader) return std::nullopt;
  uint32_t magic = 0;
  std::memcpy(&magic, encoded.data(), 4);
  const uint64_t n = record_size_of(encoded);
  if (magic != kWarmMagic || n > kMaxRecord) return std::nullopt;
  const unsigned long long framed = ZSTD_getFrameContentSize(encoded.data() + kHeader, encoded.size() - kHeader);
  if (framed != n) return std::nullopt;
  std::vector<uint8_t> planes(n);
  const size_t z = ZSTD_decompress(planes.data(), n, encoded.data() + kHeader, encoded.size() - kHeader);
  if (ZSTD_isError(z) || z != n) return std::nullopt;
  const size_t n_even = (n + 1) / 2;
  std::vector<uint8_t> record(n);
  for (size_t i = 0; i < n; ++i) record[i] = planes[(i & 1) ? n_even + i / 2 : i / 2];
  return record;
}

WarmPageTier::WarmPageTier(WarmTierConfig cfg)
    : cfg_(cfg), queue_(cfg_.max_queued_bytes, [this](uint64_t hash, std::vector<uint8_t>& record) { store(hash, record); }) {}

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
  std::vector<uint8_t> encoded = encode_warm_record(record, cfg_.zstd_level);
  const double spent = seconds_since(t0);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.compress_seconds += spent;
  if (encoded.empty() || encoded.size() > cfg_.max_bytes) {
    ++stats_.stores_dropped;
    return;
  }
  if (auto old = encoded_.find(hash); old != encoded_.end()) {
    raw_bytes_ -= record_size_of(old->second);
    encoded_.erase(old);
  }
  order_.insert(hash, encoded.size());
  raw_bytes_ += record.size();
  encoded_[hash] = std::move(encoded);
  ++stats_.pages_stored;
  for (uint64_t victim : order_.evict_over(cfg_.max_bytes)) {
    raw_bytes_ -= record_size_of(encoded_[victim]);
    encoded_.erase(victim);
    ++stats_.pages_evicted;
  }
}

std::vector<std::optional<std::vector<uint8_t>>> WarmPageTier::get(std::span<const uint64_t> hashes) {
  std::vector<std::optional<std::vector<uint8_t>>> out(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    std::vector<uint8_t> encoded;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = encoded_.find(hashes[i]);
      if (it == encoded_.end()) {
        ++stats_.misses;
        continue;
      }
      order_.touch(hashes[i]);  // used: the last to be dropped
      encoded = it->second;     // copied: decompressed without the lock
    }
    const auto t0 = std::chrono::steady_clock::now();
    out[i] = decode_warm_record(encoded);
    const double spent = seconds_since(t0);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.decompress_seconds += spent;
    if (out[i]) {
      ++stats_.hits;
      stats_.bytes_decompressed += out[i]->size();
    } else {
      ++stats_.misses;
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
  const auto it = encoded_.find(hash);
  if (it == encoded_.end()) return;
  raw_bytes_ -= record_size_of(it->second);
  encoded_.erase(it);
  order_.erase(hash);
  ++stats_.pages_forgotten;
}

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
