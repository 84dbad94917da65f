// The warm (compressed RAM) and disk page tiers one at a time, each with its own bounds, for
// measuring them (`agentkv bench tiers`); a server makes and stacks them with engine/page_tiers.h.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "agentkv/page_tier.h"
#include "core/ggml_type.h"
#include "engine/context.h"

namespace agentkv {

namespace memory {
class WarmPageTier;
class DiskPageTier;
}  // namespace memory

class WarmTier final : public PageTier {
 public:
  // requantize_to: K/V rows kept in that type (q8_0, q4_0; needs ctx's KV cache); nullopt: the
  // records kept exact. Records queued or held beyond the bounds are dropped.
  WarmTier(const Context& ctx, std::optional<GgmlType> requantize_to, uint64_t max_bytes, uint64_t max_queued_bytes);
  ~WarmTier() override;

  void put(uint64_t hash, std::vector<uint8_t> record) override;
  std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) override;
  bool holds(uint64_t hash) const override;
  void forget(uint64_t hash) override;

  WarmTierStats stats() const;
  void flush();  // waits until every record put is compressed
  const std::string& codec_name() const { return codec_name_; }

 private:
  std::unique_ptr<memory::WarmPageTier> tier_;
  std::string codec_name_;
};

class DiskTier final : public PageTier {
 public:
  // Creates the folder if needed and indexes the records in it (a restarted server). Throws
  // agentkv::Error when it cannot.
  DiskTier(const std::string& dir, uint64_t max_bytes, uint64_t max_queued_bytes);
  ~DiskTier() override;

  void put(uint64_t hash, std::vector<uint8_t> record) override;
  std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) override;
  bool holds(uint64_t hash) const override;
  void forget(uint64_t hash) override;

  DiskTierStats stats() const;
  void flush();  // waits until every record put is written

 private:
  std::unique_ptr<memory::DiskPageTier> tier_;
};

}  // namespace agentkv
