// The memory's side of agentkv/prefix_cache.h: the prefix index of one memory (prefix_index.h)
// and the page tiers behind it. Pages and snapshots leave for a tier as records
// (page_record.h, snapshot_record.h) and come back verified: a record is used only when it is
// exactly the page (hash, position, tokens) or snapshot the chain expects; anything else is
// refused, forgotten by the tier and computed again.
#pragma once
#include "agentkv/prefix_cache.h"
#include "memory/prefix_index.h"
#include "memory/sequence_memory.h"

namespace agentkv::memory {

class TieredPrefixCache final : public PrefixCache {
 public:
  // index must belong to mem (enable_prefix_index) and outlive this.
  TieredPrefixCache(SequenceMemory& mem, PrefixIndex& index) : mem_(mem), index_(index) {}

  uint32_t page_tokens() const override { return index_.config().page_tokens; }
  size_t snapshot_spacing() const override { return index_.snapshot_spacing(); }
  size_t snapshot_bytes_each() const override { return index_.snapshot_bytes_each(); }
  bool snapshot_belongs_at(size_t n, size_t prompt_len, std::span<const size_t> divergences) const override;
  size_t next_snapshot_point(size_t done, size_t prompt_len, std::span<const size_t> divergences) const override;
  void verify() const override { index_.check(); }
  size_t lookup(std::span<const CacheToken> tokens, uint64_t salt, size_t max_tokens,
                std::span<const uint64_t> known) const override;
  std::vector<CacheToken> continuation(std::span<const CacheToken> run, uint64_t salt, size_t k) const override {
    return index_.continuation(run, salt, k);
  }
  size_t attach(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, size_t max_tokens) override;
  size_t attach_chosen(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, std::span<const uint64_t> known,
                       const AttachChoice& choose) override;
  void hash_pages(std::span<const CacheToken> tokens, uint64_t salt, PageHashes& hashes) const override {
    index_.hasher().extend(tokens, salt, hashes);
  }
  void publish(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, bool with_tail, PageHashes& hashes,
               size_t published) override;
  bool snapshot(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, PageHashes& hashes,
                size_t published) override;
  size_t evict(size_t n_cells) override;
  size_t forget_own(MemorySeqId seq) override;
  PrefixCacheStats stats() const override;
  SequencePages pages_of(MemorySeqId seq) const override;
  std::vector<CacheToken> follow_chain(uint64_t salt, const ChainReader& read) const override {
    return index_.follow_chain(salt, read);
  }
  std::vector<size_t> snapshot_points(std::span<const CacheToken> tokens, uint64_t salt) const override;

  // A cache whose tail keeps only some heads' rows (retrieval heads) cannot send pages: their old
  // cells lack the other heads' rows (agentkv::Error).
  void set_tier(PageTier* tier) override;
  bool has_tier() const override { return tier_ != nullptr; }
  size_t send_pages(std::span<const CacheToken> tokens, uint64_t salt, std::span<const uint64_t> known, bool with_tail,
                    size_t& sent_through) override;
  bool send_snapshot(std::span<const CacheToken> tokens, uint64_t salt, std::span<const uint64_t> known) override;
  TierFetch fetch(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known,
                  const std::function<void(size_t)>& before_adopt) override;

 private:
  // The record of tokens usable[first, first + len) under this key, verified and indexed.
  bool adopt_page(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known, size_t first,
                  size_t len, uint64_t key, std::span<const uint8_t> bytes, TierFetch& out);
  // The furthest snapshot the K/V reach (out.kv_through, set by the caller) that the tier holds.
  void fetch_snapshot(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known, TierFetch& out);
  // Sliding-window models: the window records of the pages before out.kv_through that a sequence
  // resuming there needs (its window) and the index lacks; one round trip.
  void fetch_window_rows(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known, TierFetch& out);
  // A page's window record beside it, when the index holds the page's window rows.
  void send_window_rows(const PrefixIndex::PageCells& page, std::span<const CacheToken> tokens);
  void refuse(uint64_t key, const char* why, TierFetch& out);
  size_t tail_snapshot_at(size_t prompt_len) const;  // hybrid; 0: none for a prompt this short

  SequenceMemory& mem_;
  PrefixIndex& index_;
  PageTier* tier_ = nullptr;
};

}  // namespace agentkv::memory
