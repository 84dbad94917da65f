// The local page tiers one at a time — compressed RAM and disk — for measuring them (`agentkv bench
// tiers`); a server makes and stacks them with agentkv/page_tiers.h. Their interfaces and figures
// are in agentkv/page_tier.h; the memory implements them.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "agentkv/context.h"
#include "agentkv/ggml_type.h"
#include "agentkv/page_tier.h"

namespace agentkv {

// requantize_to: K/V rows kept in that type (q8_0, q4_0; needs ctx's KV cache); nullopt: the
// records kept exact. Records queued or held beyond the bounds are dropped. Throws agentkv::Error
// for a requantizing tier without a KV cache.
std::unique_ptr<WarmTier> make_warm_tier(const Context& ctx, std::optional<GgmlType> requantize_to, uint64_t max_bytes,
                                         uint64_t max_queued_bytes);
// Creates the folder if needed and indexes the records in it (a restarted server). Throws
// agentkv::Error when it cannot.
std::unique_ptr<DiskTier> make_disk_tier(const std::string& dir, uint64_t max_bytes, uint64_t max_queued_bytes);

}  // namespace agentkv
