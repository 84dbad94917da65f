// The one memory interface of a context: llama.cpp's sequence operations over whatever the model
// needs — an attention KV cache, a recurrent state, or both moved in lockstep (hybrid models), and
// for a model with sliding-window layers their rows in a window cache beside the main one.
// Placement of a micro-batch is transactional: prepare() only looks; apply() commits.
// See docs/memory-semantics.md for what every operation does on every memory type.
#pragma once
#include <memory>
#include <optional>

#include "agentkv/memory.h"
#include "memory/cell_keeper.h"
#include "memory/kv_cache.h"
#include "memory/recurrent.h"
#include "memory/window_kv.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

struct MemoryPlacement {
  Placement kv;               // empty when there is no KV cache
  RecurrentPlacement rec;     // empty when there is no recurrent memory
  Placement window;           // the sliding-window layers' cells; empty without a window part
};

class SequenceMemory final : public MemoryInterface {
 public:
  // Any part may be null (dense models have no recurrent part; only a model with sliding-window
  // layers, run without llama.cpp's --swa-full, has a window part, and then kv holds the other layers).
  SequenceMemory(std::unique_ptr<KvCache> kv, std::unique_ptr<RecurrentMemory> rec,
                 std::unique_ptr<WindowKv> window = nullptr);
  ~SequenceMemory();

  WindowKv* window() { return window_.get(); }
  const WindowKv* window() const { return window_.get(); }
  // Whether a sequence can only resume where a snapshot of its state is (a recurrent state, or a
  // window part whose older rows are gone): the snapshot-taking paths serve exactly these memories.
  bool needs_snapshots() const { return rec_ || window_; }

  KvCache* kv() { return kv_.get(); }
  RecurrentMemory* rec() { return rec_.get(); }
  const KvCache* kv() const { return kv_.get(); }
  const RecurrentMemory* rec() const { return rec_.get(); }

  // The cache that keeps cells of this memory alive (cell_keeper.h; the prefix index:
  // enable_prefix_index in prefix_index.h), owned by the memory; set once. The sequence
  // operations then keep it consistent: clear() forgets every kept cell, seq_rm(-1, ...) and
  // seq_keep leave its sequence alone (its cells belong to the memory, not to a request), and
  // seq_add / seq_div first give the moving sequence its own copy of every kept cell.
  void set_cell_keeper(std::unique_ptr<CellKeeper> keeper);
  CellKeeper* cell_keeper() { return keeper_.get(); }
  const CellKeeper* cell_keeper() const { return keeper_.get(); }

  std::optional<MemoryPlacement> prepare(const UBatch& ub) const;
  void apply(const UBatch& ub, const MemoryPlacement& placement);

  void clear() override;
  // Hybrid: the recurrent part decides first; if it refuses, nothing changes and false returns.
  // A window part refuses to drop a sequence's end when the window before the new end is gone.
  bool seq_rm(SeqId seq, Pos p0, Pos p1) override;
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) override;
  void seq_keep(SeqId seq) override;
  // Context shift. Only a pure attention memory whose keys can be re-rotated shifts (see
  // can_shift()); otherwise these throw agentkv::Error and change nothing.
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) override;
  void seq_div(SeqId seq, Pos p0, Pos p1, int d) override;
  // True when seq_add / seq_div are allowed: there is a KV cache (and a window part moves with it,
  // keeping what it holds, as llama.cpp's sliding-window cache does), no recurrent part (a recurrent
  // state has absorbed its tokens in order; moving positions cannot change what it holds, and the
  // gap a shift would close cannot be cut out of it), and the owner of RoPE declared that it can
  // re-rotate stored keys (set_shift_supported; Context sets it from Model::can_shift()).
  bool can_shift() const { return kv_ && !rec_ && shift_supported_; }
  void set_shift_supported(bool supported) { shift_supported_ = supported; }
  // Hybrid: pos_min = max of the parts' minima, pos_max = min of their maxima, so [min, max] is
  // the range every part can vouch for (for a hybrid sequence pos_min == pos_max == last token).
  Pos seq_pos_min(SeqId seq) const override;
  Pos seq_pos_max(SeqId seq) const override;
  MemoryUsage usage() const override;

  // Fake prefix: the empty sequence seq reports positions [0, n) without computing them: zero
  // K/V cells (KvCache::seq_fake_prefix), the window part's last positions, and a zero recurrent
  // state at position n - 1, so the parts agree and seq_pos_max == n - 1. agentkv::Error when seq is not empty in
  // either part, or the KV cache lacks n empty cells (checked before anything changes).
  void seq_fake_prefix(SeqId seq, Pos n);

 private:
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<RecurrentMemory> rec_;
  std::unique_ptr<WindowKv> window_;
  bool shift_supported_ = true;
  std::unique_ptr<CellKeeper> keeper_;  // after kv_ and rec_: destroyed first, it refers to them
};

// The window part's cache (the sliding-window layers' rows), or null without one.
inline KvCache* window_kv_of(SequenceMemory& mem) { return mem.window() ? &mem.window()->kv() : nullptr; }
inline const KvCache* window_kv_of(const SequenceMemory& mem) { return mem.window() ? &mem.window()->kv() : nullptr; }

}  // namespace agentkv::memory
