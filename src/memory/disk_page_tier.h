// Pages kept on local disk (`--cache-dir`, issue 17): one file per page record
// (memory/page_record.h), named by its chain hash, so a server restarted on the same folder finds
// the pages its earlier runs computed. Records are written in the background, each to a temporary
// file renamed into place, so a crash mid-write leaves no half record under a page's name (the
// leftovers are deleted at the next start); a record damaged anyway (a torn write after a power
// loss, a bit flip, a foreign file) fails the reader's checks, is forgotten and recomputed.
// The folder is bounded: beyond max_bytes the least recently used records are deleted.
// docs/memory-semantics.md, "Page tiers", has the format and the guarantees.
#pragma once
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>

#include "agentkv/page_tier.h"
#include "memory/record_lru.h"
#include "memory/record_queue.h"

namespace agentkv::memory {

using agentkv::DiskTierStats;  // agentkv/page_tier.h

struct DiskTierConfig {
  std::filesystem::path dir;
  uint64_t max_bytes = 8ull << 30;        // records on disk beyond this: oldest deleted
  size_t max_queued_bytes = 256u << 20;   // writes waiting beyond this are dropped
};


class DiskPageTier final : public DiskTier {
 public:
  // Creates the folder if needed and indexes the records in it. Throws agentkv::Error when the
  // folder cannot be created or read.
  explicit DiskPageTier(DiskTierConfig cfg);
  ~DiskPageTier() override;
  DiskPageTier(const DiskPageTier&) = delete;
  DiskPageTier& operator=(const DiskPageTier&) = delete;

  void put(uint64_t hash, std::vector<uint8_t> record) override;
  std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) override;
  bool holds(uint64_t hash) const override;
  void forget(uint64_t hash) override;

  DiskTierStats stats() const override;
  // Waits until every queued record is on disk (or dropped): tests and shutdown.
  void flush() override;
  // The file a record of this hash lives in.
  std::filesystem::path record_path(uint64_t hash) const;

 private:
  void write(uint64_t hash, const std::vector<uint8_t>& record);  // on queue_'s thread
  void index_folder();
  void evict_over_budget();  // mutex_ held

  DiskTierConfig cfg_;
  mutable std::mutex mutex_;  // files_ and stats_
  RecordLru files_;           // the records on disk
  DiskTierStats stats_;
  RecordQueue queue_;  // last: destroyed (and drained) first
};

}  // namespace agentkv::memory
