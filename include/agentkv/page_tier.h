// A store of page records outside the memory (src/memory/page_record.h), keyed by chain hash:
// the interface the shared tier (Redis, issue 19), the disk and compressed-RAM tiers (issue 17)
// and any later one implement. A tier may lose anything at any time (its own eviction, a restart,
// a network failure); the memory treats every read as a hint, verifies each record, and computes
// what is missing. Also the built-in local tiers' interfaces and figures (agentkv/local_tiers.h
// makes one, agentkv/page_tiers.h the stack a server configures).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace agentkv {

class PageTier {
 public:
  virtual ~PageTier() = default;
  // Stores a record (may be asynchronous, may be dropped under pressure or failure).
  virtual void put(uint64_t hash, std::vector<uint8_t> record) = 0;
  // The records of these hashes, one entry each (nullopt: not there), in one round trip where
  // the tier is remote. Never throws for a tier that is down: everything is nullopt then.
  virtual std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) = 0;
  // True when this process already stored, queued or fetched the record: no need to send it again.
  virtual bool holds(uint64_t hash) const = 0;
  // The record of this hash was refused by its reader (damaged, foreign, stale): drop it, so the
  // page computed again is stored again.
  virtual void forget(uint64_t hash) = 0;
};

// The disk tier (--cache-dir): counters since start and what the folder holds now.
struct DiskTierStats {
  uint64_t pages_written = 0, write_errors = 0, writes_dropped = 0;
  uint64_t pages_read = 0, read_errors = 0, pages_forgotten = 0, pages_evicted = 0;
  uint64_t misses = 0, bytes_read = 0;  // asked for and not held; bytes of the records read
  double load_seconds = 0.0;            // time reading records (get)
  uint64_t pages_on_disk = 0, bytes_on_disk = 0;
  uint64_t writes_pending = 0;  // queued or being written
  uint64_t pages_found_at_start = 0, leftovers_removed = 0;
};

// The warm tier (--cache-warm, compressed RAM).
struct WarmTierStats {
  uint64_t pages = 0, bytes = 0, raw_bytes = 0;  // held now: compressed and record sizes
  uint64_t pages_stored = 0, stores_dropped = 0, pages_evicted = 0, pages_forgotten = 0;
  uint64_t hits = 0, misses = 0;
  uint64_t pending = 0;  // waiting to be compressed
  double compress_seconds = 0, decompress_seconds = 0;  // total time spent
  uint64_t bytes_decompressed = 0;                      // record bytes produced by gets
};

// The compressed-RAM tier (src/memory/warm_page_tier.h).
class WarmTier : public PageTier {
 public:
  virtual WarmTierStats stats() const = 0;
  virtual void flush() = 0;  // waits until every record put is compressed
  virtual std::string codec_name() const = 0;
};

// The disk tier (src/memory/disk_page_tier.h).
class DiskTier : public PageTier {
 public:
  virtual DiskTierStats stats() const = 0;
  virtual void flush() = 0;  // waits until every record put is written (or dropped)
};

}  // namespace agentkv
