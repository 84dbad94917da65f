#include "memory/window_pages.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace agentkv::memory {

WindowPages::WindowPages(WindowKv& window, SeqId holder, uint32_t page_tokens)
    : window_(window), holder_(holder), page_tokens_(page_tokens) {
  pins_.assign(window_.kv().layout().n_cells, 0);
}

bool WindowPages::holds(uint32_t cell, Pos pos) const {
  const KvCells& c = window_.kv().cells(0);
  return cell != kNone && !c.is_empty(cell) && c.pos(cell) == pos && c.has_seq(cell, holder_) && c.shift(cell) == 0;
}

void WindowPages::pin(uint32_t cell) {
  if (pins_[cell]++ > 0) return;
  ++held_;
  KvCache& kv = window_.kv();
  const KvCells& c = kv.cells(0);
  SeqSet seqs = c.seqs(cell);
  seqs.set(static_cast<size_t>(holder_));
  kv.restore_cell(0, cell, c.pos(cell), seqs, c.shift(cell));
}

void WindowPages::unpin(uint32_t cell) {
  if (--pins_[cell] > 0) return;
  --held_;
  KvCache& kv = window_.kv();
  const KvCells& c = kv.cells(0);
  if (c.is_empty(cell) || !c.has_seq(cell, holder_)) return;  // freed behind the index's back
  SeqSet seqs = c.seqs(cell);
  seqs.reset(static_cast<size_t>(holder_));
  kv.restore_cell(0, cell, seqs.none() ? -1 : c.pos(cell), seqs, c.shift(cell));
}

bool WindowPages::holds_nothing(const std::vector<uint32_t>& cells) {
  return std::all_of(cells.begin(), cells.end(), [](uint32_t cell) { return cell == kNone; });
}

void WindowPages::drop(std::unordered_map<int32_t, Entry>::iterator it) {
  for (uint32_t cell : it->second.cells)
    if (cell != kNone) unpin(cell);
  lru_.erase({it->second.last_used, it->first});
  pages_.erase(it);
}

void WindowPages::release(int32_t page) {
  if (const auto it = pages_.find(page); it != pages_.end()) drop(it);
}

void WindowPages::touch(int32_t page) {
  const auto it = pages_.find(page);
  if (it == pages_.end()) return;
  lru_.erase({it->second.last_used, page});
  it->second.last_used = ++tick_;
  lru_.emplace(it->second.last_used, page);
}

bool WindowPages::make_room(size_t n, int32_t except) {
  // Pages give up all their rows at once: a page keeping a few is worth little (a resume needs a
  // whole window of them), and the rows of a chain's older pages go first.
  for (auto it = lru_.begin(); held_ + n > capacity() && it != lru_.end();) {
    const int32_t victim = it->second;
    ++it;
    if (victim != except) drop(pages_.find(victim));
  }
  return held_ + n <= capacity();
}

void WindowPages::adopt(int32_t page, SeqId seq, Pos first_pos, size_t n) {
  if (capacity() == 0 || n == 0) return;
  const KvCells& c = window_.kv().cells(0);
  Entry& e = pages_[page];
  if (e.cells.empty()) e.first_pos = first_pos;
  if (e.first_pos != first_pos) throw std::logic_error("window pages: a page changed its position");
  if (e.cells.size() < n) e.cells.resize(n, kNone);
  // The rows seq still holds at the positions this page lacks (a cell noted for seq's position;
  // a cell shared or restored since is left: the page goes without that row).
  std::vector<std::pair<size_t, uint32_t>> take;
  for (size_t j = 0; j < n; ++j) {
    const Pos pos = first_pos + static_cast<Pos>(j);
    if (holds(e.cells[j], pos)) continue;
    const uint32_t cell = c.cell_at(seq, pos);
    if (cell == KvCells::kNoCell || cell == KvCells::kUnnoted || c.shift(cell) != 0) continue;
    take.emplace_back(j, cell);
  }
  // Room for every cell taken, counted as new (a cell another page names may lose that page to
  // make_room and be new by then).
  if (!take.empty() && make_room(take.size(), page))
    for (const auto& [j, cell] : take) {
      if (e.cells[j] != kNone) unpin(e.cells[j]);  // a stale cell (freed or moved since)
      e.cells[j] = cell;
      pin(cell);
    }
  if (holds_nothing(e.cells)) {
    release(page);
    return;
  }
  lru_.erase({e.last_used, page});
  e.last_used = ++tick_;
  lru_.emplace(e.last_used, page);
}

std::vector<uint32_t> WindowPages::cells_of(int32_t page, size_t n) const {
  const auto it = pages_.find(page);
  if (it == pages_.end() || it->second.cells.size() < n) return {};
  for (size_t j = 0; j < n; ++j)
    if (!holds(it->second.cells[j], it->second.first_pos + static_cast<Pos>(j))) return {};
  return {it->second.cells.begin(), it->second.cells.begin() + static_cast<std::ptrdiff_t>(n)};
}

bool WindowPages::adopt_rows(int32_t page, Pos first_pos, size_t n,
                             const std::function<void(std::span<const uint32_t>)>& write_rows) {
  if (n == 0 || n > capacity()) return false;
  if (!cells_of(page, n).empty()) return true;
  release(page);  // what it held in part goes: the record brings all of it
  if (!make_room(n, page)) return false;
  KvCache& kv = window_.kv();
  const KvCells& c = kv.cells(0);
  std::vector<uint32_t> cells;
  for (uint32_t i = 0; i < c.size() && cells.size() < n; ++i)
    if (c.is_empty(i) && pins_[i] == 0) cells.push_back(i);  // (a pin on an empty cell: freed behind the index)
  if (cells.size() < n) return false;
  SeqSet held;
  held.set(static_cast<size_t>(holder_));
  for (size_t j = 0; j < n; ++j) kv.restore_cell(0, cells[j], first_pos + static_cast<Pos>(j), held, 0);
  write_rows(cells);
  Entry& e = pages_[page];
  e.first_pos = first_pos;
  e.cells = cells;
  for (uint32_t cell : cells) {
    pins_[cell] = 1;
    ++held_;
  }
  e.last_used = ++tick_;
  lru_.emplace(e.last_used, page);
  return true;
}

bool WindowPages::held_at(std::span<const int32_t> path, size_t pos) const {
  const size_t k = pos / page_tokens_;
  if (k >= path.size()) return false;
  const auto it = pages_.find(path[k]);
  if (it == pages_.end()) return false;
  const size_t j = pos - k * page_tokens_;
  return j < it->second.cells.size() && holds(it->second.cells[j], static_cast<Pos>(pos));
}

size_t WindowPages::resume_point(std::span<const int32_t> path, size_t n, size_t floor) const {
  if (pages_.empty()) return 0;
  const auto need = static_cast<size_t>(window_.window() - 1);  // rows a token at r sees before it
  // Down from n: each position is read once (a missing row at q moves the candidate to q).
  size_t r = n;
  while (r > floor) {
    const size_t lo = r > need ? r - need : 0;
    size_t q = r;
    while (q > lo && held_at(path, q - 1)) --q;
    if (q == lo) return r;
    r = q - 1;
  }
  return 0;
}

void WindowPages::join(SeqId seq, std::span<const int32_t> path, size_t r) {
  KvCache& kv = window_.kv();
  const KvCells& c = kv.cells(0);
  const size_t lowest = r > static_cast<size_t>(window_.keep()) ? r - static_cast<size_t>(window_.keep()) : 0;
  for (size_t q = r; q > lowest && held_at(path, q - 1); --q) {
    const int32_t page = path[(q - 1) / page_tokens_];
    const uint32_t cell = pages_.at(page).cells[(q - 1) % page_tokens_];
    SeqSet seqs = c.seqs(cell);
    seqs.set(static_cast<size_t>(seq));
    kv.restore_cell(0, cell, c.pos(cell), seqs, c.shift(cell));
    touch(page);
  }
}

size_t WindowPages::unshare(SeqId seq, Pos p0, Pos p1) {
  const KvCells& c = window_.kv().cells(0);
  size_t given = 0;
  for (auto it = pages_.begin(); it != pages_.end();) {
    Entry& e = it->second;
    for (uint32_t& cell : e.cells) {
      if (cell == kNone || c.is_empty(cell) || !c.has_seq(cell, seq)) continue;
      if (c.pos(cell) < p0 || (p1 >= 0 && c.pos(cell) >= p1)) continue;
      unpin(cell);
      cell = kNone;
      ++given;
    }
    const auto next = std::next(it);
    if (holds_nothing(e.cells)) drop(it);  // nothing left to unpin: it leaves the LRU set and the map
    it = next;
  }
  return given;
}

void WindowPages::clear() {
  for (auto& [page, e] : pages_)
    for (uint32_t cell : e.cells)
      if (cell != kNone) unpin(cell);
  pages_.clear();
  lru_.clear();
}

void WindowPages::check(const std::function<bool(int32_t)>& alive) const {
  auto fail = [](const std::string& what) { throw std::logic_error("window pages: " + what); };
  const KvCells& c = window_.kv().cells(0);
  std::vector<uint32_t> counted(pins_.size(), 0);
  for (const auto& [page, e] : pages_) {
    if (!alive(page)) fail("page " + std::to_string(page) + " left the index but holds rows");
    if (!lru_.count({e.last_used, page})) fail("page " + std::to_string(page) + " not in the LRU set");
    for (uint32_t cell : e.cells)
      if (cell != kNone) ++counted[cell];
  }
  if (lru_.size() != pages_.size()) fail("the LRU set names pages without rows");
  size_t held = 0;
  for (size_t cell = 0; cell < pins_.size(); ++cell) {
    if (counted[cell] != pins_[cell]) fail("cell " + std::to_string(cell) + " reference count");
    held += pins_[cell] > 0 ? 1 : 0;
    const bool in = !c.is_empty(static_cast<uint32_t>(cell)) && c.has_seq(static_cast<uint32_t>(cell), holder_);
    if (in != (pins_[cell] > 0)) fail("cell " + std::to_string(cell) + " holder membership");
  }
  if (held != held_) fail("cells held");
  if (held_ > capacity()) fail("more rows held than the capacity");
}

}  // namespace agentkv::memory
