// Several page tiers as one (`--cache-dir` and `--cache-redis` together): a record goes to every
// tier; a read asks the tiers in order (local disk before the network) and each later one only
// for what the earlier ones lack. The tiers are the caller's and outlive the stack.
#pragma once
#include <vector>

#include "agentkv/page_tier.h"

namespace agentkv::memory {

class PageTierStack final : public PageTier {
 public:
  explicit PageTierStack(std::vector<PageTier*> tiers) : tiers_(std::move(tiers)) {}

  void put(uint64_t hash, std::vector<uint8_t> record) override {
    for (size_t i = 0; i < tiers_.size(); ++i) {
      if (tiers_[i]->holds(hash)) continue;
      tiers_[i]->put(hash, i + 1 < tiers_.size() ? record : std::move(record));
    }
  }

  std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) override {
    std::vector<std::optional<std::vector<uint8_t>>> out(hashes.size());
    std::vector<size_t> missing(hashes.size());
    for (size_t i = 0; i < hashes.size(); ++i) missing[i] = i;
    for (PageTier* tier : tiers_) {
      if (missing.empty()) break;
      std::vector<uint64_t> ask;
      for (size_t i : missing) ask.push_back(hashes[i]);
      auto got = tier->get(ask);
      std::vector<size_t> still;
      for (size_t j = 0; j < missing.size(); ++j) {
        if (got[j]) out[missing[j]] = std::move(got[j]);
        else still.push_back(missing[j]);
      }
      missing = std::move(still);
    }
    return out;
  }

  bool holds(uint64_t hash) const override {
    for (const PageTier* tier : tiers_)
      if (!tier->holds(hash)) return false;
    return true;
  }

  void forget(uint64_t hash) override {
    for (PageTier* tier : tiers_) tier->forget(hash);
  }

 private:
  std::vector<PageTier*> tiers_;
};

}  // namespace agentkv::memory
