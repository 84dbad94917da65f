#include "memory/attention_view.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "agentkv/error.h"
#include "kernels/attention.h"

namespace agentkv::memory {
namespace {

// The common case of keys_by_position without a scan of the table: when seq holds each of its
// positions up to max_pos in one cell, walks those positions through the table's note of each
// (sequence, position), so the cost follows the sequence's keys, not the cells of the stream (a
// server holding a million cached cells would otherwise scan them all for every decoded token).
// False (rows / pos unspecified) when a position has several cells or an un-noted one, or when
// the positions spread wider than the table: the caller scans then.
bool keys_by_noted_position(const KvCells& cells, SeqId seq, Pos max_pos, std::vector<int32_t>& rows,
                            std::vector<Pos>& pos) {
  const Pos lo = cells.seq_pos_min(seq);
  const Pos hi = std::min(cells.seq_pos_max(seq), max_pos);
  rows.clear();
  pos.clear();
  if (lo < 0 || hi < lo) return true;
  if (static_cast<uint64_t>(hi - lo) >= cells.used_max_p1()) return false;
  if (cells.seq_positions(seq).max_count(lo, hi + 1) > 1) return false;
  for (Pos p = lo; p <= hi; ++p) {
    const uint32_t c = cells.cell_at(seq, p);
    if (c == KvCells::kUnnoted) return false;  // held, but by a cell not noted
    if (c == KvCells::kNoCell) continue;
    rows.push_back(static_cast<int32_t>(c));
    pos.push_back(p);
  }
  return true;
}

// The cells of `seq` in `cells` at positions <= max_pos, by (position, cell). Run once per
// micro-batch (each decoded token at depth pays for it): by the noted cells where it can, else
// one pass over every cell with no reallocation once the vectors have grown and no bounds-checked
// bit tests.
void keys_by_position(const KvCells& cells, SeqId seq, Pos max_pos, std::vector<int32_t>& rows,
                      std::vector<Pos>& pos) {
  if (keys_by_noted_position(cells, seq, max_pos, rows, pos)) return;
  const Pos* cell_pos = cells.pos_data();
  const SeqSet* cell_seq = cells.seq_data();
  const uint32_t end = cells.used_max_p1();
  rows.resize(end);
  pos.resize(end);
  size_t n = 0;
  bool ordered = true;  // cells written in position order (the common case) need no sort
  Pos last = -1;
  const auto bit = static_cast<size_t>(seq);
  for (uint32_t c = 0; c < end; ++c) {
    const Pos p = cell_pos[c];
    if (p < 0 || p > max_pos || !cell_seq[c][bit]) continue;
    ordered = ordered && p >= last;
    last = p;
    rows[n] = static_cast<int32_t>(c);
    pos[n] = p;
    ++n;
  }
  rows.resize(n);
  pos.resize(n);
  if (ordered) return;
  std::vector<std::pair<Pos, int32_t>> keyed(n);
  for (size_t j = 0; j < n; ++j) keyed[j] = {pos[j], rows[j]};
  std::sort(keyed.begin(), keyed.end());
  for (size_t j = 0; j < n; ++j) pos[j] = keyed[j].first, rows[j] = keyed[j].second;
}

// Removes g's keys at positions < first from the front of each part (tail, hot; each sorted by
// position and keeping its order; n_tail follows), a whole number of attention key tiles of each:
// the keys that stay keep the tiles they share with their neighbours whatever the micro-batch's
// earliest token is, so a window layer's rows round alike in a cached and an uncached run
// (batch-invariant numerics; the masked keys left cost a tile at most).
void drop_keys_before(Pos first, AttentionGroup& g, std::vector<Pos>& key_pos) {
  const auto droppable = [&](size_t begin, size_t end) {
    const auto from = std::lower_bound(key_pos.begin() + static_cast<std::ptrdiff_t>(begin),
                                       key_pos.begin() + static_cast<std::ptrdiff_t>(end), first);
    const size_t n = static_cast<size_t>(from - (key_pos.begin() + static_cast<std::ptrdiff_t>(begin)));
    return n / static_cast<size_t>(kAttentionKeyTile) * static_cast<size_t>(kAttentionKeyTile);
  };
  const size_t drop_tail = droppable(0, g.n_tail), drop_hot = droppable(g.n_tail, g.rows.size());
  size_t kept = 0, kept_tail = 0;
  for (size_t j = 0; j < g.rows.size(); ++j) {
    if (j < g.n_tail ? j < drop_tail : j - g.n_tail < drop_hot) continue;
    if (j < g.n_tail) ++kept_tail;
    g.rows[kept] = g.rows[j];
    key_pos[kept] = key_pos[j];
    ++kept;
  }
  g.rows.resize(kept);
  key_pos.resize(kept);
  g.n_tail = kept_tail;
}

// A window part (memory/window_kv.h) holds a sequence's keys from wherever its pruning left it,
// so its key tiles would start at other positions than the main cache's (which holds them from
// 0) and the rows would round otherwise than --swa-full's, or than a run cut into other
// micro-batches. When the keys run without a gap, the list is made to start at the tile boundary
// at or before `first`, as --swa-full's does: keys before it (all masked) leave, and masked
// copies of the first key stand for positions missing after it (they add exact zeros).
void align_key_tiles(Pos first, AttentionGroup& g, std::vector<Pos>& key_pos) {
  if (g.rows.empty() || first <= 0) return;
  const Pos boundary = first / static_cast<Pos>(kAttentionKeyTile) * static_cast<Pos>(kAttentionKeyTile);
  const Pos lo = key_pos.front();
  if (lo > first || key_pos.back() < first || key_pos.back() - lo + 1 != static_cast<Pos>(key_pos.size())) return;
  if (lo < boundary) {
    const auto gone = static_cast<std::ptrdiff_t>(boundary - lo);
    g.rows.erase(g.rows.begin(), g.rows.begin() + gone);
    key_pos.erase(key_pos.begin(), key_pos.begin() + gone);
  } else if (lo > boundary) {
    const auto missing = static_cast<size_t>(lo - boundary);
    g.rows.insert(g.rows.begin(), missing, g.rows.front());
    std::vector<Pos> pads(missing);
    for (size_t j = 0; j < missing; ++j) pads[j] = boundary + static_cast<Pos>(j);
    key_pos.insert(key_pos.begin(), pads.begin(), pads.end());
  }
}

}  // namespace

std::vector<AttentionGroup> attention_groups(const KvCache& kv, const UBatch& ub, Pos sliding_window) {
  std::vector<AttentionGroup> groups;
  attention_groups(kv, ub, groups, sliding_window);
  return groups;
}

void attention_groups(const KvCache& kv, const UBatch& ub, std::vector<AttentionGroup>& groups, Pos sliding_window) {
  size_t n_groups = 0;  // groups[0, n_groups) are this micro-batch's; the vectors of the others are reused
  for (size_t t = 0; t < ub.size(); ++t) {
    if (ub.seq[t].empty()) throw Error("attention view: token " + std::to_string(t) + " has no sequence");
    const SeqId s = ub.seq[t][0];
    if (s < 0 || static_cast<uint32_t>(s) >= kv.layout().n_seq_max)
      throw Error("attention view: token " + std::to_string(t) + " has sequence id " + std::to_string(s) +
                  " outside [0, " + std::to_string(kv.layout().n_seq_max) + ")");
    const uint32_t stream = kv.layout().stream_of(s);
    const auto end = groups.begin() + static_cast<std::ptrdiff_t>(n_groups);
    auto g = std::find_if(groups.begin(), end, [&](const AttentionGroup& x) { return x.seq == s && x.stream == stream; });
    if (g == end) {
      if (n_groups == groups.size()) groups.emplace_back();
      g = groups.begin() + static_cast<std::ptrdiff_t>(n_groups++);
      g->stream = stream;
      g->seq = s;
      g->tokens.clear();
      g->n_tail = 0;
    }
    g->tokens.push_back(static_cast<int>(t));
  }
  groups.resize(n_groups);
  const KvLayout& layout = kv.layout();
  // A tail of another type, or one without every head's rows, is attended apart from the window.
  const KvWindow& window = kv.window();
  const bool split_tail = window.windowed() && (layout.tail_type_k != layout.type_k || layout.tail_type_v != layout.type_v ||
                                                kv.rows().tail_drops_heads());
  thread_local std::vector<Pos> key_pos;  // positions of a group's keys (kept: grown once)
  for (AttentionGroup& g : groups) {
    Pos max_pos = -1;
    for (int t : g.tokens) max_pos = std::max(max_pos, ub.pos[static_cast<size_t>(t)]);
    keys_by_position(kv.cells(g.stream), g.seq, max_pos, g.rows, key_pos);
    if (split_tail) {  // tail keys first, each part still by position
      std::vector<size_t> order(g.rows.size());
      for (size_t j = 0; j < order.size(); ++j) order[j] = j;
      const auto hot_from = std::stable_partition(order.begin(), order.end(), [&](size_t j) {
        return !window.is_hot(g.stream, static_cast<uint32_t>(g.rows[j]));
      });
      g.n_tail = static_cast<size_t>(hot_from - order.begin());
      std::vector<int32_t> rows(order.size());
      std::vector<Pos> pos(order.size());
      for (size_t j = 0; j < order.size(); ++j) rows[j] = g.rows[order[j]], pos[j] = key_pos[order[j]];
      g.rows = std::move(rows);
      key_pos = std::move(pos);
    }
    Pos min_pos = max_pos;
    for (int t : g.tokens) min_pos = std::min(min_pos, ub.pos[static_cast<size_t>(t)]);
    // A sliding window: keys before every token's window are not listed (each part keeps its order).
    if (sliding_window > 0) {
      drop_keys_before(min_pos - sliding_window + 1, g, key_pos);
      if (g.n_tail == 0) align_key_tiles(min_pos - sliding_window + 1, g, key_pos);
    }
    const size_t n = g.rows.size();
    // Each part (tail, then hot) is sorted by position: its first key is its nearest, its last
    // its furthest.
    const Pos max_key = std::max(g.n_tail > 0 ? key_pos[g.n_tail - 1] : -1, n > g.n_tail ? key_pos[n - 1] : -1);
    Pos min_key = max_pos;
    if (g.n_tail > 0) min_key = std::min(min_key, key_pos[0]);
    if (n > g.n_tail) min_key = std::min(min_key, key_pos[g.n_tail]);
    g.keys_visible.assign(g.tokens.size(), static_cast<int64_t>(n));
    // Every token sees every key (a decode step, or tokens after all of their sequence's keys,
    // all within the window): no mask, so the kernel reads none.
    if (max_key <= min_pos && (sliding_window <= 0 || min_key > max_pos - sliding_window)) {
      g.mask.clear();
      continue;
    }
    g.mask.assign(g.tokens.size() * n, -INFINITY);
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      const Pos p = ub.pos[static_cast<size_t>(g.tokens[i])];
      g.keys_visible[i] = 0;
      // Keys are sorted by position (each part when split): the visible ones are a prefix of each.
      for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, g.n_tail}, std::pair<size_t, size_t>{g.n_tail, n}}) {
        const auto first = key_pos.begin() + static_cast<std::ptrdiff_t>(begin);
        const auto last = key_pos.begin() + static_cast<std::ptrdiff_t>(end);
        // Visible: positions in (p - window, p], a range of the sorted part (a prefix without a window).
        const auto from = sliding_window > 0 ? std::lower_bound(first, last, p - sliding_window + 1) : first;
        const auto to = std::upper_bound(from, last, p);
        const auto row = g.mask.begin() + static_cast<std::ptrdiff_t>(i * n);
        std::fill(row + (from - key_pos.begin()), row + (to - key_pos.begin()), 0.0f);
        g.keys_visible[i] += static_cast<int64_t>(to - from);
      }
    }
  }
}

std::vector<int64_t> keys_seen(const std::vector<AttentionGroup>& groups, size_t n_tokens) {
  std::vector<int64_t> seen(n_tokens, 0);
  for (const AttentionGroup& g : groups)
    for (size_t i = 0; i < g.tokens.size(); ++i) seen[static_cast<size_t>(g.tokens[i])] = g.keys_visible[i];
  return seen;
}

void layer_key_rows(const KvCache& kv, const AttentionGroup& g, int layer, std::vector<const uint8_t*>& k,
                    std::vector<const uint8_t*>& v) {
  const size_t n = g.rows.size();
  k.resize(n);
  v.resize(n);
  if (n == 0) return;
  kv.rows().row_pointers(layer, g.stream, g.rows.data(), n, k.data(), v.data());
}

}  // namespace agentkv::memory
