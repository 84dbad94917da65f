// How the warm tier (memory/warm_page_tier.h) holds a record in RAM. The exact codec is lossless
// (byte planes + zstd: a fetched record is the record stored). The requantizing codec stores page
// records' K/V rows in a smaller KV type (q8_0: ~0.53 of f16, q4_0: ~0.28) and gives them back in
// the cache's own type, so a fetched page holds what a cache of that type would have held for
// those positions — it changes outputs, measured by `agentkv bench tiers` (BENCHMARKS.md); other
// records (hybrid snapshots) stay exact.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agentkv/ggml_type.h"
#include "memory/kv_cache.h"

namespace agentkv::memory {

class WarmCodec {
 public:
  virtual ~WarmCodec() = default;
  // Empty when the record cannot be encoded (the tier then drops it).
  virtual std::vector<uint8_t> encode(const std::vector<uint8_t>& record) const = 0;
  // nullopt for bytes that are not one of this codec's encodings (never throws).
  virtual std::optional<std::vector<uint8_t>> decode(const std::vector<uint8_t>& encoded) const = 0;
  virtual std::string name() const = 0;
  // The record size an encoding decodes to (for the tier's accounting; encodings are the codec's own).
  static uint64_t record_size(const std::vector<uint8_t>& encoded);
};

std::unique_ptr<WarmCodec> make_exact_warm_codec(int zstd_level = 1);
// Throws agentkv::Error when `type` cannot hold this cache's rows (its block size must divide the
// K and V row lengths) or is the cache's own K type.
std::unique_ptr<WarmCodec> make_requantizing_warm_codec(const KvCache& kv, GgmlType type);

}  // namespace agentkv::memory
