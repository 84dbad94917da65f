#include "engine/page_tiers.h"

#include <cstdio>

#include "memory/disk_page_tier.h"
#include "memory/page_tier_stack.h"
#include "memory/warm_page_tier.h"

namespace agentkv {

struct PageTiers::Local {
  std::unique_ptr<memory::WarmPageTier> warm;
  std::unique_ptr<memory::DiskPageTier> disk;
};

PageTiers::PageTiers(const Context& ctx, const LocalTierOptions& o, std::vector<PageTier*> remote)
    : local_(std::make_unique<Local>()) {
  std::vector<PageTier*> stack;
  char line[512];
  if (o.warm_bytes > 0) {
    memory::WarmTierConfig wc;
    wc.max_bytes = o.warm_bytes;
    const memory::KvCache* kv = ctx.memory().kv();
    if (o.warm_type == "exact" || !kv) wc.codec = memory::make_exact_warm_codec();  // no K/V: nothing to requantize
    else wc.codec = memory::make_requantizing_warm_codec(*kv, o.warm_type == "q8_0" ? GgmlType::Q8_0 : GgmlType::Q4_0);
    std::snprintf(line, sizeof line, "warm page tier: up to %.0f MiB of page records in RAM, %s",
                  static_cast<double>(wc.max_bytes) / (1 << 20), wc.codec->name().c_str());
    description_.emplace_back(line);
    local_->warm = std::make_unique<memory::WarmPageTier>(wc);
    stack.push_back(local_->warm.get());
  }
  if (!o.disk_dir.empty()) {
    memory::DiskTierConfig dc;
    dc.dir = o.disk_dir;
    dc.max_bytes = o.disk_bytes;
    local_->disk = std::make_unique<memory::DiskPageTier>(dc);
    const DiskTierStats st = local_->disk->stats();
    std::snprintf(line, sizeof line,
                  "page tier on disk: %s (%llu page records, %.1f MiB, bound %.0f MiB; %llu unfinished writes removed)",
                  o.disk_dir.c_str(), static_cast<unsigned long long>(st.pages_on_disk),
                  static_cast<double>(st.bytes_on_disk) / (1 << 20), static_cast<double>(dc.max_bytes) / (1 << 20),
                  static_cast<unsigned long long>(st.leftovers_removed));
    description_.emplace_back(line);
    stack.push_back(local_->disk.get());
  }
  for (PageTier* t : remote)
    if (t) stack.push_back(t);
  if (!stack.empty()) stack_ = std::make_unique<memory::PageTierStack>(std::move(stack));
}

PageTiers::~PageTiers() = default;

std::optional<WarmTierStats> PageTiers::warm_stats() const {
  if (!local_->warm) return std::nullopt;
  return local_->warm->stats();
}

std::optional<DiskTierStats> PageTiers::disk_stats() const {
  if (!local_->disk) return std::nullopt;
  return local_->disk->stats();
}

}  // namespace agentkv
