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
  std::vector<Pos> key_pos;
  for (AttentionGroup& g : groups) {
    Pos max_pos = -1;
    for (int t : g.tokens) max_pos = std::max(max_pos, ub.pos[static_cast<size_t>(t)]);
    keys_by_position(kv.cells(g.stream), g.seq, max_pos, g.rows, key_pos);
    const size_t n = g.rows.size();
    g.mask.assign(g.tokens.size() * n, -INFINITY);
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      const Pos p = ub.pos[static_cast<size_t>(g.tokens[i])];
      // Keys are sorted by position: the visible ones are a prefix.
      const size_t n_visible = static_cast<size_t>(std::upper_bound(key_pos.begin(), key_pos.end(), p) - key_pos.begin());
      std::fill(g.mask.begin() + static_cast<std::ptrdiff_t>(i * n),
                g.mask.begin() + static_cast<std::ptrdiff_t>(i * n + n_visible), 0.0f);
    }
  }
  return groups;
}

}  // namespace agentkv::memory
