#include "memory/kv_window.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

namespace agentkv::memory {

KvWindow::KvWindow(const KvLayout& layout, const std::vector<KvCells>& cells)
    : layout_(layout),
      cells_(cells),
      windowed_(layout.hot_cells > 0 && layout.hot_cells < layout.n_cells),
      n_hot_(windowed_ ? layout.hot_cells : layout.n_cells) {
  if (!windowed_) return;
  slot_of_.assign(layout.n_streams(), std::vector<int32_t>(layout.n_cells, -1));
  cell_of_.assign(layout.n_streams(), std::vector<int32_t>(n_hot_, -1));
}

bool KvWindow::is_hot(uint32_t stream, uint32_t cell) const {
  layout_.check_cell(stream, cell);
  return slot_of(stream, cell) >= 0;
}

void KvWindow::set_background(SeqId seq) {
  if (seq >= 0) layout_.check_seq(seq, "set_window_background");
  background_ = seq;
}

KvResidency KvWindow::residency() const {
  KvResidency r;
  r.windowed = windowed_;
  r.hot_cells = n_hot_;
  r.demotions = demotions_;
  if (!windowed_) {  // every used cell is hot: the tables' counts, no scan
    for (const KvCells& c : cells_) r.hot_used += c.used();
    return r;
  }
  for (uint32_t s = 0; s < cells_.size(); ++s) {
    const KvCells& c = cells_[s];
    for (uint32_t i = 0; i < c.used_max_p1(); ++i)
      if (!c.is_empty(i)) (slot_of(s, i) >= 0 ? r.hot_used : r.tail_used) += 1;
  }
  return r;
}

std::pair<uint64_t, uint64_t> KvWindow::seq_residency(SeqId seq) const {
  layout_.check_seq(seq, "seq_residency");
  const uint32_t s = layout_.stream_of(seq);
  const KvCells& c = cells_[s];
  std::pair<uint64_t, uint64_t> out{0, 0};
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)
    if (c.has_seq(i, seq)) (slot_of(s, i) >= 0 ? out.first : out.second) += 1;
  return out;
}

std::vector<KvWindow::Demotion> KvWindow::make_hot(uint32_t stream, const std::vector<uint32_t>& targets) {
  std::vector<Demotion> demoted;
  std::vector<int32_t>& slots = slot_of_[stream];
  std::vector<int32_t>& owners = cell_of_[stream];
  size_t needed = 0;
  for (uint32_t c : targets) needed += slots[c] < 0;
  if (needed == 0) return demoted;
  if (targets.size() > n_hot_)
    throw std::logic_error("kv cache: a batch of " + std::to_string(targets.size()) + " cells does not fit " +
                           std::to_string(n_hot_) + " hot rows");
  // Candidates in order: free rows, empty cells, cells only the background sequence holds (pages
  // cached for later, by position), then the cells furthest behind their own sequence's newest
  // position (for a cell several sequences share, the nearest of them): each sequence keeps its
  // newest rows, whatever the others' lengths. One sequence: the lowest positions go first.
  // (targets are ascending: the cache sorts them)
  const KvCells& c = cells_[stream];
  std::vector<Pos> newest(layout_.n_seq_max);
  for (uint32_t s = 0; s < layout_.n_seq_max; ++s) newest[s] = c.seq_pos_max(static_cast<SeqId>(s));
  enum : int { kFree, kEmpty, kBackground, kActive };
  std::vector<std::tuple<int, int64_t, int32_t>> order;  // (kind, key, slot)
  order.reserve(n_hot_);
  for (int32_t sl = 0; sl < static_cast<int32_t>(n_hot_); ++sl) {
    const int32_t owner = owners[static_cast<size_t>(sl)];
    if (owner < 0) {
      order.emplace_back(kFree, 0, sl);
      continue;
    }
    const auto oc = static_cast<uint32_t>(owner);
    if (std::binary_search(targets.begin(), targets.end(), oc)) continue;
    if (c.is_empty(oc)) {
      order.emplace_back(kEmpty, 0, sl);
      continue;
    }
    int64_t behind = std::numeric_limits<int64_t>::max();
    for_each_seq(c.seqs(oc), [&](SeqId s) {
      if (s != background_) behind = std::min<int64_t>(behind, int64_t{newest[static_cast<size_t>(s)]} - c.pos(oc));
    });
    if (behind == std::numeric_limits<int64_t>::max()) {
      order.emplace_back(kBackground, c.pos(oc), sl);
    } else {
      order.emplace_back(kActive, -behind, sl);
    }
  }
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(needed), order.end());
  size_t next = 0;
  for (uint32_t cell : targets) {
    if (slots[cell] >= 0) continue;
    const int32_t sl = std::get<2>(order[next++]);
    const int32_t owner = owners[static_cast<size_t>(sl)];
    if (owner >= 0) {  // its rows move to the tail (an empty cell's rows are never read again)
      const auto oc = static_cast<uint32_t>(owner);
      if (!c.is_empty(oc)) {
        demoted.push_back({oc, sl});
        ++demotions_;
      }
      slots[oc] = -1;
    }
    owners[static_cast<size_t>(sl)] = static_cast<int32_t>(cell);
    slots[cell] = sl;
  }
  return demoted;
}

std::vector<uint32_t> KvWindow::give_free_slots(uint32_t stream, const std::vector<uint32_t>& cells) {
  std::vector<int32_t>& owners = cell_of_[stream];
  std::vector<int32_t>& slots = slot_of_[stream];
  std::vector<int32_t> free_slots;
  for (int32_t sl = 0; sl < static_cast<int32_t>(n_hot_); ++sl)
    if (owners[static_cast<size_t>(sl)] < 0) free_slots.push_back(sl);
  std::vector<uint32_t> newest;  // the highest cells without a hot row, at most one per free slot
  for (size_t j = cells.size(); j-- > 0 && newest.size() < free_slots.size();)
    if (slots[cells[j]] < 0) newest.push_back(cells[j]);
  std::reverse(newest.begin(), newest.end());
  for (size_t i = 0; i < newest.size(); ++i) {
    owners[static_cast<size_t>(free_slots[i])] = static_cast<int32_t>(newest[i]);
    slots[newest[i]] = free_slots[i];
  }
  return newest;
}

void KvWindow::release(uint32_t stream, uint32_t cell) {
  const int32_t sl = slot_of_[stream][cell];
  if (sl < 0) return;
  cell_of_[stream][static_cast<size_t>(sl)] = -1;
  slot_of_[stream][cell] = -1;
}

}  // namespace agentkv::memory
