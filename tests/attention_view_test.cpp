// The memory's attention view (memory/attention_view.h) against a brute-force reading of the cells:
// random placements, removals and copies over several sequences, then a micro-batch of decode
// steps or prompt chunks. Shifts and divisions make positions held by several cells, or by cells
// the table did not note, where the view falls back from its noted-cell walk to a scan. Every group's keys are its sequence's cells at positions <= the group's
// last one, by (position, cell); each token sees exactly the keys at positions <= its own (mask,
// or no mask when it sees them all); keys_seen counts them; a reused output gives what a fresh
// one gives. A sliding-window view (Gemma 3's local layers) leaves out the keys no token's window
// reaches in whole attention key tiles from the front, and each token sees exactly the keys at
// positions in (its own - window, its own].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "memory/attention_view.h"
#include "memory/kv_cache.h"

namespace agentkv::memory {
namespace {

constexpr uint32_t kCells = 128, kSeqs = 4;

KvLayout small_layout() {
  KvLayout l;
  l.layer_has_kv = {true};
  l.n_embd_k = l.n_embd_v = 32;
  l.n_cells = kCells;
  l.n_seq_max = kSeqs;
  return l;
}

// The sequence's keys at positions in [min_pos, max_pos], by (position, cell), read cell by cell.
std::vector<std::pair<Pos, int32_t>> expected_keys(const KvCache& kv, SeqId s, Pos min_pos, Pos max_pos) {
  std::vector<std::pair<Pos, int32_t>> out;
  const KvCells& c = kv.cells(0);
  for (uint32_t i = 0; i < kCells; ++i)
    if (!c.is_empty(i) && c.has_seq(i, s) && c.pos(i) >= min_pos && c.pos(i) <= max_pos)
      out.emplace_back(c.pos(i), static_cast<int32_t>(i));
  std::sort(out.begin(), out.end());
  return out;
}

void check(const KvCache& kv, const UBatch& ub, const std::vector<AttentionGroup>& groups, const std::string& where,
           Pos window = 0) {
  std::vector<bool> covered(ub.size(), false);
  const std::vector<int64_t> seen = keys_seen(groups, ub.size());
  for (const AttentionGroup& g : groups) {
    Pos max_pos = -1, min_pos = std::numeric_limits<Pos>::max();
    for (int t : g.tokens) {
      max_pos = std::max(max_pos, ub.pos[static_cast<size_t>(t)]);
      min_pos = std::min(min_pos, ub.pos[static_cast<size_t>(t)]);
    }
    // With a window: the keys before every token's window leave the front of the list in whole
    // attention key tiles (the others keep their tiles whatever the batch and whatever the cache
    // dropped before them).
    auto keys = expected_keys(kv, g.seq, std::numeric_limits<Pos>::min(), max_pos);
    if (window > 0) {
      const auto before = std::count_if(keys.begin(), keys.end(), [&](const auto& k) { return k.first < min_pos - window + 1; });
      keys.erase(keys.begin(), keys.begin() + before / kAttentionKeyTile * kAttentionKeyTile);
      // Keys without a gap then start at the tile boundary at or before the window's start, as a
      // cache holding every key from 0 has them: masked copies of the first stand for missing ones.
      const Pos first = min_pos - window + 1;
      const Pos boundary = first / static_cast<Pos>(kAttentionKeyTile) * static_cast<Pos>(kAttentionKeyTile);
      if (!keys.empty() && first > 0 && keys.front().first <= first && keys.back().first >= first &&
          keys.back().first - keys.front().first + 1 == static_cast<Pos>(keys.size())) {
        while (!keys.empty() && keys.front().first < boundary) keys.erase(keys.begin());
        for (Pos p = keys.front().first - 1; p >= boundary; --p) keys.insert(keys.begin(), {p, keys.front().second});
      }
    }
    ASSERT_EQ(g.rows.size(), keys.size()) << where;
    for (size_t j = 0; j < keys.size(); ++j) ASSERT_EQ(g.rows[j], keys[j].second) << where << " key " << j;
    ASSERT_EQ(g.keys_visible.size(), g.tokens.size()) << where;
    bool all_see_all = true;
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      const auto t = static_cast<size_t>(g.tokens[i]);
      ASSERT_FALSE(covered[t]) << where;
      covered[t] = true;
      ASSERT_EQ(ub.seq[t][0], g.seq) << where;
      int64_t visible = 0;
      for (size_t j = 0; j < keys.size(); ++j) {
        const bool sees = keys[j].first <= ub.pos[t] && (window <= 0 || keys[j].first > ub.pos[t] - window);
        visible += sees;
        all_see_all = all_see_all && sees;
        if (!g.mask.empty()) {
          ASSERT_EQ(g.mask[i * keys.size() + j], sees ? 0.0f : -INFINITY) << where;
        }
      }
      ASSERT_EQ(g.keys_visible[i], visible) << where;
      ASSERT_EQ(seen[t], visible) << where;
    }
    // No mask exactly when it would hide nothing.
    ASSERT_EQ(g.mask.empty(), all_see_all) << where;
    if (!g.mask.empty()) {
      ASSERT_EQ(g.mask.size(), g.tokens.size() * keys.size()) << where;
    }
  }
  for (size_t t = 0; t < ub.size(); ++t) ASSERT_TRUE(covered[t]) << where << " token " << t;
}

// A long sequence under a short window: the keys before the window leave the list in whole tiles,
// so a token's keys share the same tiles in a decode step and in a prompt chunk that starts
// elsewhere (what keeps a window layer batch-invariant).
TEST(AttentionView, KeysBeforeTheWindowLeaveInWholeTiles) {
  KvCache kv(small_layout());
  UBatch prompt;
  for (Pos p = 0; p < 120; ++p) prompt.add(p, {0});
  const auto placement = kv.find_slot(prompt);
  ASSERT_TRUE(placement);
  kv.apply(prompt, *placement);
  UBatch step;
  step.add(110, {0});  // as if evaluated again: sees (102, 110]
  const std::vector<AttentionGroup> one = attention_groups(kv, step, 8);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].rows.size(), 111u - 64u);  // positions 64 .. 110: 103 keys before the window, 64 left out
  check(kv, step, one, "one token", 8);
  UBatch chunk;
  for (Pos p = 60; p <= 110; ++p) chunk.add(p, {0});  // reaches back to 53: none of the 64 leaves
  const std::vector<AttentionGroup> many = attention_groups(kv, chunk, 8);
  EXPECT_EQ(many[0].rows.size(), 111u);
  check(kv, chunk, many, "chunk", 8);
}

TEST(AttentionView, RandomCacheStatesAgreeWithACellByCellReading) {
  std::mt19937 rng(7);
  std::vector<AttentionGroup> reused;  // one output for every micro-batch, as the context keeps it
  for (int seed = 0; seed < 40; ++seed) {
    KvCache kv(small_layout());
    std::vector<Pos> next(kSeqs, 0);
    for (int op = 0; op < 60; ++op) {
      const std::string where = "seed " + std::to_string(seed) + " op " + std::to_string(op);
      const int kind = static_cast<int>(rng() % 12);
      const SeqId s = static_cast<SeqId>(rng() % kSeqs);
      if (kind < 6) {
        // A micro-batch: decode steps of a few sequences, or a prompt chunk of one.
        UBatch ub;
        if (kind < 3) {
          for (SeqId q = 0; q < static_cast<SeqId>(kSeqs); ++q)
            if (rng() % 2) ub.add(next[static_cast<size_t>(q)]++, {q});
        } else {
          const int n = 1 + static_cast<int>(rng() % 12);
          for (int i = 0; i < n; ++i) ub.add(next[static_cast<size_t>(s)]++, {s});
        }
        if (ub.size() == 0) continue;
        const auto placement = kv.find_slot(ub);
        if (!placement) {
          for (size_t t = 0; t < ub.size(); ++t) --next[static_cast<size_t>(ub.seq[t][0])];
          kv.seq_rm(s, -1, -1);
          next[static_cast<size_t>(s)] = 0;
          continue;
        }
        kv.apply(ub, *placement);
        const std::vector<AttentionGroup> fresh = attention_groups(kv, ub);
        check(kv, ub, fresh, where);
        attention_groups(kv, ub, reused);
        ASSERT_EQ(reused.size(), fresh.size()) << where;
        for (size_t i = 0; i < fresh.size(); ++i) {
          ASSERT_EQ(reused[i].tokens, fresh[i].tokens) << where;
          ASSERT_EQ(reused[i].rows, fresh[i].rows) << where;
          ASSERT_EQ(reused[i].mask, fresh[i].mask) << where;
          ASSERT_EQ(reused[i].keys_visible, fresh[i].keys_visible) << where;
        }
        const Pos window = 1 + static_cast<Pos>(rng() % 8);
        check(kv, ub, attention_groups(kv, ub, window), where + " window " + std::to_string(window), window);
      } else if (kind < 8) {
        // Drop a random range of positions: holes, so cells are reused out of position order.
        const Pos p0 = next[static_cast<size_t>(s)] > 0 ? static_cast<Pos>(rng() % next[static_cast<size_t>(s)]) : 0;
        kv.seq_rm(s, p0, p0 + 1 + static_cast<Pos>(rng() % 6));
      } else if (kind == 10) {
        // Move a range of positions back (a context shift): cells of one position may now be
        // several, or no longer where the table noted them, which the view must still order.
        const Pos p0 = static_cast<Pos>(rng() % (next[static_cast<size_t>(s)] + 1));
        kv.seq_add(s, p0, -1, -static_cast<Pos>(1 + rng() % 4));
        next[static_cast<size_t>(s)] = kv.seq_pos_max(s) + 1;
      } else if (kind == 11) {
        // Compress positions (self-extend's seq_div): several cells per position.
        kv.seq_div(s, static_cast<Pos>(rng() % (next[static_cast<size_t>(s)] + 1)), -1, 2);
        next[static_cast<size_t>(s)] = kv.seq_pos_max(s) + 1;
      } else {
        // Share another sequence's history (copy), then continue it.
        const SeqId d = static_cast<SeqId>((s + 1) % kSeqs);
        kv.seq_rm(d, -1, -1);
        kv.seq_cp(s, d, -1, -1);
        next[static_cast<size_t>(d)] = next[static_cast<size_t>(s)];
      }
    }
  }
}

}  // namespace
}  // namespace agentkv::memory
