// The sliding-window rows of cached pages (docs/memory-semantics.md §10): a page of the prefix
// index keeps, besides its full-attention rows in the main cache, its positions' rows of the
// windowed layers in the window part, held under the index's sequence. A prompt leaving a cached
// chain at d then resumes exactly at d — the window before d comes from the pages — instead of at
// the latest snapshot before d. The window part has room for capacity() such cells beyond what
// the sequences need (WindowKv::cached_cells, --swa-cache); the least recently used pages give
// theirs up first, and a page may hold some of its positions' rows only (the sequence that
// published it had already let the others go). Pages are named by the index's page ids.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memory/sequence_memory.h"
#include "memory/window_kv.h"

namespace agentkv::memory {


// Whether a memory's cached pages keep their window rows: a window part with room for them
// (--swa-cache), and no recurrent part (which would need its state at the resume point too: a
// hybrid resumes at snapshots only).
inline bool keeps_window_rows(const SequenceMemory& mem) {
  return mem.window() && mem.window()->cached_cells() > 0 && !mem.rec();
}

class WindowPages {
 public:
  WindowPages(WindowKv& window, SeqId holder, uint32_t page_tokens);

  uint32_t capacity() const { return window_.cached_cells(); }
  size_t cells_held() const { return held_; }

  // Page `page` holds positions [first_pos, first_pos + n) of a chain seq holds: it takes seq's
  // window rows at the positions it has none for (evicting other pages' rows for room). Touches it.
  void adopt(int32_t page, SeqId seq, Pos first_pos, size_t n);
  void touch(int32_t page);
  void release(int32_t page);  // the page left the index
  // The cells holding the window rows of the page's first n positions; empty unless it holds all.
  std::vector<uint32_t> cells_of(int32_t page, size_t n) const;
  // Rows from a tier (a window record, memory/page_record.h): the page takes n empty cells for
  // its positions [first_pos, first_pos + n), evicting other pages' rows for room, and
  // write_rows(cells) fills them. False, changing nothing, when there is no room.
  bool adopt_rows(int32_t page, Pos first_pos, size_t n, const std::function<void(std::span<const uint32_t>)>& write_rows);

  // `path`: a chain's pages, page k holding positions [kP, kP + P). The latest r in (floor, n]
  // at which a sequence can resume on it: its pages hold the window rows of
  // [max(0, r - window + 1), r). 0: none.
  size_t resume_point(std::span<const int32_t> path, size_t n, size_t floor) const;
  // The window part's empty sequence seq takes the pages' rows of the positions before r that it
  // can see or roll back to (resume_point(path, r, ...) == r). Touches the pages.
  void join(SeqId seq, std::span<const int32_t> path, size_t r);
  // seq is about to move its positions [p0, p1): the pages give up the rows it shares (a shared
  // cell moves with every sequence in it). Returns the rows given up.
  size_t unshare(SeqId seq, Pos p0, Pos p1);
  void clear();
  // Test support: std::logic_error when reference counts, holder membership or the capacity are
  // broken, or a page `alive` denies still holds rows.
  void check(const std::function<bool(int32_t)>& alive) const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Entry {
    Pos first_pos = 0;
    std::vector<uint32_t> cells;  // per position of the page; kNone where none is held
    uint64_t last_used = 0;
  };

  bool holds(uint32_t cell, Pos pos) const;  // the cell still holds pos for the index
  static bool holds_nothing(const std::vector<uint32_t>& cells);  // every position kNone
  bool held_at(std::span<const int32_t> path, size_t pos) const;
  void pin(uint32_t cell);
  void unpin(uint32_t cell);
  bool make_room(size_t n, int32_t except);  // gives up least recently used pages' rows
  void drop(std::unordered_map<int32_t, Entry>::iterator it);

  WindowKv& window_;
  SeqId holder_;
  uint32_t page_tokens_;
  std::unordered_map<int32_t, Entry> pages_;
  std::set<std::pair<uint64_t, int32_t>> lru_;  // pages holding rows, by (last_used, page)
  std::vector<uint16_t> pins_;                 // per window cell: pages naming it
  size_t held_ = 0;                            // cells with pins
  uint64_t tick_ = 0;
};

}  // namespace agentkv::memory
