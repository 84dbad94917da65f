#include "memory/attention_view.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"

namespace agentkv::memory {
namespace {

// The cells of `seq` in `cells` at positions <= max_pos, by (position, cell).
void keys_by_position(const KvCells& cells, SeqId seq, Pos max_pos, std::vector<int32_t>& rows,
                      std::vector<Pos>& pos) {
  const Pos* cell_pos = cells.pos_data();
  const SeqSet* cell_seq = cells.seq_data();
  const uint32_t end = cells.used_max_p1();
  rows.clear();
  pos.clear();
  bool ordered = true;  // cells written in position order (the common case) need no sort
  for (uint32_t c = 0; c < end; ++c) {
    if (cell_pos[c] < 0 || cell_pos[c] > max_pos || !cell_seq[c].test(static_cast<size_t>(seq))) continue;
    if (!pos.empty() && cell_pos[c] < pos.back()) ordered = false;
    rows.push_back(static_cast<int32_t>(c));
    pos.push_back(cell_pos[c]);
  }
  if (ordered) return;
  std::vector<std::pair<Pos, int32_t>> keyed(rows.size());
  for (size_t j = 0; j < rows.size(); ++j) keyed[j] = {pos[j], rows[j]};
  std::sort(keyed.begin(), keyed.end());
  for (size_t j = 0; j < rows.size(); ++j) pos[j] = keyed[j].first, rows[j] = keyed[j].second;
}

}  // namespace

std::vector<AttentionGroup> attention_groups(const KvCache& kv, const UBatch& ub) {
  std::vector<AttentionGroup> groups;
  for (size_t t = 0; t < ub.size(); ++t) {
    if (ub.seq[t].empty()) throw Error("attention view: token " + std::to_string(t) + " has no sequence");
    const SeqId s = ub.seq[t][0];
    if (s < 0 || static_cast<uint32_t>(s) >= kv.layout().n_seq_max)
      throw Error("attention view: token " + std::to_string(t) + " has sequence id " + std::to_string(s) +
                  " outside [0, " + std::to_string(kv.layout().n_seq_max) + ")");
    const uint32_t stream = kv.stream_of(s);
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const AttentionGroup& x) { return x.seq == s && x.stream == stream; });
    if (g == groups.end()) {
      groups.emplace_back();
      g = groups.end() - 1;
      g->stream = stream;
      g->seq = s;
    }
    g->tokens.push_back(static_cast<int>(t));
  }
  const KvLayout& layout = kv.layout();
  const bool split_tail = kv.windowed() &&
                          (layout.tail_type_k != layout.type_k || layout.tail_type_v != layout.type_v);
  std::vector<Pos> key_pos;
  for (AttentionGroup& g : groups) {
    Pos max_pos = -1;
    for (int t : g.tokens) max_pos = std::max(max_pos, ub.pos[static_cast<size_t>(t)]);
    keys_by_position(kv.cells(g.stream), g.seq, max_pos, g.rows, key_pos);
    if (split_tail) {  // tail keys first, each part still by position
      std::vector<size_t> order(g.rows.size());
      for (size_t j = 0; j < order.size(); ++j) order[j] = j;
      const auto hot_from = std::stable_partition(order.begin(), order.end(), [&](size_t j) {
        return !kv.is_hot(g.stream, static_cast<uint32_t>(g.rows[j]));
      });
      g.n_tail = static_cast<size_t>(hot_from - order.begin());
      std::vector<int32_t> rows(order.size());
      std::vector<Pos> pos(order.size());
      for (size_t j = 0; j < order.size(); ++j) rows[j] = g.rows[order[j]], pos[j] = key_pos[order[j]];
      g.rows = std::move(rows);
      key_pos = std::move(pos);
    }
    const size_t n = g.rows.size();
    g.mask.assign(g.tokens.size() * n, -INFINITY);
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      const Pos p = ub.pos[static_cast<size_t>(g.tokens[i])];
      // Keys are sorted by position (each part when split): the visible ones are a prefix of each.
      for (const auto [begin, end] : {std::pair<size_t, size_t>{0, g.n_tail}, std::pair<size_t, size_t>{g.n_tail, n}}) {
        const auto first = key_pos.begin() + static_cast<std::ptrdiff_t>(begin);
        const size_t n_visible = static_cast<size_t>(
            std::upper_bound(first, key_pos.begin() + static_cast<std::ptrdiff_t>(end), p) - first);
        std::fill(g.mask.begin() + static_cast<std::ptrdiff_t>(i * n + begin),
                  g.mask.begin() + static_cast<std::ptrdiff_t>(i * n + begin + n_visible), 0.0f);
      }
    }
  }
  return groups;
}

std::vector<int64_t> keys_seen(const KvCache& kv, const UBatch& ub) {
  // A cell at position q is seen by every token of its sequence whose position is >= q, i.e. a
  // suffix of that sequence's tokens sorted by position; a difference array over that order
  // gives every token's count.
  std::vector<int64_t> seen(ub.size(), 0);
  std::vector<bool> done(ub.size(), false);
  for (size_t first = 0; first < ub.size(); ++first) {
    if (done[first]) continue;
    const SeqId s = ub.seq[first][0];
    std::vector<std::pair<Pos, size_t>> order;  // (position, token) of this sequence
    for (size_t t = first; t < ub.size(); ++t)
      if (!done[t] && ub.seq[t][0] == s) order.emplace_back(ub.pos[t], t), done[t] = true;
    std::sort(order.begin(), order.end());
    std::vector<int64_t> diff(order.size() + 1, 0);
    const KvCells& c = kv.cells(kv.stream_of(s));
    for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
      if (!c.has_seq(i, s)) continue;
      const auto k = std::lower_bound(order.begin(), order.end(), std::make_pair(c.pos(i), size_t{0})) - order.begin();
      ++diff[static_cast<size_t>(k)];
    }
    int64_t running = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      running += diff[k];
      seen[order[k].second] = running;
    }
  }
  return seen;
}

void layer_key_rows(const KvCache& kv, const AttentionGroup& g, int layer, std::vector<const uint8_t*>& k,
                    std::vector<const uint8_t*>& v) {
  const size_t n = g.rows.size();
  k.resize(n);
  v.resize(n);
  if (n == 0) return;
  kv.row_pointers(layer, g.stream, g.rows.data(), n, k.data(), v.data());
}

}  // namespace agentkv::memory
