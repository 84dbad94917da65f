#include "agentkv/page_tiers.h"

#include <cstdio>

#include "agentkv/local_tiers.h"
#include "engine/context_impl.h"
#include "memory/disk_page_tier.h"
#include "memory/page_tier_stack.h"
#include "memory/warm_page_tier.h"

namespace agentkv {

struct PageTiers::Local {
  std::unique_ptr<WarmTier> warm;
  std::unique_ptr<DiskTier> disk;
};

PageTiers::PageTiers(const Context& ctx, const LocalTierOptions& o, std::vector<PageTier*> remote)
    : local_(std::make_unique<Local>()) {
  std::vector<PageTier*> stack;
  char line[512];
  if (o.warm_bytes > 0) {
    // No K/V (a recurrent-only model): nothing to requantize, the records are kept exact.
    const std::optional<GgmlType> requantize =
        o.warm_type == "exact" || !sequence_memory(ctx).kv() ? std::nullopt
        : std::optional<GgmlType>(o.warm_type == "q8_0" ? GgmlType::Q8_0 : GgmlType::Q4_0);
    local_->warm = make_warm_tier(ctx, requantize, o.warm_bytes, memory::WarmTierConfig{}.max_queued_bytes);
    std::snprintf(line, sizeof line, "warm page tier: up to %.0f MiB of page records in RAM, %s",
                  static_cast<double>(o.warm_bytes) / (1 << 20), local_->warm->codec_name().c_str());
    description_.emplace_back(line);
    stack.push_back(local_->warm.get());
  }
  if (!o.disk_dir.empty()) {
    local_->disk = make_disk_tier(o.disk_dir, o.disk_bytes, memory::DiskTierConfig{}.max_queued_bytes);
    const DiskTierStats st = local_->disk->stats();
    std::snprintf(line, sizeof line,
                  "page tier on disk: %s (%llu page records, %.1f MiB, bound %.0f MiB; %llu unfinished writes removed)",
                  o.disk_dir.c_str(), static_cast<unsigned long long>(st.pages_on_disk),
                  static_cast<double>(st.bytes_on_disk) / (1 << 20), static_cast<double>(o.disk_bytes) / (1 << 20),
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
