// A store of page records outside the memory (memory/page_record.h), keyed by chain hash: the
// interface the shared tier (Redis, issue 19), the disk tier (issue 17) and later ones implement. A tier may lose anything at any time (its own eviction, a restart, a network
// failure); callers treat every read as a hint, verify each record, and compute what is missing.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace agentkv::memory {

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

}  // namespace agentkv::memory
