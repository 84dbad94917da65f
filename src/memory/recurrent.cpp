#include "memory/recurrent.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "agentkv/error.h"

namespace agentkv::memory {

namespace {
struct Cell {
  Pos pos = -1;          // last absorbed position; -1 = empty
  std::set<SeqId> seqs;  // sequences whose state this is (several after seq_cp)
};
}  // namespace

struct RecurrentMemory::Impl {
  RecurrentLayout layout;
  std::vector<Cell> cells;
  std::vector<int32_t> tail;  // per sequence: its cell, or -1
  std::vector<int> layer_slot;  // model layer -> index into conv/ssm, or -1
  std::vector<std::vector<float>> conv, ssm;

  void release(SeqId s) {
    const int32_t c = tail[s];
    if (c < 0) return;
    cells[c].seqs.erase(s);
    if (cells[c].seqs.empty()) cells[c].pos = -1;
    tail[s] = -1;
  }
  void copy_state(uint32_t from, uint32_t to) {
    for (size_t l = 0; l < conv.size(); ++l) {
      std::memcpy(&conv[l][to * layout.n_conv], &conv[l][from * layout.n_conv], layout.n_conv * sizeof(float));
      std::memcpy(&ssm[l][to * layout.n_ssm], &ssm[l][from * layout.n_ssm], layout.n_ssm * sizeof(float));
    }
  }
  void zero_state(uint32_t c) {
    for (size_t l = 0; l < conv.size(); ++l) {
      std::fill_n(&conv[l][c * layout.n_conv], layout.n_conv, 0.0f);
      std::fill_n(&ssm[l][c * layout.n_ssm], layout.n_ssm, 0.0f);
    }
  }
  int slot(int layer) const {
    if (layer < 0 || layer >= static_cast<int>(layer_slot.size()) || layer_slot[layer] < 0)
      throw std::logic_error("layer " + std::to_string(layer) + " has no recurrent state");
    return layer_slot[layer];
  }
};

RecurrentMemory::RecurrentMemory(const RecurrentLayout& layout) : impl_(new Impl) {
  if (layout.n_seq_max < 1 || layout.n_seq_max > static_cast<uint32_t>(kMaxSeq))
    throw Error("recurrent memory: n_seq_max out of range");
  impl_->layout = layout;
  // One cell per sequence suffices: used cells never exceed live sequences, so a copy-on-write
  // always finds an empty cell.
  impl_->cells.resize(layout.n_seq_max);
  impl_->tail.assign(layout.n_seq_max, -1);
  for (bool r : layout.layer_recurrent) {
    impl_->layer_slot.push_back(r ? static_cast<int>(impl_->conv.size()) : -1);
    if (r) {
      impl_->conv.emplace_back(static_cast<size_t>(layout.n_conv) * layout.n_seq_max, 0.0f);
      impl_->ssm.emplace_back(static_cast<size_t>(layout.n_ssm) * layout.n_seq_max, 0.0f);
    }
  }
}

RecurrentMemory::~RecurrentMemory() { delete impl_; }

const RecurrentLayout& RecurrentMemory::layout() const { return impl_->layout; }
uint32_t RecurrentMemory::n_cells() const { return static_cast<uint32_t>(impl_->cells.size()); }

MemoryUsage RecurrentMemory::usage() const {
  MemoryUsage u;
  for (const Cell& c : impl_->cells) u.cells_used += c.pos >= 0 || !c.seqs.empty() ? 1 : 0;
  u.cells_total = impl_->cells.size();
  for (const auto& v : impl_->conv) u.bytes_total += v.size() * sizeof(float);
  for (const auto& v : impl_->ssm) u.bytes_total += v.size() * sizeof(float);
  return u;
}

std::optional<RecurrentPlacement> RecurrentMemory::find_slot(const UBatch& ub) const {
  RecurrentPlacement p;
  std::vector<bool> taken(impl_->cells.size(), false);
  for (size_t c = 0; c < impl_->cells.size(); ++c) taken[c] = impl_->cells[c].pos >= 0 || !impl_->cells[c].seqs.empty();
  std::vector<SeqId> seqs;
  for (size_t t = 0; t < ub.size(); ++t) {
    if (ub.seq[t].size() != 1) throw Error("recurrent memory: a token must belong to exactly one sequence");
    const SeqId s = ub.seq[t][0];
    if (s < 0 || s >= static_cast<SeqId>(impl_->tail.size())) throw Error("recurrent memory: sequence id out of range");
    if (std::find(seqs.begin(), seqs.end(), s) == seqs.end()) seqs.push_back(s);
  }
  // Members of each cell that stay in it: when every sequence sharing a cell is in this ubatch,
  // all but the last move out (copy-on-write) and the last keeps the cell. Without this, forked
  // sequences extended together could need more empty cells than exist.
  std::vector<size_t> staying(impl_->cells.size());
  for (size_t c = 0; c < impl_->cells.size(); ++c) staying[c] = impl_->cells[c].seqs.size();
  for (SeqId s : seqs) {
    const int32_t c = impl_->tail[s];
    if (c >= 0 && staying[c] == 1) {
      p.seq_cell.emplace_back(s, static_cast<uint32_t>(c));
      continue;
    }
    if (c >= 0) --staying[c];
    // New sequence, or a shared cell to copy before writing: take an empty cell.
    auto it = std::find(taken.begin(), taken.end(), false);
    if (it == taken.end()) return std::nullopt;
    *it = true;
    p.seq_cell.emplace_back(s, static_cast<uint32_t>(it - taken.begin()));
  }
  return p;
}

void RecurrentMemory::apply(const UBatch& ub, const RecurrentPlacement& placement) {
  for (const auto& [s, cell] : placement.seq_cell) {
    const int32_t old = impl_->tail[s];
    if (old != static_cast<int32_t>(cell)) {
      if (old >= 0) impl_->copy_state(static_cast<uint32_t>(old), cell);  // copy-on-write
      else impl_->zero_state(cell);
      const Pos old_pos = old >= 0 ? impl_->cells[old].pos : -1;
      impl_->release(s);
      impl_->cells[cell].seqs = {s};
      impl_->cells[cell].pos = old_pos;
      impl_->tail[s] = static_cast<int32_t>(cell);
    }
    for (size_t t = 0; t < ub.size(); ++t)
      if (ub.seq[t][0] == s) impl_->cells[cell].pos = std::max(impl_->cells[cell].pos, ub.pos[t]);
  }
}

float* RecurrentMemory::conv_state(int layer, uint32_t cell) {
  return &impl_->conv[impl_->slot(layer)][static_cast<size_t>(cell) * impl_->layout.n_conv];
}
float* RecurrentMemory::ssm_state(int layer, uint32_t cell) {
  return &impl_->ssm[impl_->slot(layer)][static_cast<size_t>(cell) * impl_->layout.n_ssm];
}
const float* RecurrentMemory::conv_state(int layer, uint32_t cell) const {
  return &impl_->conv[impl_->slot(layer)][static_cast<size_t>(cell) * impl_->layout.n_conv];
}
const float* RecurrentMemory::ssm_state(int layer, uint32_t cell) const {
  return &impl_->ssm[impl_->slot(layer)][static_cast<size_t>(cell) * impl_->layout.n_ssm];
}

void RecurrentMemory::clear() {
  for (auto& c : impl_->cells) c = Cell{};
  std::fill(impl_->tail.begin(), impl_->tail.end(), -1);
}

bool RecurrentMemory::seq_rm(SeqId seq, Pos p0, Pos p1) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = INT_MAX;
  if (seq >= static_cast<SeqId>(impl_->tail.size())) return false;
  if (seq < 0) {
    // All sequences: only "everything" (or an empty range) is meaningful for states.
    if (p0 >= p1) return true;
    if (p0 != 0 || p1 != INT_MAX) return false;
    clear();
    return true;
  }
  const int32_t c = impl_->tail[seq];
  if (c < 0 || p0 >= p1) return true;
  const Pos last = impl_->cells[c].pos;
  if (p0 > last || p1 <= last) return true;  // the state does not cover that range: nothing to undo
  if (p0 > 0) return false;                   // would need to un-absorb tokens [p0, last]
  impl_->release(seq);                        // the whole sequence goes
  return true;
}

void RecurrentMemory::seq_cp(SeqId src, SeqId dst, Pos, Pos) {
  const SeqId n = static_cast<SeqId>(impl_->tail.size());
  if (src < 0 || dst < 0 || src >= n || dst >= n || src == dst) return;
  impl_->release(dst);
  const int32_t c = impl_->tail[src];
  if (c < 0) return;
  impl_->cells[c].seqs.insert(dst);
  impl_->tail[dst] = c;
}

void RecurrentMemory::seq_keep(SeqId seq) {
  for (SeqId s = 0; s < static_cast<SeqId>(impl_->tail.size()); ++s)
    if (s != seq) impl_->release(s);
}

void RecurrentMemory::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = INT_MAX;
  if (seq < 0 || seq >= static_cast<SeqId>(impl_->tail.size()) || delta == 0) return;
  const int32_t c = impl_->tail[seq];
  if (c < 0) return;
  Cell& cell = impl_->cells[c];
  if (cell.pos < p0 || cell.pos >= p1) return;
  const int64_t moved = static_cast<int64_t>(cell.pos) + delta;
  if (moved < 0) {
    // As in the KV cache, a state moved before position 0 is gone (for every sequence sharing it).
    const std::set<SeqId> members = cell.seqs;
    for (SeqId s : members) impl_->release(s);
    return;
  }
  cell.pos = static_cast<Pos>(std::min<int64_t>(moved, INT_MAX - 1));
}

void RecurrentMemory::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = INT_MAX;
  if (seq < 0 || seq >= static_cast<SeqId>(impl_->tail.size()) || d <= 1) return;
  const int32_t c = impl_->tail[seq];
  if (c < 0) return;
  Cell& cell = impl_->cells[c];
  if (cell.pos >= p0 && cell.pos < p1) cell.pos /= d;
}

Pos RecurrentMemory::seq_pos_min(SeqId seq) const { return seq_pos_max(seq); }

Pos RecurrentMemory::seq_pos_max(SeqId seq) const {
  if (seq < 0 || seq >= static_cast<SeqId>(impl_->tail.size())) return -1;
  const int32_t c = impl_->tail[seq];
  return c < 0 ? -1 : impl_->cells[c].pos;
}

int32_t RecurrentMemory::seq_cell(SeqId seq) const {
  if (seq < 0 || seq >= static_cast<SeqId>(impl_->tail.size())) return -1;
  return impl_->tail[seq];
}

Pos RecurrentMemory::cell_pos(uint32_t cell) const {
  if (cell >= impl_->cells.size()) throw std::logic_error("recurrent memory: cell out of range");
  return impl_->cells[cell].pos;
}

const std::set<SeqId>& RecurrentMemory::cell_seqs(uint32_t cell) const {
  if (cell >= impl_->cells.size()) throw std::logic_error("recurrent memory: cell out of range");
  return impl_->cells[cell].seqs;
}

void RecurrentMemory::restore_cell(uint32_t cell, Pos pos, const std::vector<SeqId>& seqs) {
  Impl& m = *impl_;
  if (cell >= m.cells.size() || pos < 0 || seqs.empty() || m.cells[cell].pos >= 0 ||
      !m.cells[cell].seqs.empty())
    throw std::logic_error("recurrent memory: restore_cell needs an empty cell, a position and a sequence");
  for (SeqId s : seqs)
    if (s < 0 || s >= static_cast<SeqId>(m.tail.size()) || m.tail[s] >= 0)
      throw std::logic_error("recurrent memory: restore_cell: sequence " + std::to_string(s) +
                             " is out of range or already holds a cell");
  m.cells[cell].pos = pos;
  m.cells[cell].seqs = std::set<SeqId>(seqs.begin(), seqs.end());
  for (SeqId s : seqs) m.tail[s] = static_cast<int32_t>(cell);
}

uint32_t RecurrentMemory::seq_own_cell(SeqId seq, Pos pos) {
  Impl& m = *impl_;
  if (seq < 0 || seq >= static_cast<SeqId>(m.tail.size()))
    throw Error("recurrent memory: sequence id " + std::to_string(seq) + " outside [0, " +
                std::to_string(m.tail.size()) + ")");
  if (pos < 0) throw Error("recurrent memory: position " + std::to_string(pos) + " is negative");
  const int32_t c = m.tail[seq];
  if (c >= 0 && m.cells[c].seqs.size() == 1) {
    m.cells[c].pos = pos;
    return static_cast<uint32_t>(c);
  }
  m.release(seq);
  // Used cells never outnumber sequences holding a state, and seq holds none now: one is empty.
  uint32_t cell = 0;
  while (cell < m.cells.size() && !m.cells[cell].seqs.empty()) ++cell;
  if (cell == m.cells.size()) throw std::logic_error("recurrent memory: no empty cell for an owned state");
  m.cells[cell].seqs = {seq};
  m.cells[cell].pos = pos;
  m.tail[seq] = static_cast<int32_t>(cell);
  return cell;
}

void RecurrentMemory::seq_fake_prefix(SeqId seq, Pos n) {
  Impl& m = *impl_;
  if (seq < 0 || seq >= static_cast<SeqId>(m.tail.size()))
    throw Error("recurrent memory: seq_fake_prefix: sequence id " + std::to_string(seq) + " outside [0, " +
                std::to_string(m.tail.size()) + ")");
  if (n < 0) throw Error("recurrent memory: seq_fake_prefix length " + std::to_string(n) + " is negative");
  if (m.tail[seq] >= 0)
    throw Error("recurrent memory: seq_fake_prefix: sequence " + std::to_string(seq) + " is not empty");
  if (n == 0) return;
  const uint32_t cell = seq_own_cell(seq, n - 1);
  m.zero_state(cell);
}

}  // namespace agentkv::memory
