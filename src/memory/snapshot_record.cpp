#include "memory/snapshot_record.h"

#include <cstring>

#include "agentkv/error.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "memory/record_bytes.h"

namespace agentkv::memory {
namespace {

constexpr uint32_t kSnapshotMagic = 0x4e534b41;  // "AKSN" as bytes
constexpr uint32_t kSnapshotVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 4 + 4;  // magic, version, key, pos, reserved

using record_bytes::get;
using record_bytes::put;

}  // namespace

uint64_t snapshot_record_key(uint64_t prefix_hash) {
  const uint64_t key[2] = {prefix_hash, 0x736e617073686f74ull};  // "snapshot": apart from page hashes
  return XXH3_64bits(key, sizeof key);
}

std::vector<uint8_t> encode_snapshot_record(uint64_t key, uint32_t pos, const MemorySnapshot& state) {
  StateContents c;
  c.fingerprint = key;  // the container's name for what the image belongs to
  c.memory = state.image();
  const std::vector<uint8_t> blob = encode_state(c);
  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + blob.size());
  put(out, kSnapshotMagic);
  put(out, kSnapshotVersion);
  put(out, key);
  put(out, pos);
  put(out, uint32_t{0});
  out.insert(out.end(), blob.begin(), blob.end());
  return out;
}

std::optional<MemorySnapshot> decode_snapshot_record(const SequenceMemory& mem, std::span<const uint8_t> bytes,
                                                     uint64_t key, uint32_t pos) {
  if (bytes.size() < kHeaderBytes) return std::nullopt;
  const uint8_t* p = bytes.data();
  if (get<uint32_t>(p) != kSnapshotMagic || get<uint32_t>(p + 4) != kSnapshotVersion || get<uint64_t>(p + 8) != key ||
      get<uint32_t>(p + 16) != pos)
    return std::nullopt;
  try {
    const StateContents c = decode_state(bytes.subspan(kHeaderBytes), "snapshot record");
    if (c.fingerprint != key || !c.memory.per_sequence() || (!c.memory.rec && !c.memory.window) || c.memory.kv)
      return std::nullopt;
    check_memory_layout(mem, c.memory);
    return MemorySnapshot::copy_of(c.memory);
  } catch (const Error&) {
    return std::nullopt;  // damaged or of another layout: the caller computes instead
  }
}

}  // namespace agentkv::memory
