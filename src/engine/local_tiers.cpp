#include "engine/local_tiers.h"

#include "agentkv/error.h"
#include "memory/disk_page_tier.h"
#include "memory/warm_page_tier.h"

namespace agentkv {

WarmTier::WarmTier(const Context& ctx, std::optional<GgmlType> requantize_to, uint64_t max_bytes,
                   uint64_t max_queued_bytes) {
  memory::WarmTierConfig wc;
  wc.max_bytes = max_bytes;
  wc.max_queued_bytes = max_queued_bytes;
  if (!requantize_to) {
    wc.codec = memory::make_exact_warm_codec();
  } else {
    const memory::KvCache* kv = ctx.memory().kv();
    if (!kv) throw Error("a requantizing warm tier needs a KV cache");
    wc.codec = memory::make_requantizing_warm_codec(*kv, *requantize_to);
  }
  codec_name_ = wc.codec->name();
  tier_ = std::make_unique<memory::WarmPageTier>(wc);
}

WarmTier::~WarmTier() = default;
void WarmTier::put(uint64_t hash, std::vector<uint8_t> record) { tier_->put(hash, std::move(record)); }
std::vector<std::optional<std::vector<uint8_t>>> WarmTier::get(std::span<const uint64_t> hashes) { return tier_->get(hashes); }
bool WarmTier::holds(uint64_t hash) const { return tier_->holds(hash); }
void WarmTier::forget(uint64_t hash) { tier_->forget(hash); }
WarmTierStats WarmTier::stats() const { return tier_->stats(); }
void WarmTier::flush() { tier_->flush(); }

DiskTier::DiskTier(const std::string& dir, uint64_t max_bytes, uint64_t max_queued_bytes) {
  memory::DiskTierConfig dc;
  dc.dir = dir;
  dc.max_bytes = max_bytes;
  dc.max_queued_bytes = max_queued_bytes;
  tier_ = std::make_unique<memory::DiskPageTier>(dc);
}

DiskTier::~DiskTier() = default;
void DiskTier::put(uint64_t hash, std::vector<uint8_t> record) { tier_->put(hash, std::move(record)); }
std::vector<std::optional<std::vector<uint8_t>>> DiskTier::get(std::span<const uint64_t> hashes) { return tier_->get(hashes); }
bool DiskTier::holds(uint64_t hash) const { return tier_->holds(hash); }
void DiskTier::forget(uint64_t hash) { tier_->forget(hash); }
DiskTierStats DiskTier::stats() const { return tier_->stats(); }
void DiskTier::flush() { tier_->flush(); }

}  // namespace agentkv
