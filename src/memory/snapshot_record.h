// A recurrent snapshot as bytes, for page tiers (Redis, disk): what a hybrid sequence needs besides
// its K/V pages to continue where another instance (or an earlier run) stopped. Named in the tier
// by snapshot_record_key of the content hash of the tokens it follows (PageChainHasher::prefix_hashes),
// so it is found exactly where that chain is, never under another model, KV type or salt. The
// state container (memory_state.h, checksummed) holds the image; a reader accepts a record only
// for its own key and position and for a memory of the same layout.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "memory/snapshot.h"

namespace agentkv::memory {

// The tier key of the snapshot after the tokens whose content hash is prefix_hash (never a page's).
uint64_t snapshot_record_key(uint64_t prefix_hash);
// The record of `state` (a recurrent-only snapshot), which follows the first `pos` tokens.
std::vector<uint8_t> encode_snapshot_record(uint64_t key, uint32_t pos, const MemorySnapshot& state);
// nullopt unless `bytes` is an intact record of this key and position whose image fits `mem`.
std::optional<MemorySnapshot> decode_snapshot_record(const SequenceMemory& mem, std::span<const uint8_t> bytes,
                                                     uint64_t key, uint32_t pos);

}  // namespace agentkv::memory
