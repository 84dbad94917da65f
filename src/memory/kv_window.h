// Windowed residency (docs/memory-semantics.md §9): which cells of a KV cache keep hot rows. With
// KvLayout::hot_cells below n_cells each stream has hot_cells hot row slots; a cell holds one or
// keeps its rows in the tail. The window decides which cells hold the slots, from the cell tables
// it is given (positions and sequences: it knows nothing of pages or the prefix index); KvRows
// moves the bytes. Without a window every cell's slot is the cell itself.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "memory/kv_cells.h"
#include "memory/kv_layout.h"

namespace agentkv::memory {

// Where the cells of a cache keep their rows (KvWindow::residency; the bytes: KvRows::bytes).
struct KvResidency {
  bool windowed = false;
  uint32_t hot_cells = 0;  // hot rows per stream
  uint64_t hot_used = 0;   // used cells whose rows are hot (all streams)
  uint64_t tail_used = 0;  // used cells whose rows are in the tail
  uint64_t demotions = 0;  // cells moved from hot rows to the tail since construction
};

class KvWindow {
 public:
  // cells: the cache's cell table of every stream, read when choosing (the cache writes it).
  KvWindow(const KvLayout& layout, const std::vector<KvCells>& cells);
  KvWindow(const KvWindow&) = delete;
  KvWindow& operator=(const KvWindow&) = delete;

  // Whether there is a window (KvLayout::hot_cells below n_cells), and its hot rows per stream
  // (n_cells without one).
  bool windowed() const { return windowed_; }
  uint32_t hot_cells() const { return n_hot_; }
  // The hot row slot of a cell, -1 when its rows are in the tail; unchecked (row access is).
  int32_t slot_of(uint32_t stream, uint32_t cell) const {
    return windowed_ ? slot_of_[stream][cell] : static_cast<int32_t>(cell);
  }
  // slot_of of every cell of a stream of a windowed cache, for loops over many rows.
  const int32_t* slots(uint32_t stream) const { return slot_of_[stream].data(); }
  // Whether a cell's rows are hot (stream: agentkv::Error, cell: std::logic_error when out of range).
  bool is_hot(uint32_t stream, uint32_t cell) const;

  // The sequence whose cells are kept for later, not read now (the prefix index's holder): a
  // cell only it holds leaves the window before any other sequence's. -1: none. Otherwise the
  // window gives up the cells furthest behind their own sequence's newest position.
  void set_background(SeqId seq);

  // The counts: a scan of the cell tables with a window; without one, their used counts (all hot).
  KvResidency residency() const;
  // Cells of one sequence whose rows are hot / in the tail (first, second).
  std::pair<uint64_t, uint64_t> seq_residency(SeqId seq) const;

 private:
  // The slot maps change only with the rows they describe: the cache and its rows move them.
  friend class KvCache;
  friend class KvRows;

  // A cell whose rows leave hot slot `slot` for the tail (KvRows::demote moves them).
  struct Demotion {
    uint32_t cell;
    int32_t slot;
  };
  // Gives every target cell (one stream, ascending, at most hot_cells) a hot slot: free slots
  // first, then those of the cells the policy gives up (set_background). Returns the used cells
  // whose rows must move to the tail, before anything is written to the slots they held.
  std::vector<Demotion> make_hot(uint32_t stream, const std::vector<uint32_t>& targets);
  // Gives the free slots of a stream to the highest of `cells` (ascending) that have none, as a
  // prefill would have left them (ascending slots for ascending cells: attention then reads the
  // window's rows in address order). Returns the cells given one, ascending: their rows are
  // whatever the slot held.
  std::vector<uint32_t> give_free_slots(uint32_t stream, const std::vector<uint32_t>& cells);
  // A cell gives up its slot (its rows are about to be overwritten in the tail).
  void release(uint32_t stream, uint32_t cell);

  const KvLayout& layout_;
  const std::vector<KvCells>& cells_;
  bool windowed_ = false;
  uint32_t n_hot_ = 0;
  // Per stream: slot_of_[cell] (-1: rows in the tail), cell_of_[slot] (-1: free). Empty without a window.
  std::vector<std::vector<int32_t>> slot_of_, cell_of_;
  uint64_t demotions_ = 0;
  SeqId background_ = -1;
};

}  // namespace agentkv::memory
