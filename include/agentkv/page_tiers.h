// The page tiers of one process (agentkv/page_tier.h): the compressed-RAM tier (--cache-warm)
// and the disk tier (--cache-dir) made for a context's KV layout, and any further tiers (Redis)
// stacked behind them as one: a record goes to every tier, a read asks them in order (RAM, disk,
// network) and each later one only for what the earlier ones lack.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agentkv/page_tier.h"
#include "agentkv/context.h"

namespace agentkv {

struct LocalTierOptions {
  uint64_t warm_bytes = 0;           // 0: no warm tier
  std::string warm_type = "exact";   // exact | q8_0 | q4_0: how K/V rows are kept compressed
  std::string disk_dir;              // "": no disk tier
  uint64_t disk_bytes = 8ull << 30;
};

class PageTiers {
 public:
  // Throws agentkv::Error when the disk folder cannot be made or read.
  PageTiers(const Context& ctx, const LocalTierOptions& options, std::vector<PageTier*> remote = {});
  ~PageTiers();
  PageTiers(const PageTiers&) = delete;
  PageTiers& operator=(const PageTiers&) = delete;

  // All of them as one tier (null when there is none).
  PageTier* stack() { return stack_.get(); }
  std::optional<WarmTierStats> warm_stats() const;
  std::optional<DiskTierStats> disk_stats() const;
  // One line per local tier for the start-up log.
  const std::vector<std::string>& description() const { return description_; }

 private:
  struct Local;
  std::unique_ptr<Local> local_;
  std::unique_ptr<PageTier> stack_;
  std::vector<std::string> description_;
};

}  // namespace agentkv
