#include "agentkv/local_tiers.h"

#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "memory/disk_page_tier.h"
#include "memory/warm_page_tier.h"

namespace agentkv {

std::unique_ptr<WarmTier> make_warm_tier(const Context& ctx, std::optional<GgmlType> requantize_to, uint64_t max_bytes,
                                         uint64_t max_queued_bytes) {
  memory::WarmTierConfig wc;
  wc.max_bytes = max_bytes;
  wc.max_queued_bytes = max_queued_bytes;
  if (!requantize_to) {
    wc.codec = memory::make_exact_warm_codec();
  } else {
    const memory::KvCache* kv = sequence_memory(ctx).kv();
    if (!kv) throw Error("a requantizing warm tier needs a KV cache");
    wc.codec = memory::make_requantizing_warm_codec(*kv, *requantize_to);
  }
  return std::make_unique<memory::WarmPageTier>(wc);
}

std::unique_ptr<DiskTier> make_disk_tier(const std::string& dir, uint64_t max_bytes, uint64_t max_queued_bytes) {
  memory::DiskTierConfig dc;
  dc.dir = dir;
  dc.max_bytes = max_bytes;
  dc.max_queued_bytes = max_queued_bytes;
  return std::make_unique<memory::DiskPageTier>(dc);
}

}  // namespace agentkv
