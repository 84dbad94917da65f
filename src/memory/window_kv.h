// Sliding-window memory (docs/memory-semantics.md §10): the K/V rows of a model's sliding-window
// layers (Gemma 3's local layers, every other gpt-oss layer) in a KV cache of their own, in which
// each sequence keeps only the positions a later token can still see — the window behind its next
// position — plus kRollback more, which it can drop from its end in place. What leaves the window
// is gone from the sequence; the full-attention layers keep every row in the main cache, and the
// window's rows at a chosen position travel as part of a snapshot (like a recurrent state), so a
// sequence resumes exactly where a snapshot on its page chain is.
#pragma once
#include <cstdint>
#include <memory>

#include "memory/kv_cache.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

class WindowKv {
 public:
  // Positions a sequence can drop from its end in place (two pages of the prefix cache's default
  // size: a turn re-rendered a few tokens before its end, with a short answer after it); a longer
  // drop needs a snapshot, as for a recurrent state.
  static constexpr Pos kRollback = 32;

  // kv: a cache whose layers are exactly the windowed ones; window: llama.cpp's n_swa (a token at
  // p sees keys at positions > p - window). cached_cells: cells of kv beyond what the sequences
  // need (cells_needed), for the rows of cached pages (memory/window_pages.h); 0: none.
  // agentkv::Error for window < 1 or cached_cells above kv's cells.
  WindowKv(std::unique_ptr<KvCache> kv, Pos window, uint32_t cached_cells = 0);

  // The cells per stream a window cache needs: every sequence's kept positions, the micro-batch
  // being placed and the one before it (pruned only as the next is placed).
  static uint32_t cells_needed(Pos window, uint32_t n_seq_max, bool unified, uint32_t n_ubatch);

  KvCache& kv() { return *kv_; }
  const KvCache& kv() const { return *kv_; }
  Pos window() const { return window_; }
  // Positions a sequence keeps behind its next one.
  Pos keep() const { return window_ - 1 + kRollback; }
  uint32_t cached_cells() const { return cached_cells_; }
  // The sequence cached pages hold their rows under (the prefix index's; SequenceMemory sets it
  // with its cell keeper): prune() and can_remove() leave it alone, as they leave no request's
  // rows. -1: none.
  void set_keeper_seq(SeqId seq) { keeper_ = seq; }

  // After ub was placed: every sequence drops the positions no token from now on can see (a
  // sequence in ub: those before its first token's window and the rollback; any other: those
  // before its next position's).
  void prune(const UBatch& ub);
  // Whether removing [p0, p1) of seq (seq < 0: every sequence) leaves each sequence able to go on:
  // removing its end from p0 needs the window before p0 still held. Removing a middle range or
  // everything is always possible (llama.cpp's sliding-window cache does the same).
  bool can_remove(SeqId seq, Pos p0, Pos p1) const;
  // Fake prefix of n positions: the empty sequence holds the kept ones, [max(0, n - keep()), n).
  void fake_prefix(SeqId seq, Pos n);

 private:
  bool can_remove_one(SeqId seq, Pos p0, Pos p1) const;

  std::unique_ptr<KvCache> kv_;
  Pos window_;
  uint32_t cached_cells_;
  SeqId keeper_ = -1;
};

}  // namespace agentkv::memory
