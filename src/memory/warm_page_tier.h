// The warm tier (`--cache-warm MiB`, issue 17): page records kept compressed in this process's RAM,
// the first tier asked, before the disk and Redis. A page the hot pool gave up for another prompt
// comes back from here in a decompression instead of a prefill or a disk read. How a record is
// held is its codec's (memory/warm_codec.h): exact by default (a record fetched is the record
// stored, so outputs equal a run that kept every page hot), or K/V rows requantized to a smaller
// type. Records are encoded on a background thread; beyond max_bytes of encodings the least
// recently used are dropped.
// docs/memory-semantics.md, "Page tiers", has the model.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "agentkv/page_tier.h"
#include "memory/record_lru.h"
#include "memory/record_queue.h"
#include "memory/warm_codec.h"

namespace agentkv::memory {

using agentkv::WarmTierStats;  // agentkv/page_tier.h

struct WarmTierConfig {
  uint64_t max_bytes = 1ull << 30;       // compressed records beyond this: least recently used dropped
  size_t max_queued_bytes = 256u << 20;  // records waiting to be compressed beyond this are dropped
  std::shared_ptr<const WarmCodec> codec;  // null: the exact codec
};


class WarmPageTier final : public WarmTier {
 public:
  explicit WarmPageTier(WarmTierConfig cfg);
  ~WarmPageTier() override;

  void put(uint64_t hash, std::vector<uint8_t> record) override;
  std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) override;
  bool holds(uint64_t hash) const override;
  void forget(uint64_t hash) override;

  WarmTierStats stats() const override;
  void flush() override;  // waits until every record put is compressed (tests, the bench)
  std::string codec_name() const override;

 private:
  void store(uint64_t hash, const std::vector<uint8_t>& record);  // on queue_'s thread
  bool erase(uint64_t hash);  // mutex_ held; false when not held

  const WarmTierConfig cfg_;
  const std::shared_ptr<const WarmCodec> codec_;
  mutable std::mutex mutex_;  // everything below but queue_
  RecordLru order_;
  // Shared, so a get decodes outside the lock without copying the encoding.
  std::unordered_map<uint64_t, std::shared_ptr<const std::vector<uint8_t>>> encoded_;
  uint64_t raw_bytes_ = 0;
  WarmTierStats stats_;
  RecordQueue queue_;  // last: destroyed (and drained) first
};

}  // namespace agentkv::memory
