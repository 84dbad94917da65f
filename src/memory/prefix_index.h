// The process-wide prefix index: KV pages named by a chained content hash, shared by every
// sequence of a memory, so that a prompt starting with tokens some sequence already computed
// attaches their K/V instead of evaluating them again — whichever slot or session computed them.
//
// A page is P consecutive positions of one token chain: the K/V cells holding positions
// [kP, kP + P) of a sequence whose first kP + P tokens are the page's chain. Full pages are named
// by H(parent page's hash, the page's token ids), the root's seed being H(model fingerprint, KV
// types, cache salt); the tail of a sequence may be indexed as a partial page (fewer than P
// tokens) so that reuse stays token-exact. Pages form a tree (a page's parent is the page before
// it in its chain); a lookup walks it from the root: whole pages by hash, then the child sharing
// the longest token prefix with the rest of the prompt, so that a prompt matching only part of a
// page reuses that part too.
//
// Storage is the KV cache's cell pool: a page records which cells hold its rows. The index keeps
// those cells alive after every sequence let go of them by holding them under a reserved sequence
// id (`holder`), reference-counted per cell (a cell may belong to a full page and to the partial
// page that preceded it). Attaching a page to a sequence adds that sequence to the page's cells:
// no copy, no compute. Pages that only the holder keeps are the cache; evict() frees them, least
// recently used leaf first. Hybrid models also need the recurrent state at the point where the
// attached prefix ends: snapshots (recurrent part only) are attached to positions of the chain
// and an attach stops at the latest snapshot inside the match. See docs/memory-semantics.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agentkv/prefix_cache.h"
#include "memory/cell_keeper.h"
#include "memory/page_chain_hasher.h"
#include "memory/sequence_memory.h"
#include "memory/snapshot.h"
#include "memory/window_pages.h"

namespace agentkv::memory {

using TokenId = int32_t;

// The index is configured and reports with the public types (agentkv/prefix_cache.h):
// PrefixCacheConfig (its model_fingerprint here names the model, the KV types and rotation
// together: Context::enable_prefix_cache combines them), PrefixCacheStats, SequencePages.

// Page hashes are computed once per token sequence and carried: the calls that walk a sequence's
// chain take `known`, the chained hashes of its first full pages (agentkv::PageHashes, PageChainHasher::extend), and
// hash only the pages beyond them.
class PrefixIndex final : public CellKeeper {
 public:
  // mem must have a KV cache with one stream (unified) in which `holder` is a valid sequence id.
  // enable_prefix_index (below) makes the memory own its index.
  PrefixIndex(SequenceMemory& mem, PrefixCacheConfig cfg);
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  const PrefixCacheConfig& config() const { return cfg_; }
  // Hybrid memory: what one snapshot costs (its states and bookkeeping; 0 without a recurrent
  // part), and the spacing of the snapshots taken inside long prompts, which follows from the
  // budget (docs/memory-semantics.md §7): half of it holds a whole KV pool's worth of them, at
  // least kMinSnapshotSpacing and at most kMaxSnapshotSpacing tokens apart, in steps of
  // kSnapshotSpacingStep. 0: no room in the budget for even one snapshot, or no recurrent part.
  size_t snapshot_bytes_each() const;
  size_t snapshot_spacing() const { return snapshot_spacing_; }
  static constexpr size_t kMinSnapshotSpacing = 512;
  static constexpr size_t kMaxSnapshotSpacing = 8192;  // llama.cpp's server: a checkpoint every 8,192 at most
  static constexpr size_t kSnapshotSpacingStep = 256;

  // How many leading tokens of `tokens` attach() would provide, at most max_tokens: the
  // token-exact match for attention-only memory; for hybrid memory the position of the latest
  // snapshot inside the match. No change.
  size_t lookup(std::span<const TokenId> tokens, uint64_t salt, size_t max_tokens,
                std::span<const uint64_t> known = {}) const;
  // The same, and makes the empty sequence `seq` hold that prefix: its cells join the matched
  // pages' cells and (hybrid) its recurrent state is restored from the snapshot. Returns the
  // number of tokens seq now holds (0: nothing attached, seq unchanged).
  size_t attach(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, size_t max_tokens);
  // Both on one match: choose(usable) gets lookup's answer for any max_tokens and returns the
  // max_tokens to attach with (0: none; seq must be empty by then otherwise).
  template <typename Choose>
  size_t attach_chosen(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, Choose&& choose,
                       std::span<const uint64_t> known = {}) {
    const Match m = match(tokens, salt, known);
    int snapshot = -1;
    const size_t max_tokens = choose([&](size_t n) { return usable(m, n, &snapshot); });
    return max_tokens == 0 ? 0 : attach_matched(seq, m, tokens.size(), max_tokens);
  }

  // Attention part only: how many leading tokens of `tokens` cached pages hold (token-exact,
  // snapshots ignored), at most max_tokens. For restoring a state whose recurrent state and later
  // K/V come from the state itself.
  size_t cached_kv(std::span<const TokenId> tokens, uint64_t salt, size_t max_tokens,
                   std::span<const uint64_t> known = {}) const;
  // Adds seq to the cells of the first n tokens' pages (n <= cached_kv(...)): no copy. seq must
  // hold no attention position below n; its recurrent state is left as it is.
  void attach_kv(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, size_t n);
  // PrefixCache::follow_chain: the chain a reader takes furthest (a prompt's text matched against
  // cached pages). O(pages on the chain and their siblings).
  std::vector<TokenId> follow_chain(uint64_t salt, const PrefixCache::ChainReader& read) const;
  // How this index names pages (the root seed from config().model_fingerprint and page_tokens):
  // the hashes the calls below take as `known`, a state file's page chain, a tier record's key.
  const PageChainHasher& hasher() const { return hasher_; }

  // Pages leaving or entering the process (a tier, memory/page_record.h).
  struct PageCells {
    uint64_t hash = 0;     // a full page's chain hash, or a tail's prefix_hash
    uint32_t first_pos = 0;
    std::vector<uint32_t> cells;  // one per token, in position order
    std::vector<uint32_t> window_cells;  // the same in the window part (sliding-window models); empty when it lacks some
  };
  // The indexed, valid full pages on the chain of `tokens`, first page first, stopping at the
  // first one missing.
  std::vector<PageCells> full_pages_along(std::span<const TokenId> tokens, uint64_t salt,
                                          std::span<const uint64_t> known = {}) const;
  // The partial page holding the last tokens.size() % P tokens of `tokens` (a sequence's tail,
  // what a tier needs so that reuse stays token-exact across instances), when the index holds all
  // of `tokens`; nullopt when they end on a page boundary or are not all indexed.
  std::optional<PageCells> tail_along(std::span<const TokenId> tokens, uint64_t salt,
                                      std::span<const uint64_t> known = {}) const;
  // Speculative drafts from the pages (RequestMemory::recall): the tokens that follow the most
  // recently used occurrence of `run` in the page chains under salt (conversations no sequence
  // holds any more included), continued through the most recently used child page, at most k.
  // Empty when no page holds `run` with something after it.
  // Runs of at most kMaxContinuationRun tokens; the pages of at most kMaxContinuationScan tokens
  // are read, depth first, the most recently used first.
  std::vector<TokenId> continuation(std::span<const TokenId> run, uint64_t salt, size_t k) const;
  static constexpr size_t kMaxContinuationRun = 8;
  static constexpr size_t kMaxContinuationScan = size_t{1} << 16;
  // A page fetched from a tier: `chain` is the tokens through the page — its last P tokens for a
  // full page, its last chain.size() % P tokens for a tail — whose earlier full pages must be
  // indexed; `write_rows` fills the page's cells (one per token, position order). Takes empty
  // cells (evicting unused pages for room) held by the index only. Returns false, changing
  // nothing, when the parent chain is missing, the page is already indexed, or there is no room.
  template <typename WriteRows>
  bool adopt_page(std::span<const TokenId> chain, uint64_t salt, WriteRows&& write_rows,
                  std::span<const uint64_t> known = {}) {
    std::vector<uint32_t> cells;
    if (!reserve_page(chain, salt, cells, known)) return false;
    write_rows(std::span<const uint32_t>(cells));
    return commit_page(chain, salt, cells, known);
  }

  // Sliding-window models: the window rows (a tier's window record) of the page that ends `chain`
  // (a full page's last P tokens, or a tail's), which must be indexed; write_rows fills the cells
  // the page takes. False, changing nothing, when the page is not indexed or there is no room.
  bool adopt_window_rows(std::span<const TokenId> chain, uint64_t salt,
                         const std::function<void(std::span<const uint32_t>)>& write_rows,
                         std::span<const uint64_t> known = {});

  // seq holds `tokens` at positions 0, 1, ...: indexes its full pages, and its last partial page
  // too when with_tail. Pages already indexed (by this or another sequence) are left as they are.
  // `hashes` (optional): the carried page hashes of `tokens` (maybe of more tokens that continue
  // them), extended here to all of its full pages. `published`: how many leading tokens seq published before (with the same tokens): the
  // walk resumes at their last full page when it is still indexed, instead of at the root.
  void publish(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, bool with_tail,
               std::vector<uint64_t>* hashes = nullptr, size_t published = 0);
  // Hybrid memory: publishes seq's chain (tail included) and attaches a snapshot of its recurrent
  // state after its last token. False when there is nothing to snapshot or it exceeds the budget.
  bool snapshot(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, std::vector<uint64_t>* hashes = nullptr,
                size_t published = 0);
  // Hybrid memory: attaches `state` (a recurrent snapshot, e.g. a checkpoint a state file
  // carried) to the chain position after the last of `tokens`, which must be indexed up to there
  // (publish first). False when it is not or the snapshot exceeds the budget.
  bool adopt_snapshot(std::span<const TokenId> tokens, uint64_t salt, MemorySnapshot state,
                      std::span<const uint64_t> known = {});
  // The snapshots on the chain of `tokens` (what a saved state carries as its checkpoints): for
  // each, how many leading tokens it follows, shortest first. Pointers valid until the next change.
  std::vector<std::pair<size_t, const MemorySnapshot*>> snapshots_along(std::span<const TokenId> tokens, uint64_t salt,
                                                                         std::span<const uint64_t> known = {}) const;

  // Frees cells only the index holds, evicting least recently used leaf pages that no other
  // sequence uses (when none is left, the least recently used unused page with what hangs below
  // it; then pages sequences use only in part: forgotten, their unused cells freed), until at
  // least n_cells cells were freed or no cell only the index holds is left. Returns cells freed.
  size_t evict(size_t n_cells);
  // Forgets the pages whose cells no sequence but seq (and the index) uses, leaves first, so that
  // dropping seq next frees them: a sequence recomputed from scratch takes the same cells again.
  // Returns the pages forgotten.
  size_t forget_own(SeqId seq);
  // Forgets every page and snapshot (their cells are freed unless a sequence uses them).
  void clear();

  PrefixCacheStats stats() const;
  // The cached pages whose cells seq uses, and how many of them another sequence uses too.
  SequencePages pages_of(SeqId seq) const;
  // Test support: throws std::logic_error when an invariant is broken (cell reference counts
  // equal the pages naming each cell, the holder is in exactly the counted cells, every page's
  // cells hold its positions, the hash table names exactly the full pages).
  void check() const;

 private:
  // CellKeeper: what the memory's sequence operations respect (SequenceMemory calls these).
  SeqId keeper_seq() const override { return cfg_.holder; }
  void forget_all() override { clear(); }
  void before_move(SeqId seq, Pos p0, Pos p1) override { unshare(seq, p0, p1); }
  // Copy-on-write, before seq changes its positions [p0, p1) (seq_add / seq_div; SequenceMemory
  // calls it): a cached page must keep its cells as they are, so every cell of that range that a
  // page names is copied into an empty cell, which takes over all the cell's sequences but the
  // holder (sequences sharing a cell still move together, as in llama.cpp); the original stays
  // the page's. Unused cached pages are evicted to make room; when no empty cell is left even
  // then, the pages naming the remaining cells are forgotten instead. Returns the cells copied.
  size_t unshare(SeqId seq, Pos p0, Pos p1);

  struct Node {
    bool alive = false;
    uint64_t hash = 0;     // root: the chain seed; full page: its chain hash; partial: unused
    int32_t parent = -1;   // -1 for roots
    uint32_t first_pos = 0;
    std::vector<TokenId> tokens;
    std::vector<uint32_t> cells;
    std::vector<int32_t> children;
    uint64_t last_used = 0;
    uint32_t n_snapshots = 0;  // snapshots attached to this page
  };
  struct Snapshot {
    int32_t node = -1;
    uint32_t n_in_node = 0;  // the state after the node's first n_in_node tokens
    MemorySnapshot state;
    size_t bytes = 0;
    uint64_t last_used = 0;
  };
  struct Match {
    std::vector<int32_t> path;  // nodes, each fully matched except possibly the last
    size_t n_tokens = 0;
    size_t last_used_tokens = 0;  // tokens of the last node of path that match
  };

  uint64_t root_seed(uint64_t salt) const { return hasher_.root_seed(salt); }
  uint64_t page_hash(uint64_t parent_hash, std::span<const TokenId> tokens) const {
    return hasher_.page_hash(parent_hash, tokens);
  }
  // Page k's hash is known[k] where given, else computed from its parent's.
  Match match(std::span<const TokenId> tokens, uint64_t salt, std::span<const uint64_t> known = {}) const;
  // The usable length of a match (attention: all of it; hybrid: the latest snapshot in it; a
  // window memory: also the latest point whose window the pages hold) and the snapshot that goes
  // with it (-1 for none).
  size_t usable(const Match& m, size_t max_tokens, int* snapshot) const;
  bool node_valid(int32_t id) const;
  bool on_path(const Match& m, const Snapshot& s) const;  // s lies inside the matched tokens
  void join(const Match& m, SeqId seq, size_t n);  // seq joins the cells of m's first n positions
  size_t attach_matched(SeqId seq, const Match& m, size_t n_query, size_t max_tokens);
  bool reserve_page(std::span<const TokenId> chain, uint64_t salt, std::vector<uint32_t>& cells,
                    std::span<const uint64_t> known);
  bool commit_page(std::span<const TokenId> chain, uint64_t salt, const std::vector<uint32_t>& cells,
                   std::span<const uint64_t> known);
  int32_t new_node(int32_t parent, uint32_t first_pos);
  int32_t root_for(uint64_t salt);
  void pin(uint32_t cell);
  void unpin(uint32_t cell);
  bool held_by_index_only(uint32_t cell) const;  // a cell no sequence but the holder uses
  bool only_holder_uses(const Node& n) const;  // no sequence but the holder uses its cells
  bool holds_unused_cell(const Node& n) const;  // some cell of it only the holder uses
  // When no sequence but the holder uses page id's cells and seq_cells (the publishing sequence's
  // cells at the page's positions) are others, the page takes them and frees its old ones.
  void take_cells_if_unused(int32_t id, std::span<const uint32_t> seq_cells);
  void touch(int32_t id);  // the page was used now (its place in the LRU order of leaves)
  int32_t lru_unused_leaf() const;  // -1: every leaf is in use
  // The least recently used page (any, not only leaves) for which eligible holds; -1: none.
  int32_t lru_page_where(bool (PrefixIndex::*eligible)(const Node&) const) const;
  void drop_snapshot(size_t i);
  void remove_node(int32_t id);  // a leaf
  void remove_subtree(int32_t id);
  // Removes page id with what hangs below it, and its root when no page is left under it;
  // returns the parent (a removed root is no longer alive).
  int32_t forget_page(int32_t id);
  std::vector<uint32_t> cells_of(SeqId seq, Pos p0, Pos p1) const;  // by position; UINT32_MAX where none
  void evict_snapshots_to_budget();
  void keep_window_rows(int32_t id, SeqId seq, size_t n);  // page id takes seq's window rows of its first n positions

  SequenceMemory& mem_;
  PrefixCacheConfig cfg_;
  PageChainHasher hasher_;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_nodes_;
  std::unordered_map<uint64_t, int32_t> roots_;    // salt seed -> root node
  std::unordered_map<uint64_t, int32_t> by_hash_;  // full pages
  std::set<std::pair<uint64_t, int32_t>> lru_leaves_;  // pages without children, by (last_used, id)
  std::vector<uint16_t> pins_;                     // per cell: pages naming it
  std::vector<Snapshot> snapshots_;                // a few per pool spacing: linear scans
  size_t snapshot_bytes_ = 0;
  size_t snapshot_spacing_ = 0;
  std::unique_ptr<WindowPages> window_pages_;  // a sliding-window model's (no recurrent part), with room
  uint64_t tick_ = 0;
  uint64_t query_tokens_ = 0;
  uint64_t hit_tokens_ = 0;
};

// Gives mem its prefix index (owned by mem, which then keeps it consistent: SequenceMemory::
// set_cell_keeper); throws agentkv::Error when it has one. prefix_index_of: mem's, or null.
PrefixIndex& enable_prefix_index(SequenceMemory& mem, const PrefixCacheConfig& cfg);
PrefixIndex* prefix_index_of(SequenceMemory& mem);
const PrefixIndex* prefix_index_of(const SequenceMemory& mem);

}  // namespace agentkv::memory
