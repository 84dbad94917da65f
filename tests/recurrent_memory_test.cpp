// RecurrentMemory and the hybrid SequenceMemory against deliberately naive reference models over
// seeded random operation sequences. After every operation every observable is compared:
// positions (seq_pos_min == seq_pos_max == last absorbed), which sequences share a state cell,
// and the state contents (each simulated forward pass writes a unique tag into the states it
// updates, so copy-on-write, zeroing of new states and state sharing are all checked by value).
// The hybrid part checks the pos_min/pos_max rules and seq_rm's "recurrent decides first" rule
// with a real KvCache next to the recurrent memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "memory/kv_cache.h"
#include "memory/recurrent.h"
#include "memory/sequence_memory.h"

namespace agentkv::memory {
namespace {

constexpr int64_t kConv = 3, kSsm = 5;
const std::vector<bool> kLayers = {true, false, true, true};  // layer 1 is attention

RecurrentLayout rec_layout(uint32_t n_seq) {
  RecurrentLayout l;
  l.layer_recurrent = kLayers;
  l.n_conv = kConv;
  l.n_ssm = kSsm;
  l.n_seq_max = n_seq;
  return l;
}

// What a sequence's state is, in the reference: absent, or (last position, content tag, sharing
// group). Two sequences share a cell exactly when they have the same group.
struct RefSeq {
  bool has = false;
  Pos pos = -1;
  float tag = 0;  // 0 = zero state
  int group = -1;
};

// The documented rules (src/memory/recurrent.h/.cpp, docs/memory-semantics.md), written
// independently of the implementation.
class RefRecurrent {
 public:
  explicit RefRecurrent(int n) : seqs_(static_cast<size_t>(n)) {}
  RefSeq& operator[](SeqId s) { return seqs_[static_cast<size_t>(s)]; }
  int n() const { return static_cast<int>(seqs_.size()); }

  void release(SeqId s) { seqs_[s] = RefSeq{}; }
  // A ubatch: each listed sequence absorbs tokens up to `last`; its state becomes `tag`
  // (what the simulated forward writes) and it no longer shares its cell.
  void absorb(SeqId s, Pos last, float tag) {
    RefSeq& r = seqs_[s];
    // The last absorbed position is the largest one seen (a state only moves forward).
    r.pos = r.has ? std::max(r.pos, last) : last;
    r.has = true;
    r.tag = tag;
    r.group = next_group_++;
  }
  bool seq_rm(SeqId s, Pos p0, Pos p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT_MAX;
    if (s >= n()) return false;
    if (s < 0) {
      if (p0 >= p1) return true;
      if (p0 != 0 || p1 != INT_MAX) return false;  // partial ranges of all sequences: refused
      for (auto& r : seqs_) r = RefSeq{};
      return true;
    }
    RefSeq& r = seqs_[s];
    if (!r.has || p0 >= p1) return true;
    if (r.pos < p0 || r.pos >= p1) return true;  // range misses the last position: nothing to undo
    if (p0 > 0) return false;                     // would cut absorbed tokens out of the state
    release(s);                                   // covers [0, last]: the whole sequence
    return true;
  }
  void seq_cp(SeqId src, SeqId dst) {
    if (src == dst) return;
    release(dst);
    if (seqs_[src].has) seqs_[dst] = seqs_[src];  // same group: shared
  }
  void seq_keep(SeqId s) {
    for (int i = 0; i < n(); ++i)
      if (i != s) release(i);
  }
  // Moves the cell (so every sequence of the group) when its position is in range.
  void seq_add(SeqId s, Pos p0, Pos p1, Pos d) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT_MAX;
    const RefSeq r = seqs_[s];
    if (!r.has || d == 0 || r.pos < p0 || r.pos >= p1) return;
    for (auto& o : seqs_) {
      if (!o.has || o.group != r.group) continue;
      if (static_cast<int64_t>(o.pos) + d < 0) o = RefSeq{};
      else o.pos += d;
    }
  }
  void seq_div(SeqId s, Pos p0, Pos p1, int d) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT_MAX;
    const RefSeq r = seqs_[s];
    if (!r.has || d <= 1 || r.pos < p0 || r.pos >= p1) return;
    for (auto& o : seqs_)
      if (o.has && o.group == r.group) o.pos /= d;
  }
  int new_group() { return next_group_++; }

 private:
  std::vector<RefSeq> seqs_;
  int next_group_ = 0;
};

void write_state(RecurrentMemory& rec, uint32_t cell, float tag) {
  for (size_t il = 0; il < kLayers.size(); ++il) {
    if (!kLayers[il]) continue;
    std::fill_n(rec.conv_state(static_cast<int>(il), cell), kConv, tag);
    std::fill_n(rec.ssm_state(static_cast<int>(il), cell), kSsm, tag + 0.5f);
  }
}

// Compares everything observable with the reference; returns a description of the first
// difference, or "".
std::string compare(const RecurrentMemory& rec, RefRecurrent& ref) {
  for (SeqId s = 0; s < ref.n(); ++s) {
    const RefSeq& r = ref[s];
    const std::string who = "seq " + std::to_string(s) + ": ";
    if (rec.seq_pos_max(s) != (r.has ? r.pos : -1))
      return who + "pos_max " + std::to_string(rec.seq_pos_max(s)) + " want " + std::to_string(r.has ? r.pos : -1);
    if (rec.seq_pos_min(s) != rec.seq_pos_max(s)) return who + "pos_min != pos_max";
    const int32_t cell = rec.seq_cell(s);
    if ((cell >= 0) != r.has) return who + "has a cell: " + std::to_string(cell >= 0);
    if (!r.has) continue;
    for (size_t il = 0; il < kLayers.size(); ++il) {
      if (!kLayers[il]) continue;
      for (int64_t i = 0; i < kConv; ++i)
        if (rec.conv_state(static_cast<int>(il), cell)[i] != r.tag)
          return who + "conv state " + std::to_string(rec.conv_state(static_cast<int>(il), cell)[i]) + " want " +
                 std::to_string(r.tag);
      for (int64_t i = 0; i < kSsm; ++i)
        if (rec.ssm_state(static_cast<int>(il), cell)[i] != (r.tag == 0 ? 0.f : r.tag + 0.5f))
          return who + "ssm state differs";
    }
    for (SeqId o = 0; o < ref.n(); ++o) {
      if (o == s || !ref[o].has) continue;
      const bool share_ref = ref[o].group == r.group;
      if ((rec.seq_cell(o) == cell) != share_ref)
        return who + "shares a cell with seq " + std::to_string(o) + ": " + std::to_string(!share_ref) +
               " want " + std::to_string(share_ref);
    }
  }
  return "";
}

Pos random_pos(std::mt19937& rng) {
  const int k = static_cast<int>(rng() % 8);
  if (k == 0) return -1;
  return static_cast<Pos>(rng() % 40);
}

TEST(RecurrentMemoryProperty, RandomOperationsMatchTheReference) {
  std::mt19937 rng(424242);
  std::map<std::string, int> coverage;
  for (int round = 0; round < 300; ++round) {
    const int n_seq = 1 + static_cast<int>(rng() % 4);
    RecurrentMemory rec(rec_layout(static_cast<uint32_t>(n_seq)));
    RefRecurrent ref(n_seq);
    float next_tag = 1;
    std::string trace;
    for (int step = 0; step < 60; ++step) {
      const int op = static_cast<int>(rng() % 100);
      const SeqId s = static_cast<SeqId>(rng() % n_seq);
      const SeqId t = static_cast<SeqId>(rng() % n_seq);
      if (op < 35) {
        // A ubatch: a random subset of sequences, each continuing after its last position.
        UBatch ub;
        std::vector<SeqId> in;
        for (SeqId q = 0; q < n_seq; ++q)
          if (rng() % 2 || q == s) in.push_back(q);
        std::map<SeqId, Pos> last;
        for (SeqId q : in) {
          const int k = 1 + static_cast<int>(rng() % 3);
          const Pos start = ref[q].has ? ref[q].pos + 1 : 0;
          for (int i = 0; i < k; ++i) ub.add(start + i, {q});
          last[q] = start + k - 1;
        }
        trace += " ub[";
        for (SeqId q : in) trace += std::to_string(q) + " ";
        trace += "]";
        auto p = rec.find_slot(ub);
        ASSERT_TRUE(p) << "a ubatch of live sequences must always fit" << trace;
        rec.apply(ub, *p);
        // Before the forward pass writes: each state is what it was (copied on write) or zero.
        for (SeqId q : in) {
          const uint32_t cell = p->cell_of(q);
          ASSERT_EQ(static_cast<int32_t>(cell), rec.seq_cell(q)) << trace;
          const float want = ref[q].has ? ref[q].tag : 0.f;
          ASSERT_EQ(rec.conv_state(0, cell)[0], want) << "seq " << q << trace;
          ASSERT_EQ(rec.seq_pos_max(q), last[q]) << trace;
        }
        for (SeqId q : in) {
          const float tag = next_tag++;
          write_state(rec, p->cell_of(q), tag);
          ref.absorb(q, last[q], tag);
        }
        // Sequences of one ubatch never share a cell after it.
        for (size_t i = 0; i < in.size(); ++i)
          for (size_t j = i + 1; j < in.size(); ++j) ASSERT_NE(p->cell_of(in[i]), p->cell_of(in[j])) << trace;
        ++coverage["ubatch"];
      } else if (op < 55) {
        const SeqId who = rng() % 6 == 0 ? -1 : (rng() % 10 == 0 ? static_cast<SeqId>(n_seq) : s);
        Pos p0 = random_pos(rng), p1 = random_pos(rng);
        // Bias towards ranges around the last position, where the rules are interesting.
        if (who >= 0 && who < n_seq && ref[who].has && rng() % 2) {
          p0 = std::max<Pos>(-1, ref[who].pos - static_cast<Pos>(rng() % 4));
          p1 = rng() % 3 == 0 ? -1 : ref[who].pos + static_cast<Pos>(rng() % 3);
        }
        trace += " rm(" + std::to_string(who) + "," + std::to_string(p0) + "," + std::to_string(p1) + ")";
        const bool want = ref.seq_rm(who, p0, p1);
        ASSERT_EQ(rec.seq_rm(who, p0, p1), want) << trace;
        ++coverage[want ? "seq_rm true" : "seq_rm false"];
      } else if (op < 70) {
        trace += " cp(" + std::to_string(s) + "," + std::to_string(t) + ")";
        rec.seq_cp(s, t, random_pos(rng), random_pos(rng));  // ranges are ignored: whole states
        ref.seq_cp(s, t);
        ++coverage["seq_cp"];
      } else if (op < 75) {
        trace += " keep(" + std::to_string(s) + ")";
        rec.seq_keep(s);
        ref.seq_keep(s);
        ++coverage["seq_keep"];
      } else if (op < 83) {
        const Pos p0 = random_pos(rng), p1 = random_pos(rng);
        const Pos d = static_cast<Pos>(rng() % 21) - 10;
        trace += " add(" + std::to_string(s) + "," + std::to_string(p0) + "," + std::to_string(p1) + "," + std::to_string(d) + ")";
        rec.seq_add(s, p0, p1, d);
        ref.seq_add(s, p0, p1, d);
        ++coverage["seq_add"];
      } else if (op < 88) {
        const int d = static_cast<int>(rng() % 4);
        trace += " div(" + std::to_string(s) + "," + std::to_string(d) + ")";
        rec.seq_div(s, -1, -1, d);
        ref.seq_div(s, -1, -1, d);
        ++coverage["seq_div"];
      } else if (op < 93) {
        const Pos n = static_cast<Pos>(rng() % 50);
        trace += " fake(" + std::to_string(s) + "," + std::to_string(n) + ")";
        if (ref[s].has) {
          ASSERT_THROW(rec.seq_fake_prefix(s, n), Error) << trace;
          ++coverage["fake prefix refused"];
        } else {
          rec.seq_fake_prefix(s, n);
          if (n > 0) {
            ref[s] = RefSeq{true, n - 1, 0.f, ref.new_group()};
          }
          ++coverage["fake prefix"];
        }
      } else if (op < 98) {
        // A restore: seq s gets a cell of its own at a chosen position and writes its state.
        const Pos pos = static_cast<Pos>(rng() % 30);
        trace += " own(" + std::to_string(s) + "," + std::to_string(pos) + ")";
        const uint32_t cell = rec.seq_own_cell(s, pos);
        const float tag = next_tag++;
        write_state(rec, cell, tag);
        ref[s] = RefSeq{true, pos, tag, ref.new_group()};
        ++coverage["seq_own_cell"];
      } else {
        trace += " clear";
        rec.clear();
        ref.seq_rm(-1, -1, -1);
        ++coverage["clear"];
      }
      const std::string diff = compare(rec, ref);
      ASSERT_EQ(diff, "") << trace;
    }
  }
  for (const auto& [what, n] : coverage) std::printf("  %-20s %d\n", what.c_str(), n);
  EXPECT_GT(coverage["seq_rm false"], 50);
  EXPECT_GT(coverage["fake prefix refused"], 10);
}

TEST(RecurrentMemory, ForkedSequencesExtendedTogetherFitInTwoCells) {
  // Two sequences sharing one state (after seq_cp) in a memory of two cells: a ubatch extending
  // both moves one out (copy-on-write) and the other keeps the cell.
  RecurrentMemory rec(rec_layout(2));
  UBatch a;
  a.add(0, {0});
  rec.apply(a, *rec.find_slot(a));
  write_state(rec, static_cast<uint32_t>(rec.seq_cell(0)), 7.f);
  rec.seq_cp(0, 1, -1, -1);
  UBatch both;
  both.add(1, {0});
  both.add(1, {1});
  auto p = rec.find_slot(both);
  ASSERT_TRUE(p);
  rec.apply(both, *p);
  EXPECT_NE(rec.seq_cell(0), rec.seq_cell(1));
  EXPECT_EQ(rec.conv_state(0, static_cast<uint32_t>(rec.seq_cell(0)))[0], 7.f);
  EXPECT_EQ(rec.conv_state(0, static_cast<uint32_t>(rec.seq_cell(1)))[0], 7.f);
}

// ---------------------------------------------------------------------------------------------
// Hybrid: a KvCache and a RecurrentMemory in one SequenceMemory
// ---------------------------------------------------------------------------------------------

// The reference of the attention half: a bag of cells, each a position and the set of sequences
// using it (one stream, unified; no shifts, which a hybrid refuses). Where cells live does not
// matter for positions, so there is no placement here.
struct RefKv {
  struct Cell {
    Pos pos;
    std::set<SeqId> seqs;
  };
  std::vector<Cell> cells;
  std::multiset<Pos> positions(SeqId s) const {
    std::multiset<Pos> out;
    for (const auto& c : cells)
      if (c.seqs.count(s)) out.insert(c.pos);
    return out;
  }
  Pos min(SeqId s) const { auto p = positions(s); return p.empty() ? -1 : *p.begin(); }
  Pos max(SeqId s) const { auto p = positions(s); return p.empty() ? -1 : *p.rbegin(); }
  bool empty(SeqId s) const { return positions(s).empty(); }
  void add(Pos p, SeqId s) { cells.push_back({p, {s}}); }
  void prune() {
    cells.erase(std::remove_if(cells.begin(), cells.end(), [](const Cell& c) { return c.seqs.empty(); }), cells.end());
  }
  void rm(SeqId s, Pos p0, Pos p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT_MAX;
    for (auto& c : cells) {
      if (c.pos < p0 || c.pos >= p1) continue;
      if (s < 0) c.seqs.clear();
      else c.seqs.erase(s);
    }
    prune();
  }
  void cp(SeqId src, SeqId dst) {
    for (auto& c : cells)
      if (c.seqs.count(src)) c.seqs.insert(dst);
  }
  void keep(SeqId s) {
    for (auto& c : cells) {
      if (c.seqs.count(s)) c.seqs = {s};
      else c.seqs.clear();
    }
    prune();
  }
  void clear() { cells.clear(); }
};

TEST(HybridMemoryProperty, PositionsAndRefusalsFollowBothHalves) {
  std::mt19937 rng(777);
  std::map<std::string, int> coverage;
  for (int round = 0; round < 200; ++round) {
    const int n_seq = 1 + static_cast<int>(rng() % 3);
    KvLayout kl;
    kl.layer_has_kv = {false, true, false, false};
    kl.n_embd_k = kl.n_embd_v = 32;
    kl.n_cells = 512;
    kl.n_seq_max = static_cast<uint32_t>(n_seq);
    SequenceMemory mem(std::make_unique<KvCache>(kl), std::make_unique<RecurrentMemory>(rec_layout(static_cast<uint32_t>(n_seq))));
    RefRecurrent ref_rec(n_seq);
    RefKv ref_kv;
    EXPECT_FALSE(mem.can_shift());
    std::string trace;
    auto hybrid_min = [&](SeqId s) {
      const Pos a = ref_kv.min(s), r = ref_rec[s].has ? ref_rec[s].pos : -1;
      return (a < 0 || r < 0) ? -1 : std::max(a, r);
    };
    auto hybrid_max = [&](SeqId s) {
      const Pos a = ref_kv.max(s), r = ref_rec[s].has ? ref_rec[s].pos : -1;
      return (a < 0 || r < 0) ? -1 : std::min(a, r);
    };
    for (int step = 0; step < 40; ++step) {
      const int op = static_cast<int>(rng() % 100);
      const SeqId s = static_cast<SeqId>(rng() % n_seq);
      if (op < 40) {
        // The engine's rule: a sequence continues at the hybrid pos_max + 1.
        const Pos start = mem.seq_pos_max(s) + 1;
        const int k = 1 + static_cast<int>(rng() % 4);
        UBatch ub;
        for (int i = 0; i < k; ++i) ub.add(start + i, {s});
        trace += " ub(" + std::to_string(s) + "@" + std::to_string(start) + "+" + std::to_string(k) + ")";
        auto p = mem.prepare(ub);
        ASSERT_TRUE(p) << trace;
        mem.apply(ub, *p);
        for (int i = 0; i < k; ++i) ref_kv.add(start + i, s);
        ref_rec.absorb(s, start + k - 1, 0);
        write_state(*mem.rec(), p->rec.cell_of(s), 0);
        ++coverage["ubatch"];
      } else if (op < 70) {
        Pos p0 = random_pos(rng), p1 = random_pos(rng);
        if (ref_rec[s].has && rng() % 2) {
          p0 = std::max<Pos>(-1, ref_rec[s].pos - static_cast<Pos>(rng() % 6));
          p1 = rng() % 2 ? -1 : ref_rec[s].pos + static_cast<Pos>(rng() % 3) - 1;
        }
        trace += " rm(" + std::to_string(s) + "," + std::to_string(p0) + "," + std::to_string(p1) + ")";
        // Recurrent decides first; when it refuses, the attention half is not touched either.
        const bool want = ref_rec.seq_rm(s, p0, p1);
        if (want) ref_kv.rm(s, p0, p1);
        ASSERT_EQ(mem.seq_rm(s, p0, p1), want) << trace;
        ++coverage[want ? "seq_rm true" : "seq_rm false (both halves unchanged)"];
      } else if (op < 80) {
        const SeqId t = static_cast<SeqId>(rng() % n_seq);
        trace += " cp(" + std::to_string(s) + "," + std::to_string(t) + ")";
        mem.seq_cp(s, t, -1, -1);
        // Attention: t joins s's cells (its own stay); recurrent: t's state is replaced.
        if (s != t) ref_kv.cp(s, t);
        ref_rec.seq_cp(s, t);
        ++coverage["seq_cp"];
      } else if (op < 85) {
        trace += " keep(" + std::to_string(s) + ")";
        mem.seq_keep(s);
        ref_kv.keep(s);
        ref_rec.seq_keep(s);
        ++coverage["seq_keep"];
      } else if (op < 90) {
        trace += " add(" + std::to_string(s) + ")";
        ASSERT_THROW(mem.seq_add(s, -1, -1, 1), Error) << trace;
        ASSERT_THROW(mem.seq_div(s, -1, -1, 2), Error) << trace;
        ++coverage["shift refused"];
      } else if (op < 97) {
        const Pos n = static_cast<Pos>(rng() % 30);
        trace += " fake(" + std::to_string(s) + "," + std::to_string(n) + ")";
        if (ref_rec[s].has || !ref_kv.empty(s)) {
          ASSERT_THROW(mem.seq_fake_prefix(s, n), Error) << trace;
          ++coverage["fake prefix refused"];
        } else {
          mem.seq_fake_prefix(s, n);
          for (Pos p = 0; p < n; ++p) ref_kv.add(p, s);
          if (n > 0) ref_rec[s] = RefSeq{true, n - 1, 0.f, ref_rec.new_group()};
          ++coverage["fake prefix"];
        }
      } else {
        trace += " clear";
        mem.clear();
        ref_kv.clear();
        ref_rec.seq_rm(-1, -1, -1);
        ++coverage["clear"];
      }
      for (SeqId q = 0; q < n_seq; ++q) {
        ASSERT_EQ(mem.kv()->seq_pos_min(q), ref_kv.min(q)) << "seq " << q << trace;
        ASSERT_EQ(mem.kv()->seq_pos_max(q), ref_kv.max(q)) << "seq " << q << trace;
        ASSERT_EQ(mem.rec()->seq_pos_max(q), ref_rec[q].has ? ref_rec[q].pos : -1) << "seq " << q << trace;
        ASSERT_EQ(mem.seq_pos_min(q), hybrid_min(q)) << "seq " << q << trace;
        ASSERT_EQ(mem.seq_pos_max(q), hybrid_max(q)) << "seq " << q << trace;
      }
    }
  }
  for (const auto& [what, n] : coverage) std::printf("  %-38s %d\n", what.c_str(), n);
  EXPECT_GT(coverage["seq_rm false (both halves unchanged)"], 20);
}

}  // namespace
}  // namespace agentkv::memory
