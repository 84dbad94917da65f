// The cell table of one KV-cache stream: for every cell its position (-1 = empty), the set of
// sequences that use it, and the position delta accumulated since the keys were last rotated.
// Indexes kept alongside (used count, lowest free cell, highest used cell, per-sequence position
// multisets) make placement, n_kv and seq_pos_min/max cheap. The table knows nothing about K/V data; KvRows holds that.
//
// Every mutator keeps the indexes exact. Preconditions (cell index in range, seq id < n_seq,
// cell empty / not empty as documented) are the caller's job: KvCache validates user input
// before it gets here, so violations are programming errors (asserted in debug builds).
#pragma once
#include <bitset>
#include <cstdint>
#include <utility>
#include <vector>

#include "memory/pos_multiset.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

using SeqSet = std::bitset<kMaxSeq>;

// Calls f(seq) for every sequence in the set, in ascending order.
template <typename F>
inline void for_each_seq(const SeqSet& seqs, F&& f) {
  for (size_t s = seqs._Find_first(); s < seqs.size(); s = seqs._Find_next(s))
    f(static_cast<SeqId>(s));
}

class KvCells {
 public:
  // n_seq: sequence ids this table can hold are [0, n_seq).
  KvCells(uint32_t n_cells, uint32_t n_seq);

  uint32_t size() const { return static_cast<uint32_t>(pos_.size()); }
  uint32_t used() const { return used_; }
  // One past the highest non-empty cell (0 when the table is empty).
  uint32_t used_max_p1() const { return used_max_p1_; }
  // The lowest empty cell (size() when full): placement searches from here.
  uint32_t first_free() const { return first_free_; }

  bool is_empty(uint32_t i) const { return pos_[i] < 0; }
  Pos pos(uint32_t i) const { return pos_[i]; }
  const SeqSet& seqs(uint32_t i) const { return seq_[i]; }
  bool has_seq(uint32_t i, SeqId s) const { return seq_[i].test(static_cast<size_t>(s)); }
  // Contiguous per-cell arrays, e.g. for building attention masks or serializing a cell range.
  const Pos* pos_data() const { return pos_.data(); }
  const SeqSet* seq_data() const { return seq_.data(); }

  // Position delta (new - old) applied to cell i since the last reset_shift(); the keys stored
  // in that cell are still rotated for the old position, so RoPE by this delta brings them up to
  // date. 0 for empty cells.
  Pos shift(uint32_t i) const { return shift_[i]; }
  bool has_shift() const { return has_shift_; }
  void reset_shift();

  // -1 when the sequence has no cell here.
  Pos seq_pos_min(SeqId s) const;
  Pos seq_pos_max(SeqId s) const;

  // Sequence s's positions, a multiset (after seq_div or a shared batch two cells of one sequence
  // may hold one position): max_count(p0, p1) is the most cells any position of [p0, p1) has,
  // size() the cells s holds (O(runs), no scan of the table).
  const PosMultiset& seq_positions(SeqId s) const { return seq_pos_[static_cast<size_t>(s)]; }
  // The cell of sequence s at position p, found through the table's note of the cell that last
  // took p for s (no scan): that cell if it still holds p for s (where s has one cell at p, it is
  // that one); kNoCell when s has no cell at p; kUnnoted when s holds p only in cells not noted
  // (a cell moved, restored or shared since): the caller scans.
  static constexpr uint32_t kNoCell = UINT32_MAX;
  static constexpr uint32_t kUnnoted = UINT32_MAX - 1;
  uint32_t cell_at(SeqId s, Pos p) const;

  // True when cell i's K/V rows are known to be all-zero bytes: never occupied since the storage
  // was zeroed, or only by occupy_run(..., rows_zero = true). Occupying a cell any other way
  // (placement, assign) clears the mark, since its rows are about to be written; reset(false)
  // keeps the marks (it empties cells without touching bytes).
  bool known_zero(uint32_t i) const { return known_zero_[i] != 0; }

  // Empties every cell and forgets pending shifts. rows_zeroed: the caller zeroed the storage
  // (KvCache::clear(true)), so every cell is known zero again.
  void reset(bool rows_zeroed = false);

  // Sets cell i to exactly (p, seqs, shift); p < 0 means empty (then seqs/shift are ignored).
  // Placement occupies an empty cell with it; it is also the restore primitive for state loading,
  // stream copies and a cell that keeps only some of its sequences.
  void assign(uint32_t i, Pos p, const SeqSet& seqs, Pos shift = 0);
  // Empties used cell i.
  void release(uint32_t i);
  // Adds sequence s to used cell i (no-op if already there).
  void add_seq(uint32_t i, SeqId s);
  // Removes sequence s from cell i (no-op if absent). Returns true if the cell became empty.
  bool remove_seq(uint32_t i, SeqId s);
  // Moves used cell i to position p (seq_add, seq_div) and records the delta in shift(); a
  // negative p empties the cell (returns true then).
  bool move(uint32_t i, Pos p);

  // Occupies the n empty cells cells[0..n) with positions p0, p0+1, ... for `seqs`, in one pass
  // (one run in each sequence's position index instead of n insertions). `rows_zero`: the caller
  // guarantees the cells' K/V rows are all-zero bytes and stay so (fake prefix), so they are
  // marked known_zero(); otherwise occupying a cell clears the mark, as assign() does.
  void occupy_run(const uint32_t* cells, uint32_t n, Pos p0, const SeqSet& seqs, bool rows_zero);

 private:
  void occupy(uint32_t i, Pos p, const SeqSet& seqs);  // empty cell i takes (p, seqs)
  void index_add(uint32_t i);     // adds cell i's position to its sequences' multisets
  void index_remove(uint32_t i);  // the reverse
  void mark_used(uint32_t i);
  void mark_empty(uint32_t i);
  void note_cell(SeqId s, Pos p, uint32_t i);

  std::vector<Pos> pos_;
  std::vector<Pos> shift_;
  std::vector<SeqSet> seq_;
  std::vector<uint8_t> known_zero_;  // see known_zero()
  // seq_pos_[s]: the positions of sequence s's cells, a multiset (after seq_div or a shared
  // batch two cells of one sequence may have the same position), stored as runs.
  std::vector<PosMultiset> seq_pos_;
  // noted_[s][p]: the cell that last took position p for s (checked when read), so a sequence's
  // cells are found by position without a scan of the table (PrefixIndex::publish).
  std::vector<std::vector<uint32_t>> noted_;
  uint32_t used_ = 0;
  uint32_t used_max_p1_ = 0;
  uint32_t first_free_ = 0;
  bool has_shift_ = false;
};

// Cells of the table that a batch of seq could take without touching another sequence: empty
// ones and those only seq uses (they go when seq drops its suffix).
size_t cells_free_for(const KvCells& cells, SeqId seq);

// The cells of a table whose keys need rotating (context shift): (cell, pending delta) for every
// used cell with a delta != 0 whose rows are not known to be all zero (rotating zeros changes nothing).
std::vector<std::pair<uint32_t, Pos>> pending_shifts(const KvCells& cells);

}  // namespace agentkv::memory
