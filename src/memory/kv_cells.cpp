#include "memory/kv_cells.h"

#include <algorithm>
#include <cassert>

namespace agentkv::memory {

KvCells::KvCells(uint32_t n_cells, uint32_t n_seq)
    : pos_(n_cells, -1), shift_(n_cells, 0), seq_(n_cells), known_zero_(n_cells, 1), seq_pos_(n_seq), noted_(n_seq) {
  assert(n_seq <= kMaxSeq);
}

void KvCells::reset(bool rows_zeroed) {
  std::fill(pos_.begin(), pos_.end(), -1);
  std::fill(shift_.begin(), shift_.end(), 0);
  for (auto& s : seq_) s.reset();
  for (auto& m : seq_pos_) m.clear();
  for (auto& n : noted_) n.clear();
  used_ = 0;
  used_max_p1_ = 0;
  first_free_ = 0;
  has_shift_ = false;
  if (rows_zeroed) std::fill(known_zero_.begin(), known_zero_.end(), 1);
}

void KvCells::reset_shift() {
  std::fill(shift_.begin(), shift_.end(), 0);
  has_shift_ = false;
}

Pos KvCells::seq_pos_min(SeqId s) const { return seq_pos_[static_cast<size_t>(s)].min(); }

Pos KvCells::seq_pos_max(SeqId s) const { return seq_pos_[static_cast<size_t>(s)].max(); }

void KvCells::index_add(uint32_t i) {
  const Pos p = pos_[i];
  for_each_seq(seq_[i], [&](SeqId s) {
    assert(static_cast<uint32_t>(s) < seq_pos_.size());
    seq_pos_[static_cast<size_t>(s)].add(p);
    note_cell(s, p, i);
  });
}

void KvCells::note_cell(SeqId s, Pos p, uint32_t i) {
  // Positions far beyond the table (a shifted or fake context) are not noted: bounded memory.
  if (p < 0 || static_cast<size_t>(p) >= 2 * pos_.size() + 65536) return;
  std::vector<uint32_t>& noted = noted_[static_cast<size_t>(s)];
  if (noted.size() <= static_cast<size_t>(p)) noted.resize(static_cast<size_t>(p) + 1, UINT32_MAX);
  noted[static_cast<size_t>(p)] = i;
}

uint32_t KvCells::cell_at(SeqId s, Pos p) const {
  const std::vector<uint32_t>& noted = noted_[static_cast<size_t>(s)];
  if (p >= 0 && static_cast<size_t>(p) < noted.size()) {
    const uint32_t i = noted[static_cast<size_t>(p)];
    if (i < pos_.size() && pos_[i] == p && seq_[i].test(static_cast<size_t>(s))) return i;
  }
  return seq_pos_[static_cast<size_t>(s)].count(p) > 0 ? kUnnoted : kNoCell;
}

void KvCells::index_remove(uint32_t i) {
  const Pos p = pos_[i];
  for_each_seq(seq_[i], [&](SeqId s) {
    seq_pos_[static_cast<size_t>(s)].remove(p);
  });
}

void KvCells::mark_used(uint32_t i) {
  ++used_;
  known_zero_[i] = 0;
  if (i + 1 > used_max_p1_) used_max_p1_ = i + 1;
  // Filling the lowest hole: walk up to the next one. The cells walked over are the ones a
  // placement search would have scanned anyway.
  if (i == first_free_) {
    const uint32_t n = size();
    do ++first_free_; while (first_free_ < n && pos_[first_free_] >= 0);
  }
}

void KvCells::mark_empty(uint32_t i) {
  pos_[i] = -1;
  shift_[i] = 0;
  seq_[i].reset();
  --used_;
  if (i < first_free_) first_free_ = i;
  // Walk down to the next used cell. Bulk operations free many cells; each empty cell is walked
  // over at most once until a placement above it raises the bound again.
  if (i + 1 == used_max_p1_) {
    while (used_max_p1_ > 0 && pos_[used_max_p1_ - 1] < 0) --used_max_p1_;
  }
}

void KvCells::occupy(uint32_t i, Pos p, const SeqSet& seqs) {
  assert(pos_[i] < 0 && p >= 0 && seqs.any());
  pos_[i] = p;
  seq_[i] = seqs;
  shift_[i] = 0;
  mark_used(i);
  index_add(i);
}

void KvCells::release(uint32_t i) {
  assert(pos_[i] >= 0);
  index_remove(i);
  mark_empty(i);
}

void KvCells::assign(uint32_t i, Pos p, const SeqSet& seqs, Pos shift) {
  if (pos_[i] >= 0 && p >= 0) {
    // Stays used (a sequence joins or leaves a cached cell): released and occupied again, the
    // cell would become the lowest hole and mark_used would walk the used cells above it.
    assert(seqs.any());
    index_remove(i);
    pos_[i] = p;
    seq_[i] = seqs;
    index_add(i);
  } else {
    if (pos_[i] >= 0) release(i);
    if (p < 0) return;
    occupy(i, p, seqs);
  }
  shift_[i] = shift;
  if (shift != 0) has_shift_ = true;
}

void KvCells::add_seq(uint32_t i, SeqId s) {
  assert(pos_[i] >= 0);
  if (seq_[i].test(static_cast<size_t>(s))) return;
  seq_[i].set(static_cast<size_t>(s));
  seq_pos_[static_cast<size_t>(s)].add(pos_[i]);
  note_cell(s, pos_[i], i);
}

bool KvCells::remove_seq(uint32_t i, SeqId s) {
  if (pos_[i] < 0 || !seq_[i].test(static_cast<size_t>(s))) return false;
  seq_pos_[static_cast<size_t>(s)].remove(pos_[i]);
  seq_[i].reset(static_cast<size_t>(s));
  if (seq_[i].none()) {
    mark_empty(i);
    return true;
  }
  return false;
}

bool KvCells::move(uint32_t i, Pos p) {
  assert(pos_[i] >= 0);
  index_remove(i);
  if (p < 0) {
    mark_empty(i);
    return true;
  }
  // The keys must be rotated by the change of position (new - old). llama.cpp records old - new
  // for a division, the opposite sign of its pos_add; see docs/memory-semantics.md.
  shift_[i] += p - pos_[i];
  pos_[i] = p;
  has_shift_ = true;
  index_add(i);
  return false;
}

void KvCells::occupy_run(const uint32_t* cells, uint32_t n, Pos p0, const SeqSet& seqs, bool rows_zero) {
  if (n == 0) return;
  assert(p0 >= 0 && seqs.any());
  uint32_t top = used_max_p1_;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t i = cells[k];
    assert(pos_[i] < 0);
    pos_[i] = p0 + static_cast<Pos>(k);
    shift_[i] = 0;
    seq_[i] = seqs;
    known_zero_[i] = rows_zero ? 1 : 0;
    if (i + 1 > top) top = i + 1;
  }
  used_ += n;
  used_max_p1_ = top;
  while (first_free_ < size() && pos_[first_free_] >= 0) ++first_free_;
  // The run's positions are consecutive, so each sequence gains them as one run, unless a
  // sequence already holds some of them (then they go in one by one, as occupy() would).
  const Pos p1 = p0 + static_cast<Pos>(n);
  for_each_seq(seqs, [&](SeqId s) {
    PosMultiset& m = seq_pos_[static_cast<size_t>(s)];
    if (m.empty() || m.max() < p0 || m.min() >= p1) {
      m.add_range(p0, p1);
    } else {
      for (Pos p = p0; p < p1; ++p) m.add(p);
    }
  });
}

size_t cells_free_for(const KvCells& c, SeqId seq) {
  size_t n = 0;
  for (uint32_t i = 0; i < c.size(); ++i)
    if (c.is_empty(i) || (c.has_seq(i, seq) && c.seqs(i).count() == 1)) ++n;
  return n;
}

std::vector<std::pair<uint32_t, Pos>> pending_shifts(const KvCells& c) {
  std::vector<std::pair<uint32_t, Pos>> out;
  if (!c.has_shift()) return out;
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)
    if (!c.is_empty(i) && c.shift(i) != 0 && !c.known_zero(i)) out.emplace_back(i, c.shift(i));
  return out;
}

}  // namespace agentkv::memory
