// The KV cell table and the cache's sequence operations, checked against a deliberately naive
// reference model (a map from cell to {pos, set of seqs}) over thousands of random operation
// sequences. After every operation every observable is compared: each cell's position, sequence
// set and pending shift, used counts, seq_pos_min/max of every sequence, n_kv, the attention
// mask of random tokens, and the K/V rows (tagged per placed token) that must follow the cells.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "memory/kv_cache.h"
#include "memory/kv_cells.h"

namespace agentkv::memory {
namespace {

// ---------------------------------------------------------------------------------------------
// KvCells on its own
// ---------------------------------------------------------------------------------------------

SeqSet seqs_of(std::initializer_list<int> ids) {
  SeqSet s;
  for (int id : ids) s.set(static_cast<size_t>(id));
  return s;
}

TEST(KvCells, AssignReleaseTracksUsedAndHighestCell) {
  KvCells c(8, 4);
  EXPECT_EQ(c.used(), 0u);
  EXPECT_EQ(c.used_max_p1(), 0u);
  c.assign(2, 10, seqs_of({0}));
  c.assign(5, 11, seqs_of({0, 1}));
  EXPECT_EQ(c.used(), 2u);
  EXPECT_EQ(c.used_max_p1(), 6u);
  EXPECT_EQ(c.seq_pos_min(0), 10);
  EXPECT_EQ(c.seq_pos_max(0), 11);
  EXPECT_EQ(c.seq_pos_min(1), 11);
  EXPECT_EQ(c.seq_pos_max(2), -1);
  c.release(5);
  EXPECT_EQ(c.used_max_p1(), 3u);
  EXPECT_EQ(c.seq_pos_max(0), 10);
  EXPECT_EQ(c.seq_pos_min(1), -1);
  EXPECT_TRUE(c.is_empty(5));
  EXPECT_TRUE(c.seqs(5).none());
}

TEST(KvCells, PositionsAreAMultiset) {
  // After a division two cells of one sequence share a position; removing one must not make
  // the position disappear from the sequence.
  KvCells c(4, 2);
  c.assign(0, 4, seqs_of({0}));
  c.assign(1, 5, seqs_of({0}));
  c.move(0, 4 / 2);
  c.move(1, 5 / 2);
  EXPECT_EQ(c.pos(0), 2);
  EXPECT_EQ(c.pos(1), 2);
  EXPECT_EQ(c.shift(0), -2);  // new - old
  EXPECT_EQ(c.shift(1), -3);
  EXPECT_TRUE(c.remove_seq(1, 0));
  EXPECT_EQ(c.seq_pos_min(0), 2);
  EXPECT_EQ(c.seq_pos_max(0), 2);
  EXPECT_TRUE(c.remove_seq(0, 0));
  EXPECT_EQ(c.seq_pos_max(0), -1);
}

TEST(KvCells, MoveBelowZeroEmptiesTheCell) {
  KvCells c(4, 2);
  c.assign(3, 2, seqs_of({0, 1}));
  EXPECT_FALSE(c.move(3, 0));
  EXPECT_EQ(c.pos(3), 0);
  EXPECT_EQ(c.shift(3), -2);
  EXPECT_TRUE(c.move(3, -1));
  EXPECT_TRUE(c.is_empty(3));
  EXPECT_EQ(c.shift(3), 0);
  EXPECT_EQ(c.used(), 0u);
  EXPECT_EQ(c.used_max_p1(), 0u);
  EXPECT_EQ(c.seq_pos_max(1), -1);
}

TEST(KvCells, AssignRestoresACellExactly) {
  KvCells c(4, 3);
  c.assign(1, 7, seqs_of({0}));
  c.assign(1, 9, seqs_of({1, 2}), 3);
  EXPECT_EQ(c.pos(1), 9);
  EXPECT_EQ(c.shift(1), 3);
  EXPECT_TRUE(c.has_shift());
  EXPECT_EQ(c.seq_pos_max(0), -1);
  EXPECT_EQ(c.seq_pos_max(2), 9);
  c.assign(1, -1, {}, 0);
  EXPECT_TRUE(c.is_empty(1));
  EXPECT_EQ(c.used(), 0u);
}

TEST(KvCells, NotesWhichCellTookAPosition) {
  KvCells c(8, 3);
  c.assign(4, 10, seqs_of({0}));
  EXPECT_EQ(c.cell_at(0, 10), 4u);
  EXPECT_EQ(c.cell_at(1, 10), KvCells::kNoCell);
  c.add_seq(4, 1);
  EXPECT_EQ(c.cell_at(1, 10), 4u);
  c.move(4, 12);  // moved: noted at its new position, the old note no longer holds
  EXPECT_EQ(c.cell_at(0, 10), KvCells::kNoCell);
  EXPECT_EQ(c.cell_at(0, 12), 4u);
  c.assign(6, 10, seqs_of({0}));
  c.move(6, 10 / 5);  // to position 2: one cell of seq 0 at each position still
  EXPECT_EQ(c.seq_positions(0).max_count(0, 100), 1u);
  c.release(4);
  EXPECT_EQ(c.cell_at(0, 12), KvCells::kNoCell);
  c.release(6);
  EXPECT_EQ(c.seq_positions(0).max_count(0, 100), 0u);
}

TEST(KvCells, APositionHeldByACellNotNotedAsksForAScan) {
  KvCells c(8, 1);
  c.assign(2, 10, seqs_of({0}));
  c.assign(5, 11, seqs_of({0}));
  c.move(5, 10);  // two cells at 10: the note names the last one to take it
  EXPECT_EQ(c.seq_positions(0).max_count(10, 11), 2u);
  EXPECT_EQ(c.cell_at(0, 10), 5u);
  c.release(5);  // cell 2 still holds 10, but the note named cell 5
  EXPECT_EQ(c.cell_at(0, 10), KvCells::kUnnoted);
  c.release(2);
  EXPECT_EQ(c.cell_at(0, 10), KvCells::kNoCell);
}

TEST(KvCells, AssignChangesTheSequencesOfAUsedCell) {
  // What seq_keep does to a shared cell: it stays where it is, with one sequence left.
  KvCells c(3, 3);
  c.assign(0, 0, seqs_of({0, 1}));
  c.assign(1, 1, seqs_of({2}));
  c.assign(0, 0, seqs_of({1}));
  EXPECT_EQ(c.seqs(0), seqs_of({1}));
  EXPECT_EQ(c.used(), 2u);
  EXPECT_EQ(c.first_free(), 2u);
  EXPECT_EQ(c.seq_pos_max(0), -1);
  EXPECT_EQ(c.seq_pos_max(1), 0);
  EXPECT_EQ(c.cell_at(1, 0), 0u);
  EXPECT_EQ(c.seq_pos_max(2), 1);
}

TEST(KvCells, ResetAfterZeroingMarksEveryCellKnownZero) {
  KvCells c(4, 1);
  EXPECT_TRUE(c.known_zero(1));  // the storage starts zeroed
  c.assign(1, 0, seqs_of({0}));
  EXPECT_FALSE(c.known_zero(1));  // its rows are about to be written
  c.reset();
  EXPECT_FALSE(c.known_zero(1));  // emptied, bytes untouched
  const uint32_t cells[] = {1, 2};
  c.occupy_run(cells, 2, 0, seqs_of({0}), /*rows_zero=*/true);
  EXPECT_TRUE(c.known_zero(1));  // the caller zeroed them
  c.reset(/*rows_zeroed=*/true);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(c.known_zero(i));
}

// ---------------------------------------------------------------------------------------------
// Reference model: no indexes, no heads, every query a linear scan.
// ---------------------------------------------------------------------------------------------

constexpr Pos kInf = std::numeric_limits<Pos>::max();

struct RefCell {
  Pos pos = 0;
  std::set<SeqId> seqs;
  Pos shift = 0;
  uint32_t tag = 0;  // written into the K/V rows when the token was placed
};

struct RefCache {
  uint32_t n_cells = 0, n_seq = 0;
  bool unified = true;
  std::vector<std::map<uint32_t, RefCell>> streams;  // only non-empty cells

  RefCache(uint32_t cells, uint32_t seqs, bool uni)
      : n_cells(cells), n_seq(seqs), unified(uni), streams(uni ? 1 : seqs) {}

  uint32_t stream_of(SeqId s) const { return unified ? 0 : static_cast<uint32_t>(s); }
  static Pos lo(Pos p0) { return p0 < 0 ? 0 : p0; }
  static Pos hi(Pos p1) { return p1 < 0 ? kInf : p1; }

  void clear() {
    for (auto& st : streams) st.clear();
  }
  void seq_rm(SeqId seq, Pos p0, Pos p1) {
    for (uint32_t s = 0; s < streams.size(); ++s) {
      if (seq >= 0 && s != stream_of(seq)) continue;
      for (auto it = streams[s].begin(); it != streams[s].end();) {
        RefCell& c = it->second;
        if (c.pos >= lo(p0) && c.pos < hi(p1)) {
          if (seq < 0) c.seqs.clear();
          else c.seqs.erase(seq);
        }
        it = c.seqs.empty() ? streams[s].erase(it) : std::next(it);
      }
    }
  }
  std::pair<Pos, Pos> seq_range(SeqId seq) const {
    Pos mn = -1, mx = -1;
    for (const auto& [i, c] : streams[stream_of(seq)])
      if (c.seqs.count(seq)) {
        if (mn < 0 || c.pos < mn) mn = c.pos;
        if (c.pos > mx) mx = c.pos;
      }
    return {mn, mx};
  }
  // Returns false when the cache must refuse the copy.
  bool seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
    if (src == dst) return true;
    if (stream_of(src) == stream_of(dst)) {
      for (auto& [i, c] : streams[stream_of(src)])
        if (c.pos >= lo(p0) && c.pos < hi(p1) && c.seqs.count(src)) c.seqs.insert(dst);
      return true;
    }
    auto [mn, mx] = seq_range(src);
    if (mn >= 0 && !(lo(p0) <= mn && hi(p1) > mx)) return false;
    auto& to = streams[stream_of(dst)];
    to.clear();
    for (const auto& [i, c] : streams[stream_of(src)])
      if (c.seqs.count(src)) to[i] = RefCell{c.pos, {dst}, c.shift, c.tag};
    return true;
  }
  void seq_keep(SeqId seq) {
    for (auto& st : streams)
      for (auto it = st.begin(); it != st.end();) {
        if (it->second.seqs.count(seq)) {
          it->second.seqs = {seq};
          ++it;
        } else {
          it = st.erase(it);
        }
      }
  }
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
    if (delta == 0) return;
    auto& st = streams[stream_of(seq)];
    for (auto it = st.begin(); it != st.end();) {
      RefCell& c = it->second;
      if (c.pos >= lo(p0) && c.pos < hi(p1) && c.seqs.count(seq)) {
        c.pos += delta;
        c.shift += delta;
        if (c.pos < 0) {
          it = st.erase(it);
          continue;
        }
      }
      ++it;
    }
  }
  void seq_div(SeqId seq, Pos p0, Pos p1, int d) {
    if (d == 1) return;
    for (auto& [i, c] : streams[stream_of(seq)])
      if (c.pos >= lo(p0) && c.pos < hi(p1) && c.seqs.count(seq)) {
        const Pos old = c.pos;
        c.pos /= d;
        c.shift += c.pos - old;
      }
  }
  void reset_shift() {
    for (auto& st : streams)
      for (auto& [i, c] : st) c.shift = 0;
  }
  bool visible(uint32_t stream, uint32_t cell, SeqId s, Pos p) const {
    auto it = streams[stream].find(cell);
    return it != streams[stream].end() && it->second.seqs.count(s) && it->second.pos <= p;
  }
};

// ---------------------------------------------------------------------------------------------
// The property test
// ---------------------------------------------------------------------------------------------

// How often the interesting branches ran, so the test proves it exercised them.
struct Coverage {
  int placed = 0, refused_placements = 0, placed_shared = 0, cross_stream_copies = 0,
      refused_copies = 0, removed_by_shift = 0, masks_with_visible_cells = 0;
};

struct Harness {
  Coverage* cov = nullptr;
  std::mt19937 rng;
  KvLayout layout;
  std::unique_ptr<KvCache> kv;
  RefCache ref;
  uint32_t next_tag = 1;
  std::string trace;  // ops so far, printed on failure

  static constexpr int kLayers = 3;  // layer 1 has no KV (like a recurrent layer)

  static KvLayout make_layout(std::mt19937& rng) {
    KvLayout l;
    l.layer_has_kv = {true, false, true};
    l.n_embd_k = 4;
    l.n_embd_v = 2;
    l.type_k = GgmlType::F32;
    l.type_v = GgmlType::F32;
    l.n_cells = std::uniform_int_distribution<uint32_t>(1, 80)(rng);
    l.n_seq_max = std::uniform_int_distribution<uint32_t>(1, 5)(rng);
    l.unified = rng() % 2 == 0;
    return l;
  }

  explicit Harness(uint32_t seed)
      : rng(seed), layout(make_layout(rng)), kv(std::make_unique<KvCache>(layout)),
        ref(layout.n_cells, layout.n_seq_max, layout.unified) {}

  int rand_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  SeqId rand_seq() { return rand_int(0, static_cast<int>(layout.n_seq_max) - 1); }
  Pos rand_pos_bound() { return rand_int(-1, 45); }

  uint32_t tag_at(int layer, bool k, uint32_t stream, uint32_t cell) const {
    const KvRows& rows = kv->rows();
    const uint8_t* base = k ? rows.k_data(layer, stream) : rows.v_data(layer, stream);
    const size_t row = k ? rows.row_bytes_k() : rows.row_bytes_v();
    uint32_t tag;
    std::memcpy(&tag, base + cell * row, sizeof tag);
    return tag;
  }
  void write_tag(uint32_t stream, uint32_t cell, uint32_t tag) {
    KvRows& rows = kv->rows();
    for (int layer : {0, 2}) {
      // Different bytes per layer and per K/V so a mixed-up row is caught.
      const uint32_t tk = tag * 4 + static_cast<uint32_t>(layer), tv = tk + 1;
      std::memcpy(rows.k_data(layer, stream) + cell * rows.row_bytes_k(), &tk, sizeof tk);
      std::memcpy(rows.v_data(layer, stream) + cell * rows.row_bytes_v(), &tv, sizeof tv);
    }
  }

  void check_all() {
    SCOPED_TRACE(trace);
    ASSERT_EQ(layout.n_streams(), ref.streams.size());
    bool any_shift = false;
    for (uint32_t s = 0; s < layout.n_streams(); ++s) {
      const KvCells& c = kv->cells(s);
      const auto& rs = ref.streams[s];
      uint32_t max_p1 = 0;
      for (uint32_t i = 0; i < layout.n_cells; ++i) {
        auto it = rs.find(i);
        if (it == rs.end()) {
          ASSERT_EQ(c.pos(i), -1) << "stream " << s << " cell " << i;
          ASSERT_TRUE(c.seqs(i).none()) << "stream " << s << " cell " << i;
          ASSERT_EQ(c.shift(i), 0) << "stream " << s << " cell " << i;
          continue;
        }
        const RefCell& r = it->second;
        max_p1 = i + 1;
        ASSERT_EQ(c.pos(i), r.pos) << "stream " << s << " cell " << i;
        ASSERT_EQ(c.shift(i), r.shift) << "stream " << s << " cell " << i;
        SeqSet want;
        for (SeqId q : r.seqs) want.set(static_cast<size_t>(q));
        ASSERT_EQ(c.seqs(i), want) << "stream " << s << " cell " << i;
        if (r.shift != 0) any_shift = true;
        // The table finds (sequence, position) through its note or says to scan, never "none"; a
        // cell it names holds them, and is this one where the sequence has one cell there.
        for (SeqId q : r.seqs) {
          const uint32_t at = c.cell_at(q, r.pos);
          ASSERT_NE(at, KvCells::kNoCell) << "stream " << s << " seq " << q << " pos " << r.pos;
          ASSERT_TRUE(at == KvCells::kUnnoted || (c.pos(at) == r.pos && c.has_seq(at, q)))
              << "stream " << s << " seq " << q << " pos " << r.pos;
          if (c.seq_positions(q).max_count(r.pos, r.pos + 1) == 1 && at != KvCells::kUnnoted) {
            ASSERT_EQ(at, i) << "seq " << q << " pos " << r.pos;
          }
        }
        for (int layer : {0, 2}) {
          ASSERT_EQ(tag_at(layer, true, s, i), r.tag * 4 + layer) << "K row, cell " << i;
          ASSERT_EQ(tag_at(layer, false, s, i), r.tag * 4 + layer + 1) << "V row, cell " << i;
        }
      }
      ASSERT_EQ(c.used(), rs.size());
      uint32_t lowest_free = 0;
      while (rs.count(lowest_free)) ++lowest_free;
      ASSERT_EQ(c.first_free(), lowest_free);
      ASSERT_EQ(c.used_max_p1(), max_p1);
      // n_kv: exact formula, and the bound it promises.
      const uint32_t padded = (max_p1 + 31) / 32 * 32;
      const uint32_t want_n_kv = std::min(layout.n_cells, std::max(32u, padded));
      ASSERT_EQ(kv->n_kv(s), want_n_kv);
      ASSERT_GE(kv->n_kv(s), max_p1);
    }
    if (any_shift) {
      ASSERT_TRUE(kv->has_shift());
    }
    for (SeqId q = 0; q < static_cast<SeqId>(layout.n_seq_max); ++q) {
      auto [mn, mx] = ref.seq_range(q);
      ASSERT_EQ(kv->seq_pos_min(q), mn) << "seq " << q;
      ASSERT_EQ(kv->seq_pos_max(q), mx) << "seq " << q;
    }
    check_masks();
  }

  void check_masks() {
    UBatch ub;
    const int n = rand_int(1, 4);
    for (int t = 0; t < n; ++t) ub.add(rand_int(0, 50), {rand_seq()});
    for (uint32_t s = 0; s < layout.n_streams(); ++s) {
      std::vector<int> rows;
      for (int t = 0; t < n; ++t)
        if (layout.stream_of(ub.seq[t][0]) == s) rows.push_back(t);
      if (rows.empty()) continue;
      const uint32_t n_kv = kv->n_kv(s);
      const int64_t stride = n_kv + 3;  // a stride wider than the row must be honoured
      std::vector<float> mask(rows.size() * stride, 42.0f);
      kv->fill_mask(ub, rows, s, mask.data(), stride);
      for (size_t r = 0; r < rows.size(); ++r) {
        const int t = rows[r];
        if (std::count(mask.begin() + r * stride, mask.begin() + r * stride + n_kv, 0.0f) > 0)
          ++cov->masks_with_visible_cells;
        for (uint32_t j = 0; j < n_kv; ++j) {
          const float want = ref.visible(s, j, ub.seq[t][0], ub.pos[t]) ? 0.0f : -INFINITY;
          ASSERT_EQ(mask[r * stride + j], want)
              << "token seq " << ub.seq[t][0] << " pos " << ub.pos[t] << " cell " << j;
        }
        for (int64_t j = n_kv; j < stride; ++j) ASSERT_EQ(mask[r * stride + j], 42.0f);
      }
    }
  }

  UBatch random_ubatch() {
    UBatch ub;
    const int n = rand_int(1, static_cast<int>(layout.n_cells) / 2 + 3);
    for (int t = 0; t < n; ++t) {
      std::vector<SeqId> seqs{rand_seq()};
      if (layout.unified) {
        const int extra = rand_int(0, 2);  // a token may belong to several sequences
        for (int e = 0; e < extra; ++e) seqs.push_back(rand_seq());  // duplicates on purpose
      } else if (rng() % 4 == 0) {
        seqs.push_back(seqs[0]);  // a repeated id is still one sequence
      }
      ub.add(rand_int(0, 40), seqs);
    }
    return ub;
  }

  // Free cells each stream would need for these ubatches, compared with what it has.
  bool fits(const std::vector<UBatch>& ubs) const {
    std::vector<size_t> need(ref.streams.size(), 0);
    for (const auto& ub : ubs)
      for (size_t t = 0; t < ub.size(); ++t) ++need[ref.stream_of(ub.seq[t][0])];
    for (size_t s = 0; s < need.size(); ++s)
      if (need[s] > layout.n_cells - ref.streams[s].size()) return false;
    return true;
  }

  // Tokens must take the lowest empty cells of their stream, in token order, skipping cells an
  // earlier ubatch of the same dry run took.
  void check_placement(const UBatch& ub, const Placement& pl,
                       std::set<std::pair<uint32_t, uint32_t>>& taken) {
    ASSERT_EQ(pl.size(), ub.size());
    for (size_t t = 0; t < ub.size(); ++t) {
      const uint32_t s = ref.stream_of(ub.seq[t][0]);
      uint32_t want = 0;
      while (ref.streams[s].count(want) || taken.count({s, want})) ++want;
      ASSERT_EQ(pl[t].stream, s);
      ASSERT_EQ(pl[t].cell, want) << "token " << t;
      taken.insert({s, want});
    }
  }

  void place(const UBatch& ub, const Placement& pl) {
    kv->apply(ub, pl);
    for (size_t t = 0; t < ub.size(); ++t) {
      const uint32_t tag = next_tag++;
      write_tag(pl[t].stream, pl[t].cell, tag);
      RefCell c;
      c.pos = ub.pos[t];
      c.seqs.insert(ub.seq[t].begin(), ub.seq[t].end());
      c.tag = tag;
      ref.streams[pl[t].stream][pl[t].cell] = c;
    }
  }

  void op_place() {
    UBatch ub = random_ubatch();
    trace += " place(" + std::to_string(ub.size()) + ")";
    auto pl = kv->find_slot(ub);
    ASSERT_EQ(pl.has_value(), fits({ub}));
    if (!pl) {
      ++cov->refused_placements;
      return;
    }
    ++cov->placed;
    for (const auto& seqs : ub.seq)
      if (std::set<SeqId>(seqs.begin(), seqs.end()).size() > 1) ++cov->placed_shared;
    std::set<std::pair<uint32_t, uint32_t>> taken;
    check_placement(ub, *pl, taken);
    place(ub, *pl);
  }

  void op_place_two() {
    std::vector<UBatch> ubs{random_ubatch(), random_ubatch()};
    trace += " place2(" + std::to_string(ubs[0].size()) + "," + std::to_string(ubs[1].size()) + ")";
    auto pls = kv->find_slots(ubs);
    ASSERT_EQ(pls.has_value(), fits(ubs));
    if (!pls) return;
    ASSERT_EQ(pls->size(), 2u);
    std::set<std::pair<uint32_t, uint32_t>> taken;
    check_placement(ubs[0], (*pls)[0], taken);
    check_placement(ubs[1], (*pls)[1], taken);
    // The dry run must predict what placing them one by one yields.
    place(ubs[0], (*pls)[0]);
    auto second = kv->find_slot(ubs[1]);
    ASSERT_TRUE(second.has_value());
    ASSERT_EQ(second->size(), (*pls)[1].size());
    for (size_t t = 0; t < second->size(); ++t) {
      ASSERT_EQ((*second)[t].stream, (*pls)[1][t].stream);
      ASSERT_EQ((*second)[t].cell, (*pls)[1][t].cell);
    }
    place(ubs[1], *second);
  }

  void step() {
    const int kind = rand_int(0, 99);
    if (kind < 35) {
      op_place();
    } else if (kind < 40) {
      op_place_two();
    } else if (kind < 52) {
      const SeqId s = rand_int(-1, static_cast<int>(layout.n_seq_max) - 1);
      const Pos p0 = rand_pos_bound(), p1 = rand_pos_bound();
      trace += " rm(" + std::to_string(s) + "," + std::to_string(p0) + "," + std::to_string(p1) + ")";
      ASSERT_TRUE(kv->seq_rm(s, p0, p1));
      ref.seq_rm(s, p0, p1);
    } else if (kind < 64) {
      const SeqId a = rand_seq(), b = rand_seq();
      const bool whole = rng() % 2 == 0;
      const Pos p0 = whole ? -1 : rand_pos_bound(), p1 = whole ? -1 : rand_pos_bound();
      trace += " cp(" + std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(p0) +
               "," + std::to_string(p1) + ")";
      RefCache before = ref;
      if (ref.seq_cp(a, b, p0, p1)) {
        kv->seq_cp(a, b, p0, p1);
        if (ref.stream_of(a) != ref.stream_of(b)) ++cov->cross_stream_copies;
      } else {
        ++cov->refused_copies;
        ref = before;
        EXPECT_THROW(kv->seq_cp(a, b, p0, p1), Error);
      }
    } else if (kind < 68) {
      const SeqId s = rand_seq();
      trace += " keep(" + std::to_string(s) + ")";
      kv->seq_keep(s);
      ref.seq_keep(s);
    } else if (kind < 82) {
      const SeqId s = rand_seq();
      const Pos p0 = rand_pos_bound(), p1 = rand_pos_bound(), d = rand_int(-20, 20);
      trace += " add(" + std::to_string(s) + "," + std::to_string(p0) + "," + std::to_string(p1) +
               "," + std::to_string(d) + ")";
      const uint32_t used_before = kv->cells(layout.stream_of(s)).used();
      kv->seq_add(s, p0, p1, d);
      ref.seq_add(s, p0, p1, d);
      if (kv->cells(layout.stream_of(s)).used() < used_before) ++cov->removed_by_shift;
    } else if (kind < 92) {
      const SeqId s = rand_seq();
      const Pos p0 = rand_pos_bound(), p1 = rand_pos_bound();
      const int d = rand_int(1, 4);
      trace += " div(" + std::to_string(s) + "," + std::to_string(p0) + "," + std::to_string(p1) +
               "," + std::to_string(d) + ")";
      kv->seq_div(s, p0, p1, d);
      ref.seq_div(s, p0, p1, d);
    } else if (kind < 97) {
      trace += " reset_shift";
      kv->reset_shift();
      ref.reset_shift();
      ASSERT_FALSE(kv->has_shift());
    } else {
      trace += " clear";
      kv->clear();
      ref.clear();
    }
  }
};

TEST(KvCellsProperty, RandomOperationSequencesMatchTheReferenceModel) {
  constexpr uint32_t kSequences = 3000;
  constexpr int kOpsPerSequence = 40;
  Coverage cov;
  for (uint32_t seed = 1; seed <= kSequences; ++seed) {
    Harness h(seed);
    h.cov = &cov;
    SCOPED_TRACE("seed " + std::to_string(seed) + " cells " + std::to_string(h.layout.n_cells) +
                 " seqs " + std::to_string(h.layout.n_seq_max) +
                 (h.layout.unified ? " unified" : " per-seq streams"));
    h.check_all();
    for (int op = 0; op < kOpsPerSequence; ++op) {
      h.step();
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) return;
      h.check_all();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(cov.placed, 10000);
  EXPECT_GT(cov.refused_placements, 1000);
  EXPECT_GT(cov.placed_shared, 1000);
  EXPECT_GT(cov.cross_stream_copies, 1000);
  EXPECT_GT(cov.refused_copies, 500);
  EXPECT_GT(cov.removed_by_shift, 500);
  EXPECT_GT(cov.masks_with_visible_cells, 10000);
  std::printf("placed %d, refused %d, tokens in several sequences %d, cross-stream copies %d, "
              "refused copies %d, shifts that removed cells %d, masks with visible cells %d\n",
              cov.placed, cov.refused_placements, cov.placed_shared, cov.cross_stream_copies,
              cov.refused_copies, cov.removed_by_shift, cov.masks_with_visible_cells);
}

}  // namespace
}  // namespace agentkv::memory
