// The process's cache of computed sequence memory, as a scheduler sees it: K/V pages named by
// their content (a chained hash of the tokens, the model, the KV types and a salt) and, for hybrid
// models, recurrent snapshots at positions of those page chains, shared by every sequence of one
// memory, with page tiers (compressed RAM, disk, Redis) behind it.
//
// A scheduler asks it how much of a prompt is cached and to attach that to a sequence, tells it
// what a sequence now holds (publish, snapshot) and to make room (evict); it never sees cells,
// pages or records. The memory implements it (src/memory/tiered_prefix_cache.h) over its prefix
// index (src/memory/prefix_index.h); docs/memory-semantics.md has the page design.
//
// Tokens are token ids; `salt` keeps tenants apart (a request's cache_salt): pages indexed under
// one salt are never found under another. Every count of tokens is a prefix length.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "agentkv/memory.h"
#include "agentkv/page_tier.h"

namespace agentkv {

using CacheToken = int32_t;

struct PrefixCacheConfig {
  uint32_t page_tokens = 16;            // P: tokens per page
  MemorySeqId holder = -1;              // the sequence id cached pages are held under (no slot's)
  uint64_t model_fingerprint = 0;       // with the KV types and rotation, part of every page's name
  size_t snapshot_bytes = 256u << 20;   // hybrid: RAM for recurrent snapshots, least recently used go
};

struct PrefixCacheStats {
  size_t pages = 0;          // pages indexed (full and partial)
  size_t full_pages = 0;     // ... of page_tokens tokens
  size_t pages_in_use = 0;   // ... that some sequence uses now
  size_t pages_shared = 0;   // ... that two or more sequences use (stored once)
  size_t pages_free = 0;     // room for this many more pages in the KV pool
  size_t cached_cells = 0;   // KV cells the cache holds (whether or not a sequence uses them too)
  size_t window_cells = 0;   // sliding-window models: window-part cells the pages hold (--swa-cache)
  size_t snapshots = 0;      // hybrid: recurrent snapshots held
  size_t snapshot_bytes = 0;
  uint64_t query_tokens = 0;  // tokens of the prompts attach() was asked for
  uint64_t hit_tokens = 0;    // tokens attach() provided
};

struct SequencePages {
  size_t pages = 0;   // indexed pages the sequence uses
  size_t shared = 0;  // ... that another sequence uses too
};

// What a fetch from the page tiers brought in.
struct TierFetch {
  size_t pages = 0;                  // page records adopted (full pages and at most one tail)
  size_t kv_through = 0;             // the prompt's tokens whose K/V the cache now holds
  size_t window_pages = 0;           // sliding-window models: pages whose window rows came too
  bool snapshot = false;             // hybrid: a recurrent snapshot was adopted ...
  size_t snapshot_at = 0;            // ... after this many tokens
  std::vector<std::string> refused;  // one line per record dropped (damaged, foreign, not this page)
};

// The namespace of a request's cache_salt: "" is 0 (the shared one); pages under one are never
// found under another.
uint64_t cache_namespace(const std::string& cache_salt);
// The salt a sequence's pages are named with: its request's namespace, and the sequence itself
// when pages are not shared across sequences (--no-share-prefixes).
uint64_t page_salt(uint64_t cache_namespace, MemorySeqId seq, bool share_across_sequences);

// The chained hashes of a token sequence's full pages under one salt (page k's names it and every
// page before it), first page first: computed once per sequence (hash_pages) and carried to every
// call below that walks its chain (`known`: the hashes of its first full pages, maybe fewer than it
// has; the rest are computed). Hashes of other tokens give wrong answers, not errors.
using PageHashes = std::vector<uint64_t>;

class PrefixCache {
 public:
  virtual ~PrefixCache() = default;

  virtual uint32_t page_tokens() const = 0;
  // Hybrid: tokens between the recurrent snapshots a long prompt leaves behind (so a prompt
  // diverging inside it evaluates at most this many tokens before the divergence), following the
  // snapshot budget; and what one snapshot costs. 0 and 0 for attention-only memory.
  virtual size_t snapshot_spacing() const = 0;
  virtual size_t snapshot_bytes_each() const = 0;
  // Hybrid: where a prompt of prompt_len tokens leaves snapshots as it is evaluated — every
  // snapshot_spacing() tokens, kTailSnapshotTokens before the end of a long prompt (a chat
  // template re-renders the end of a turn), and at the points in `divergences` (where the caller
  // knows later prompts part, e.g. after a system prompt). snapshot_belongs_at: one belongs after n
  // tokens; next_snapshot_point: the first one after `done` and before the end (0: none), where a
  // prompt chunk stops so that the state there can be kept. Always false / 0 without a recurrent
  // state.
  static constexpr size_t kTailSnapshotTokens = 64;
  virtual bool snapshot_belongs_at(size_t n, size_t prompt_len, std::span<const size_t> divergences) const = 0;
  virtual size_t next_snapshot_point(size_t done, size_t prompt_len, std::span<const size_t> divergences) const = 0;

  // The tokens that follow the most recently used occurrence of `run` in the cached pages under
  // salt (ended conversations included), through the most recently used later pages, at most k:
  // speculative decoding's drafts (RequestMemory::recall). Empty: none.
  virtual std::vector<CacheToken> continuation(std::span<const CacheToken> run, uint64_t salt, size_t k) const = 0;
  // How many leading tokens of `tokens` (at most max_tokens) attach() would give, without changing
  // anything. Hybrid models: only up to the latest snapshot inside the cached prefix.
  virtual size_t lookup(std::span<const CacheToken> tokens, uint64_t salt, size_t max_tokens,
                        std::span<const uint64_t> known) const = 0;
  // Makes the empty sequence `seq` hold that prefix (no compute, no copy of whole pages); returns
  // its length (0: nothing attached, seq unchanged).
  virtual size_t attach(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, size_t max_tokens) = 0;
  // Lookup and attach on one match of `tokens` (one hash pass, one walk): choose(usable) is given
  // what attaching at most n tokens would give (usable(n), as lookup) and returns how many to
  // attach at most (0: none); when it returns more, seq must be empty by then.
  using UsablePrefix = std::function<size_t(size_t)>;
  using AttachChoice = std::function<size_t(const UsablePrefix& usable)>;
  virtual size_t attach_chosen(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt,
                               std::span<const uint64_t> known, const AttachChoice& choose) = 0;
  // Extends `hashes` (those of the first full pages of `tokens`, maybe none) to all of its full pages.
  virtual void hash_pages(std::span<const CacheToken> tokens, uint64_t salt, PageHashes& hashes) const = 0;
  // seq holds exactly `tokens` (token i at position i): its full pages, and its tail when
  // with_tail, become findable. `hashes` (tokens' carried page hashes) is extended to every full
  // page; `published`: the leading tokens seq published before, where the walk resumes.
  virtual void publish(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, bool with_tail,
                       PageHashes& hashes, size_t published) = 0;
  // Hybrid: keeps seq's recurrent state as the snapshot after `tokens` (published first, as above).
  // False when nothing was kept (no recurrent state, or already there).
  virtual bool snapshot(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, PageHashes& hashes,
                        size_t published) = 0;
  // Frees at least n_cells KV cells of pages no sequence uses, least recently used first; returns
  // the cells freed (0: nothing to evict).
  virtual size_t evict(size_t n_cells) = 0;
  // Drops the pages only seq uses (a prompt evaluated without the cache replaces them).
  virtual size_t forget_own(MemorySeqId seq) = 0;
  virtual PrefixCacheStats stats() const = 0;
  virtual SequencePages pages_of(MemorySeqId seq) const = 0;
  // The cached chain under `salt` that a reader takes furthest, for a caller that matches by
  // something other than token ids (a prompt's text: memory/prompt_align.h). From the root, every
  // child page is offered to read(state, page tokens), which answers how many of them it takes and
  // its state after them; the child taken furthest is followed (on to its children when taken
  // whole, the reader's state carried). Returns the tokens taken, first page first. Hybrid models:
  // the chain's K/V only (a snapshot decides later how much of it attaches).
  struct ChainStep {
    size_t taken = 0;
    uint64_t state = 0;
  };
  using ChainReader = std::function<ChainStep(uint64_t state, std::span<const CacheToken> page)>;
  virtual std::vector<CacheToken> follow_chain(uint64_t salt, const ChainReader& read) const = 0;
  // The recurrent snapshots along `tokens`' chain: how many tokens each follows, in order.
  virtual std::vector<size_t> snapshot_points(std::span<const CacheToken> tokens, uint64_t salt) const = 0;
  // Test support: throws std::logic_error naming the first broken invariant of the cache's
  // bookkeeping (page reference counts, cells holding their pages' positions, snapshot bytes).
  virtual void verify() const = 0;

  // Page tiers. Null: none. The tier outlives this cache's use of it.
  virtual void set_tier(PageTier* tier) = 0;
  virtual bool has_tier() const = 0;
  // Offers the tier the full pages of `tokens`' chain it does not hold, from token `sent_through`
  // on (those before were offered already; advanced past the last full page), and the tail when
  // with_tail. Returns the records sent.
  virtual size_t send_pages(std::span<const CacheToken> tokens, uint64_t salt, std::span<const uint64_t> known,
                            bool with_tail, size_t& sent_through) = 0;
  // Hybrid: offers the snapshot after all of `tokens` (with its pages). False: none sent.
  virtual bool send_snapshot(std::span<const CacheToken> tokens, uint64_t salt, std::span<const uint64_t> known) = 0;
  // Brings in what the tier holds of the chain of `usable` beyond the local pages: full pages in
  // one round trip, the longest tail stored after them, and (hybrid) the furthest snapshot the K/V
  // then reach. Every record is verified; refused ones are forgotten by the tier. Before adopting
  // anything, before_adopt(n) is told how many tokens the tier's full pages reach (a caller may
  // free the sequence room then).
  virtual TierFetch fetch(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known,
                          const std::function<void(size_t)>& before_adopt) = 0;
};

}  // namespace agentkv
