#include "memory/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "agentkv/error.h"

namespace agentkv::memory {
namespace {

constexpr Pos kPosEnd = std::numeric_limits<Pos>::max();  // "no upper bound" of a range
constexpr Pos kPosMax = kPosEnd - 1;                        // largest storable position

struct Range {
  Pos p0, p1;
  bool empty() const { return p0 >= p1; }
  // Whether cell i is used and its position lies in the range.
  bool holds(const KvCells& c, uint32_t i) const { return c.pos(i) >= p0 && c.pos(i) < p1; }
};

Range normalize(Pos p0, Pos p1) { return {p0 < 0 ? 0 : p0, p1 < 0 ? kPosEnd : p1}; }

const KvLayout& checked(const KvLayout& layout) {
  if (layout.n_cells == 0 || layout.n_cells > static_cast<uint32_t>(kPosEnd))
    throw Error("kv cache: cell count " + std::to_string(layout.n_cells) + " outside [1, 2^31)");
  if (layout.n_seq_max == 0 || layout.n_seq_max > static_cast<uint32_t>(kMaxSeq))
    throw Error("kv cache: n_seq_max " + std::to_string(layout.n_seq_max) + " outside [1, " +
                std::to_string(kMaxSeq) + "]");
  return layout;
}

std::vector<KvCells> cell_tables(const KvLayout& layout) {
  std::vector<KvCells> cells;
  cells.reserve(layout.n_streams());
  for (uint32_t s = 0; s < layout.n_streams(); ++s) cells.emplace_back(layout.n_cells, layout.n_seq_max);
  return cells;
}

void check_shape(const UBatch& ub) {
  if (ub.pos.size() != ub.seq.size())
    throw Error("kv cache: ubatch has " + std::to_string(ub.pos.size()) + " positions but " +
                std::to_string(ub.seq.size()) + " sequence lists");
}

// Removes seq from its cells at positions [p0, p1) found through the cell table's note of each
// (sequence, position): O(positions), not O(pool) — a request's sequence leaving a pool of
// millions of cached cells. False (some or none removed) when a position holds several cells of
// seq or one not noted: the caller scans for the rest.
bool remove_by_position(KvCells& c, SeqId seq, Pos p0, Pos p1) {
  const Pos lo = std::max(p0, c.seq_pos_min(seq));
  const Pos hi = c.seq_pos_max(seq) < p1 ? c.seq_pos_max(seq) + 1 : p1;
  if (c.seq_pos_min(seq) < 0 || lo >= hi) return true;
  if (c.seq_positions(seq).max_count(lo, hi) > 1) return false;
  for (Pos p = lo; p < hi; ++p) {
    const uint32_t i = c.cell_at(seq, p);
    if (i == KvCells::kUnnoted) return false;
    if (i != KvCells::kNoCell) c.remove_seq(i, seq);
  }
  return true;
}

}  // namespace

KvCache::KvCache(const KvLayout& layout)
    : layout_(checked(layout)), cells_(cell_tables(layout_)), window_(layout_, cells_), rows_(layout_, window_) {}

KvCache::~KvCache() = default;

// Validates token t of ub and returns the stream its sequences live in.
uint32_t KvCache::token_stream(const UBatch& ub, size_t t) const {
  const auto& seqs = ub.seq[t];
  if (seqs.empty()) throw Error("kv cache: token " + std::to_string(t) + " has no sequence");
  const Pos p = ub.pos[t];
  if (p < 0 || p > kPosMax)
    throw Error("kv cache: token " + std::to_string(t) + " has invalid position " +
                std::to_string(p));
  for (SeqId s : seqs) layout_.check_seq(s, "ubatch");
  const uint32_t stream = layout_.stream_of(seqs[0]);
  for (SeqId s : seqs)
    if (layout_.stream_of(s) != stream)
      throw Error("kv cache: token " + std::to_string(t) + " belongs to sequences " +
                  std::to_string(seqs[0]) + " and " + std::to_string(s) +
                  ", which live in different streams (the cache is not unified)");
  return stream;
}

// Simulates placing the ubatches in order without touching the cells. Tokens take the
// lowest-numbered empty cells of their stream, in token order. A search starts at the stream's
// first free cell; within one plan the next ubatch starts after the last cell the previous one
// took, since everything below it is used or already taken by the plan.
std::optional<std::vector<Placement>> KvCache::plan(const UBatch* ubs, size_t n_ubs) const {
  const uint32_t n_streams = layout_.n_streams();
  std::vector<uint32_t> start(n_streams), free_left(n_streams);
  for (uint32_t s = 0; s < n_streams; ++s) {
    start[s] = cells_[s].first_free();
    free_left[s] = cells_[s].size() - cells_[s].used();
  }

  std::vector<Placement> result;
  result.reserve(n_ubs);
  std::vector<std::vector<uint32_t>> tokens_of(n_streams);
  for (size_t u = 0; u < n_ubs; ++u) {
    const UBatch& ub = ubs[u];
    check_shape(ub);
    for (auto& list : tokens_of) list.clear();
    for (size_t t = 0; t < ub.size(); ++t)
      tokens_of[token_stream(ub, t)].push_back(static_cast<uint32_t>(t));

    Placement placement(ub.size());
    for (uint32_t s = 0; s < n_streams; ++s) {
      const auto& toks = tokens_of[s];
      if (toks.empty()) continue;
      if (toks.size() > free_left[s] || toks.size() > window_.hot_cells()) return std::nullopt;
      const KvCells& c = cells_[s];
      uint32_t idx = start[s];
      for (uint32_t tok : toks) {
        while (idx < c.size() && !c.is_empty(idx)) ++idx;
        if (idx >= c.size())  // cannot happen: no empty cell lies below first_free()
          throw std::logic_error("kv cache: free cell count and cell table disagree");
        placement[tok] = CellRef{s, idx++};
      }
      free_left[s] -= static_cast<uint32_t>(toks.size());
      start[s] = idx;
    }
    result.push_back(std::move(placement));
  }
  return result;
}

std::optional<Placement> KvCache::find_slot(const UBatch& ub) const {
  auto plans = plan(&ub, 1);
  if (!plans) return std::nullopt;
  return std::move(plans->front());
}

std::optional<std::vector<Placement>> KvCache::find_slots(const std::vector<UBatch>& ubs) const {
  return plan(ubs.data(), ubs.size());
}

void KvCache::apply(const UBatch& ub, const Placement& placement) {
  check_shape(ub);
  if (placement.size() != ub.size())
    throw std::logic_error("kv cache: placement of " + std::to_string(placement.size()) +
                           " cells for a ubatch of " + std::to_string(ub.size()) + " tokens");
  // Validate everything before the first change so a bad placement leaves the cache as it was.
  std::vector<std::pair<uint32_t, uint32_t>> targets;
  targets.reserve(ub.size());
  for (size_t t = 0; t < ub.size(); ++t) {
    const uint32_t stream = token_stream(ub, t);
    const CellRef ref = placement[t];
    if (ref.stream != stream || ref.cell >= layout_.n_cells || !cells_[stream].is_empty(ref.cell))
      throw std::logic_error("kv cache: placement of token " + std::to_string(t) +
                             " is not an empty cell of its stream (stale find_slot result?)");
    targets.emplace_back(ref.stream, ref.cell);
  }
  std::sort(targets.begin(), targets.end());
  if (std::adjacent_find(targets.begin(), targets.end()) != targets.end())
    throw std::logic_error("kv cache: placement uses a cell twice");

  if (window_.windowed()) {  // before occupying: the rows moved out are chosen among the cells as they were
    std::vector<uint32_t> in_stream;
    for (uint32_t s = 0; s < layout_.n_streams(); ++s) {
      in_stream.clear();
      for (const auto& [stream, cell] : targets)
        if (stream == s) in_stream.push_back(cell);
      if (in_stream.empty()) continue;
      for (const KvWindow::Demotion& d : window_.make_hot(s, in_stream)) rows_.demote(s, d.cell, d.slot);
    }
  }
  for (size_t t = 0; t < ub.size(); ++t) {
    SeqSet seqs;
    for (SeqId s : ub.seq[t]) seqs.set(static_cast<size_t>(s));
    const CellRef ref = placement[t];
    cells_[ref.stream].assign(ref.cell, ub.pos[t], seqs);
  }
}

MemoryUsage KvCache::usage() const {
  MemoryUsage u;
  for (const KvCells& c : cells_) u.cells_used += c.used(), u.cells_total += c.size();
  u.bytes_total = rows_.storage_bytes();
  return u;
}

uint32_t KvCache::n_kv(uint32_t stream) const {
  layout_.check_stream(stream);
  const uint32_t used_end = cells_[stream].used_max_p1();
  const uint64_t padded = (static_cast<uint64_t>(used_end) + kNKvPad - 1) / kNKvPad * kNKvPad;
  return static_cast<uint32_t>(std::min<uint64_t>(layout_.n_cells, std::max<uint64_t>(kNKvPad, padded)));
}

void KvCache::fill_mask(const UBatch& ub, const std::vector<int>& tokens, uint32_t stream,
                        float* mask, int64_t mask_stride) const {
  check_shape(ub);
  const uint32_t n = n_kv(stream);
  const KvCells& c = cells_[stream];
  const Pos* pos = c.pos_data();
  const SeqSet* seq = c.seq_data();
  for (size_t r = 0; r < tokens.size(); ++r) {
    const int t = tokens[r];
    if (t < 0 || static_cast<size_t>(t) >= ub.size())
      throw Error("kv cache: mask token index " + std::to_string(t) + " outside the ubatch");
    if (ub.seq[static_cast<size_t>(t)].empty())
      throw Error("kv cache: token " + std::to_string(t) + " has no sequence");
    const SeqId s = ub.seq[static_cast<size_t>(t)][0];
    layout_.check_seq(s, "fill_mask");
    if (layout_.stream_of(s) != stream)
      throw Error("kv cache: token " + std::to_string(t) + " of sequence " + std::to_string(s) +
                  " masked against stream " + std::to_string(stream));
    const Pos p = ub.pos[static_cast<size_t>(t)];
    float* out = mask + static_cast<int64_t>(r) * mask_stride;
    // Empty cells have pos -1 and no sequence, so the seq test hides them too.
    for (uint32_t j = 0; j < n; ++j)
      out[j] = (pos[j] <= p && seq[j].test(static_cast<size_t>(s))) ? 0.0f : -INFINITY;
  }
}

const KvCells& KvCache::cells(uint32_t stream) const {
  layout_.check_stream(stream);
  return cells_[stream];
}

bool KvCache::has_shift() const {
  for (const auto& c : cells_)
    if (c.has_shift()) return true;
  return false;
}

void KvCache::reset_shift() {
  for (auto& c : cells_) c.reset_shift();
}

void KvCache::clear(bool zero_data) {
  if (zero_data) rows_.zero_all();
  for (auto& c : cells_) c.reset(zero_data);
}

bool KvCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  if (seq >= 0) layout_.check_seq(seq, "seq_rm");
  const Range r = normalize(p0, p1);
  if (r.empty()) return true;
  if (seq >= 0 && remove_by_position(cells_[layout_.stream_of(seq)], seq, r.p0, r.p1)) return true;
  for (uint32_t s = 0; s < layout_.n_streams(); ++s) {
    if (seq >= 0 && s != layout_.stream_of(seq)) continue;
    KvCells& c = cells_[s];
    for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
      if (!r.holds(c, i)) continue;
      if (seq >= 0) c.remove_seq(i, seq);
      else c.release(i);
    }
  }
  return true;
}

void KvCache::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  layout_.check_seq(src, "seq_cp");
  layout_.check_seq(dst, "seq_cp");
  if (src == dst) return;
  const Range r = normalize(p0, p1);
  const uint32_t s0 = layout_.stream_of(src), s1 = layout_.stream_of(dst);
  KvCells& from = cells_[s0];

  if (s0 == s1) {
    // One stream: the cells (and their K/V rows) are shared, dst just joins them.
    if (r.empty()) return;
    for (uint32_t i = 0; i < from.used_max_p1(); ++i)
      if (r.holds(from, i) && from.has_seq(i, src)) from.add_seq(i, dst);
    return;
  }

  // Across streams the rows must be copied, and the copy replaces dst wholesale. A partial copy
  // would have to merge src's cells into dst's existing ones at other indices, which no caller
  // needs (forking copies whole sequences); llama.cpp has the same restriction.
  const Pos lo = from.seq_pos_min(src), hi = from.seq_pos_max(src);
  if (lo >= 0 && (r.p0 > lo || r.p1 <= hi))
    throw Error("kv cache: seq_cp from sequence " + std::to_string(src) + " to " +
                std::to_string(dst) + " crosses streams and must copy the whole sequence " +
                "(positions " + std::to_string(lo) + ".." + std::to_string(hi) + "), not [" +
                std::to_string(p0) + ", " + std::to_string(p1) + ")");

  // A stream of a non-unified cache only ever holds its own sequence, so replacing dst means
  // resetting its stream. Cells keep their indices; pending shifts travel with the rows.
  KvCells& to = cells_[s1];
  to.reset();
  SeqSet only_dst;
  only_dst.set(static_cast<size_t>(dst));
  uint32_t run_start = 0, run_len = 0;
  for (uint32_t i = 0; i <= from.size(); ++i) {
    const bool copy = i < from.size() && from.has_seq(i, src);
    if (copy) {
      to.assign(i, from.pos(i), only_dst, from.shift(i));
      if (run_len == 0) run_start = i;
      ++run_len;
    } else if (run_len > 0) {
      rows_.copy_rows(s0, s1, run_start, run_len);
      run_len = 0;
    }
  }
}

void KvCache::seq_keep(SeqId seq) {
  layout_.check_seq(seq, "seq_keep");
  SeqSet only;
  only.set(static_cast<size_t>(seq));
  for (KvCells& c : cells_)
    for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
      if (c.is_empty(i)) continue;
      if (!c.has_seq(i, seq)) c.release(i);
      else if (c.seqs(i).count() > 1) c.assign(i, c.pos(i), only, c.shift(i));
    }
}

void KvCache::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  layout_.check_seq(seq, "seq_add");
  const Range r = normalize(p0, p1);
  if (delta == 0 || r.empty()) return;
  KvCells& c = cells_[layout_.stream_of(seq)];
  if (delta > 0) {
    // Check before changing anything: the highest affected position must stay storable.
    const Pos top = std::min<Pos>(c.seq_pos_max(seq), r.p1 - 1);
    if (top >= r.p0 && static_cast<int64_t>(top) + delta > kPosMax)
      throw Error("kv cache: seq_add of " + std::to_string(delta) + " to sequence " +
                  std::to_string(seq) + " moves position " + std::to_string(top) +
                  " past the largest position");
  }
  // No overflow: a positive delta was checked above, a negative one takes a position >= 0 down.
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)
    if (r.holds(c, i) && c.has_seq(i, seq)) c.move(i, c.pos(i) + delta);
}

void KvCache::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  layout_.check_seq(seq, "seq_div");
  if (d < 1) throw Error("kv cache: seq_div divisor " + std::to_string(d) + " must be >= 1");
  const Range r = normalize(p0, p1);
  if (d == 1 || r.empty()) return;
  KvCells& c = cells_[layout_.stream_of(seq)];
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)  // positions are >= 0: the division is floor
    if (r.holds(c, i) && c.has_seq(i, seq)) c.move(i, c.pos(i) / d);
}

Pos KvCache::seq_pos_min(SeqId seq) const {
  layout_.check_seq(seq, "seq_pos_min");
  return cells_[layout_.stream_of(seq)].seq_pos_min(seq);
}

Pos KvCache::seq_pos_max(SeqId seq) const {
  layout_.check_seq(seq, "seq_pos_max");
  return cells_[layout_.stream_of(seq)].seq_pos_max(seq);
}

void KvCache::restore_cell(uint32_t stream, uint32_t cell, Pos pos, const SeqSet& seqs, Pos shift) {
  if (stream >= layout_.n_streams() || cell >= layout_.n_cells)
    throw std::logic_error("kv cache: restore_cell: cell " + std::to_string(cell) + " of stream " +
                           std::to_string(stream) + " does not exist");
  if (pos >= 0) {
    if (pos > kPosMax || seqs.none())
      throw std::logic_error("kv cache: restore_cell: used cell needs a valid position and a sequence");
    for (size_t s = seqs._Find_first(); s < seqs.size(); s = seqs._Find_next(s))
      if (s >= layout_.n_seq_max || layout_.stream_of(static_cast<SeqId>(s)) != stream)
        throw std::logic_error("kv cache: restore_cell: sequence " + std::to_string(s) +
                               " cannot live in stream " + std::to_string(stream));
  }
  cells_[stream].assign(cell, pos, seqs, pos >= 0 ? shift : 0);
}

void KvCache::seq_fake_prefix(SeqId seq, Pos n, Pos first) {
  layout_.check_seq(seq, "seq_fake_prefix");
  if (n < 0 || n > kPosEnd - 1)
    throw Error("kv cache: seq_fake_prefix length " + std::to_string(n) + " outside [0, 2^31 - 1)");
  if (first < 0 || first > n)
    throw Error("kv cache: seq_fake_prefix first position " + std::to_string(first) + " outside [0, " + std::to_string(n) + "]");
  const uint32_t s = layout_.stream_of(seq);
  KvCells& c = cells_[s];
  if (c.seq_pos_max(seq) >= 0)
    throw Error("kv cache: seq_fake_prefix: sequence " + std::to_string(seq) + " is not empty (positions " +
                std::to_string(c.seq_pos_min(seq)) + ".." + std::to_string(c.seq_pos_max(seq)) + ")");
  const uint32_t free_cells = c.size() - c.used();
  const Pos count = n - first;
  if (static_cast<uint32_t>(count) > free_cells)
    throw Error("kv cache: seq_fake_prefix of " + std::to_string(count) + " positions for sequence " +
                std::to_string(seq) + ": only " + std::to_string(free_cells) + " empty cells");
  if (count == 0) return;

  // The lowest empty cells, as placement would pick them.
  std::vector<uint32_t> picked(static_cast<size_t>(count));
  uint32_t idx = c.first_free();
  for (auto& cell : picked) {
    while (!c.is_empty(idx)) ++idx;
    cell = idx++;
  }
  // With a window, free hot rows go to the highest positions, as a prefill would have left them;
  // such a row holds whatever its slot held.
  const std::vector<uint32_t> given =
      window_.windowed() ? window_.give_free_slots(s, picked) : std::vector<uint32_t>{};
  auto needs_zero = [&](uint32_t cell) {
    return !c.known_zero(cell) || std::binary_search(given.begin(), given.end(), cell);
  };
  // Cells used before may hold old rows: zero those (runs of adjacent cells at once).
  for (size_t k = 0; k < picked.size();) {
    if (!needs_zero(picked[k])) {
      ++k;
      continue;
    }
    size_t e = k + 1;
    while (e < picked.size() && picked[e] == picked[e - 1] + 1 && needs_zero(picked[e])) ++e;
    rows_.zero_cells(s, picked[k], static_cast<uint32_t>(e - k));
    k = e;
  }
  SeqSet only;
  only.set(static_cast<size_t>(seq));
  c.occupy_run(picked.data(), static_cast<uint32_t>(count), first, only, /*rows_zero=*/true);
}

}  // namespace agentkv::memory
