// Checkpoints: cheap snapshots of a sequence's recurrent state at chosen positions, so that a
// hybrid sequence can be rolled back. A recurrent state cannot un-absorb tokens (seq_rm of a
// suffix is refused), so when a new prompt diverges from the cached one inside the cached part,
// the only alternative to recomputing everything is to go back to a saved state: restore the
// latest checkpoint before the divergence, drop the attention cells after it, and recompute only
// the tokens since the checkpoint.
//
// A checkpoint holds the recurrent part only (MemorySnapshot with kStatePartialOnly: one conv and
// one delta-state row per recurrent layer, independent of context length) plus the attention
// bookkeeping needed to check it still applies (the sequence's attention cells at that moment).
// Attention K/V is never copied: its cells up to the checkpoint are still in the cache, and the
// ones after it are simply removed. Taking one costs a copy of the state (a few MB for a large
// model), so one can be taken at the end of every agent turn. The store keeps checkpoints of
// all sequences under one byte budget, evicting the least recently used (taken or restored).
// See docs/memory-semantics.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "memory/sequence_memory.h"
#include "memory/snapshot.h"

namespace agentkv::memory {

struct CheckpointInfo {
  SeqId seq = -1;
  Pos pos = -1;          // last position absorbed by the saved state
  int64_t n_tokens = 0;  // tokens of the sequence at that moment (the caller's count)
  size_t bytes = 0;      // what the checkpoint costs against the budget
};

// One checkpoint as stored.
struct Checkpoint {
  CheckpointInfo info;
  bool has_tokens = false;  // taken with tokens: restore checks token_hash
  uint64_t token_hash = 0;
  // Attention bookkeeping at the moment it was taken: seq's attention cells (all at positions
  // <= info.pos) and the lowest of their positions. The checkpoint applies only while exactly
  // these many cells of seq lie at positions <= info.pos, starting at attn_pos_min.
  uint32_t attn_cells = 0;
  Pos attn_pos_min = -1;
  MemorySnapshot state;     // recurrent part of the sequence (empty for pure attention memory)
  uint64_t last_used = 0;   // LRU tick: set when taken and when restored
};

class CheckpointStore {
 public:
  explicit CheckpointStore(size_t byte_budget);
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  size_t byte_budget() const { return budget_; }
  size_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  // Checkpoints of seq, by ascending position.
  std::vector<CheckpointInfo> list(SeqId seq) const;

  // Takes a checkpoint of seq at its current last position (seq_pos_max). `tokens` are the
  // tokens the sequence holds, in order (may be empty: no token check at restore); the
  // checkpoint keeps their count and a 64-bit hash, not the tokens. A checkpoint of seq at the
  // same position is replaced. Evicts least recently used checkpoints until the budget holds.
  // Returns false (store unchanged) when seq is empty or the checkpoint alone exceeds the budget.
  bool take(const SequenceMemory& mem, SeqId seq, std::span<const int32_t> tokens = {});

  // Rolls seq back so that evaluation can resume at position `pos` (the first position whose
  // token differs, or that is not cached): picks the latest checkpoint of seq with
  // checkpoint.pos < pos that still applies (its attention cells are all still there, and, when
  // `tokens` is given, its token count is <= tokens.size() and the hash of tokens[0, n_tokens)
  // matches), restores its recurrent state, removes seq's attention cells after its position,
  // and drops seq's checkpoints beyond it (they describe a history that no longer exists). The
  // caller then decodes tokens [n_tokens, ...) from position checkpoint.pos + 1.
  // Checkpoints found not to apply any more are dropped. Returns the restored checkpoint, or
  // nullopt with the memory unchanged when none applies.
  std::optional<CheckpointInfo> restore_latest_before(SequenceMemory& mem, SeqId seq, Pos pos,
                                                      std::span<const int32_t> tokens = {});

  void drop(SeqId seq);                 // every checkpoint of seq (e.g. after clearing it)
  void drop_after(SeqId seq, Pos pos);  // checkpoints of seq with position > pos
  void clear();

  // Every checkpoint, in no particular order (for state save: the CKPT section of a blob).
  const std::vector<Checkpoint>& checkpoints() const { return entries_; }

  // Hash of a token sequence as stored in checkpoints (FNV-1a over the little-endian ids).
  static uint64_t hash_tokens(std::span<const int32_t> tokens);

 private:
  bool still_applies(const SequenceMemory& mem, const Checkpoint& c, std::span<const int32_t> tokens) const;
  void evict_to_budget();
  void erase_at(size_t i);

  size_t budget_;
  size_t bytes_ = 0;
  uint64_t tick_ = 0;
  std::vector<Checkpoint> entries_;  // few entries: linear scans are fine
};

}  // namespace agentkv::memory
