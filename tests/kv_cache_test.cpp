// The attention KV cache: storage layout and sizes per type, transactional placement, the search
// lowest-free-cell placement, masks, shifts for context shift, and one-stream-per-sequence behaviour. The random
// cross-check of all sequence operations against a reference model is in kv_cells_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <stdexcept>
#include <vector>

#include "agentkv/error.h"
#include "memory/kv_cache.h"

namespace agentkv::memory {
namespace {

KvLayout small_layout(uint32_t n_cells, uint32_t n_seq = 1, bool unified = true) {
  KvLayout l;
  l.layer_has_kv = {true};
  l.n_embd_k = 64;
  l.n_embd_v = 64;
  l.type_k = GgmlType::F16;
  l.type_v = GgmlType::F16;
  l.n_cells = n_cells;
  l.n_seq_max = n_seq;
  l.unified = unified;
  return l;
}

// A ubatch of n tokens of one sequence at positions p0, p0+1, ...
UBatch run(SeqId seq, Pos p0, int n) {
  UBatch ub;
  for (int i = 0; i < n; ++i) ub.add(p0 + i, {seq});
  return ub;
}

Placement place(KvCache& kv, const UBatch& ub) {
  auto pl = kv.find_slot(ub);
  EXPECT_TRUE(pl.has_value());
  if (!pl) return {};
  kv.apply(ub, *pl);
  return *pl;
}

std::vector<uint32_t> cells_of(const Placement& pl) {
  std::vector<uint32_t> out;
  for (const auto& r : pl) out.push_back(r.cell);
  return out;
}

// Everything observable about the cell tables, to compare before and after an operation.
struct Snapshot {
  std::vector<Pos> pos, shift;
  std::vector<SeqSet> seqs;
  std::vector<uint32_t> first_free, n_kv;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const KvCache& kv) {
  Snapshot s;
  for (uint32_t st = 0; st < kv.layout().n_streams(); ++st) {
    const KvCells& c = kv.cells(st);
    for (uint32_t i = 0; i < c.size(); ++i) {
      s.pos.push_back(c.pos(i));
      s.shift.push_back(c.shift(i));
      s.seqs.push_back(c.seqs(i));
    }
    s.first_free.push_back(kv.cells(st).first_free());
    s.n_kv.push_back(kv.n_kv(st));
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Storage
// ---------------------------------------------------------------------------------------------

struct TypeCase {
  GgmlType type;
  int64_t block;  // elements per block, from ggml's type traits
  size_t bytes;   // bytes per block
};

// ggml's block sizes, written out here independently of core/ggml_type.cpp.
const TypeCase kKvTypes[] = {
    {GgmlType::F32, 1, 4},     {GgmlType::F16, 1, 2},     {GgmlType::BF16, 1, 2},
    {GgmlType::Q8_0, 32, 34},  {GgmlType::Q4_0, 32, 18},  {GgmlType::Q4_1, 32, 20},
    {GgmlType::Q5_0, 32, 22},  {GgmlType::Q5_1, 32, 24},  {GgmlType::IQ4_NL, 32, 18},
};

TEST(KvCacheStorage, RowSizesForEveryType) {
  for (const TypeCase& tc : kKvTypes) {
    for (int64_t n_embd : {128, 1024, 640}) {
      KvLayout l = small_layout(48, 2, false);
      l.layer_has_kv = {true, false, true, true};
      l.n_embd_k = n_embd;
      l.n_embd_v = 2 * n_embd;
      l.type_k = tc.type;
      l.type_v = tc.type;
      KvCache kv(l);
      const size_t want_k = static_cast<size_t>(n_embd / tc.block) * tc.bytes;
      const size_t want_v = static_cast<size_t>(2 * n_embd / tc.block) * tc.bytes;
      SCOPED_TRACE(std::string(ggml_type_name(tc.type)) + " n_embd " + std::to_string(n_embd));
      EXPECT_EQ(kv.rows().row_bytes_k(), want_k);
      EXPECT_EQ(kv.rows().row_bytes_v(), want_v);
      EXPECT_EQ(kv.rows().n_kv_layers(), 3u);
      EXPECT_EQ(kv.usage().bytes_total, 3u * 2u * 48u * (want_k + want_v));
      // Streams are consecutive blocks of n_cells rows.
      EXPECT_EQ(kv.rows().k_data(0, 1) - kv.rows().k_data(0, 0), static_cast<ptrdiff_t>(48 * want_k));
      EXPECT_EQ(kv.rows().v_data(3, 1) - kv.rows().v_data(3, 0), static_cast<ptrdiff_t>(48 * want_v));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(kv.rows().k_data(2, 0)) % 64, 0u);
    }
  }
}

TEST(KvCacheStorage, StartsZeroedAndLayersAreDistinct) {
  KvLayout l = small_layout(16, 2, false);
  l.layer_has_kv = {true, false, true};
  KvCache kv(l);
  for (int layer : {0, 2})
    for (uint32_t s = 0; s < 2; ++s) {
      const uint8_t* k = kv.rows().k_data(layer, s);
      const uint8_t* v = kv.rows().v_data(layer, s);
      for (size_t b = 0; b < 16 * kv.rows().row_bytes_k(); ++b) ASSERT_EQ(k[b], 0);
      for (size_t b = 0; b < 16 * kv.rows().row_bytes_v(); ++b) ASSERT_EQ(v[b], 0);
    }
  EXPECT_NE(kv.rows().k_data(0, 0), kv.rows().k_data(2, 0));
  EXPECT_TRUE(kv.rows().layer_has_kv(0));
  EXPECT_FALSE(kv.rows().layer_has_kv(1));
  EXPECT_FALSE(kv.rows().layer_has_kv(7));
  EXPECT_THROW(kv.rows().k_data(1, 0), Error);
  EXPECT_THROW(kv.rows().v_data(3, 0), Error);
  EXPECT_THROW(kv.rows().k_data(0, 2), Error);

  kv.rows().k_data(2, 1)[5] = 9;
  kv.clear();
  EXPECT_EQ(kv.rows().k_data(2, 1)[5], 9);  // clear() keeps the bytes: the cells say nothing is there
  kv.clear(true);
  EXPECT_EQ(kv.rows().k_data(2, 1)[5], 0);
}

// Resident pages of this process (bytes), from /proc/self/statm.
size_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * 4096;
}

TEST(KvCacheStorage, PrefaultBacksEveryPageAndKeepsTheBytes) {
  KvLayout l = small_layout(65536);  // 64 layers-worth of rows: 8 MiB K + 8 MiB V
  l.layer_has_kv.assign(4, true);
  KvCache kv(l);
  kv.rows().k_data(3, 0)[12345] = 7;
  const size_t before = resident_bytes();
  kv.rows().prefault();
  const size_t after = resident_bytes();
  // calloc'd storage is not resident until written; prefault must make (almost) all of it so.
  EXPECT_GE(after - before, kv.usage().bytes_total * 9 / 10);
  EXPECT_EQ(kv.rows().k_data(3, 0)[12345], 7);
  EXPECT_EQ(kv.rows().v_data(2, 0)[777], 0);
}

TEST(KvCacheStorage, RejectsUnusableLayouts) {
  auto expect_error = [](KvLayout l, const char* what) {
    try {
      KvCache kv(l);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("kv cache"), std::string::npos) << e.what();
    }
  };
  for (const TypeCase& tc : kKvTypes) {
    if (tc.block == 1) continue;
    KvLayout l = small_layout(8);
    l.type_v = tc.type;
    l.n_embd_v = 48;  // not a multiple of 32
    expect_error(l, "V width 48 with a 32-element block type");
    l = small_layout(8);
    l.type_k = tc.type;
    l.n_embd_k = 100;
    expect_error(l, "K width 100 with a 32-element block type");
  }
  KvLayout l = small_layout(8);
  l.type_k = GgmlType::Q4_K;  // a weight type, not a KV cache type
  l.n_embd_k = 256;
  expect_error(l, "q4_K");
  l = small_layout(8);
  l.type_v = GgmlType::I32;
  expect_error(l, "i32");
  expect_error(small_layout(0), "no cells");
  expect_error(small_layout(8, 0), "n_seq_max 0");
  expect_error(small_layout(8, 257), "n_seq_max 257");
  l = small_layout(8);
  l.n_embd_k = 0;
  expect_error(l, "zero width");
}

// ---------------------------------------------------------------------------------------------
// Placement
// ---------------------------------------------------------------------------------------------

TEST(KvCachePlacement, AppendsFillConsecutiveCells) {
  KvCache kv(small_layout(64));
  EXPECT_EQ(cells_of(place(kv, run(0, 0, 5))), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(cells_of(place(kv, run(0, 5, 3))), (std::vector<uint32_t>{5, 6, 7}));
  EXPECT_EQ(kv.cells(0).first_free(), 8u);
  EXPECT_EQ(kv.seq_pos_min(0), 0);
  EXPECT_EQ(kv.seq_pos_max(0), 7);
}

TEST(KvCachePlacement, FillsHolesNonContiguously) {
  KvCache kv(small_layout(8, 2));
  place(kv, run(0, 0, 4));  // cells 0..3
  place(kv, run(1, 0, 4));  // cells 4..7
  kv.seq_rm(0, 1, 2);       // frees cell 1
  kv.seq_rm(1, 2, 3);       // frees cell 6
  EXPECT_EQ(kv.cells(0).first_free(), 1u);
  const Placement pl = place(kv, run(0, 4, 2));
  EXPECT_EQ(cells_of(pl), (std::vector<uint32_t>{1, 6}));
  EXPECT_EQ(kv.cells(0).used(), 8u);
}

TEST(KvCachePlacement, FailedPlacementLeavesEverythingAsItWas) {
  KvCache kv(small_layout(16, 3));
  place(kv, run(0, 0, 6));
  place(kv, run(1, 0, 6));
  place(kv, run(2, 0, 4));
  // Fragment: every other cell of seq 0 and seq 1 freed -> 6 scattered free cells.
  for (Pos p = 0; p < 6; p += 2) {
    kv.seq_rm(0, p, p + 1);
    kv.seq_rm(1, p, p + 1);
  }
  kv.seq_add(2, -1, -1, 3);  // pending shifts must survive too
  ASSERT_EQ(kv.cells(0).used(), 10u);
  const Snapshot before = snapshot(kv);
  const auto small = kv.find_slot(run(2, 7, 3));
  ASSERT_TRUE(small.has_value());

  EXPECT_FALSE(kv.find_slot(run(2, 7, 7)).has_value());   // one more than free
  EXPECT_FALSE(kv.find_slot(run(2, 7, 40)).has_value());  // more than the whole cache
  EXPECT_FALSE(kv.find_slots({run(2, 7, 3), run(2, 10, 4)}).has_value());  // 7 > 6 together
  EXPECT_EQ(snapshot(kv), before);
  const auto again = kv.find_slot(run(2, 7, 3));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(cells_of(*again), cells_of(*small));

  // Exactly filling the free cells works.
  const auto all = kv.find_slot(run(2, 7, 6));
  ASSERT_TRUE(all.has_value());
  kv.apply(run(2, 7, 6), *all);
  EXPECT_EQ(kv.cells(0).used(), 16u);
  EXPECT_FALSE(kv.find_slot(run(0, 9, 1)).has_value());
}

TEST(KvCachePlacement, ApplyRejectsStaleOrForeignPlacements) {
  KvCache kv(small_layout(8, 2));
  const UBatch ub = run(0, 0, 2);
  const auto pl = kv.find_slot(ub);
  ASSERT_TRUE(pl.has_value());
  kv.apply(ub, *pl);
  const Snapshot before = snapshot(kv);
  EXPECT_THROW(kv.apply(ub, *pl), std::logic_error);  // the cells are taken now
  EXPECT_THROW(kv.apply(run(0, 2, 3), *pl), std::logic_error);  // size mismatch
  Placement dup{{0, 5}, {0, 5}};
  EXPECT_THROW(kv.apply(run(0, 2, 2), dup), std::logic_error);
  Placement out_of_range{{0, 8}};
  EXPECT_THROW(kv.apply(run(0, 2, 1), out_of_range), std::logic_error);
  EXPECT_EQ(snapshot(kv), before);
}

TEST(KvCachePlacement, MalformedUbatchesAreErrors) {
  KvCache kv(small_layout(8, 2));
  UBatch no_seq;
  no_seq.add(0, {});
  EXPECT_THROW(kv.find_slot(no_seq), Error);
  EXPECT_THROW(kv.find_slot(run(2, 0, 1)), Error);   // seq id >= n_seq_max
  EXPECT_THROW(kv.find_slot(run(-1, 0, 1)), Error);
  EXPECT_THROW(kv.find_slot(run(0, -3, 1)), Error);  // negative position
  UBatch ragged = run(0, 0, 2);
  ragged.seq.pop_back();
  EXPECT_THROW(kv.find_slot(ragged), Error);
}

TEST(KvCachePlacement, TokenInSeveralSequencesGetsThemAll) {
  KvCache kv(small_layout(32, 3));
  UBatch ub;
  ub.add(0, {0, 2});
  ub.add(1, {0, 2, 2});  // a repeated id counts once
  ub.add(2, {2});
  const Placement pl = place(kv, ub);
  const KvCells& c = kv.cells(0);
  EXPECT_TRUE(c.has_seq(pl[0].cell, 0) && c.has_seq(pl[0].cell, 2));
  EXPECT_EQ(c.seqs(pl[1].cell).count(), 2u);
  EXPECT_EQ(kv.seq_pos_max(0), 1);
  EXPECT_EQ(kv.seq_pos_max(2), 2);
  EXPECT_EQ(kv.seq_pos_min(1), -1);
  kv.seq_rm(2, -1, -1);
  EXPECT_EQ(c.used(), 2u);  // the cells shared with seq 0 stay
  EXPECT_EQ(kv.seq_pos_max(0), 1);
  EXPECT_EQ(kv.seq_pos_max(2), -1);
}

TEST(KvCachePlacement, FreedFrontCellsAreReusedFirst) {
  KvCache kv(small_layout(64));
  place(kv, run(0, 0, 40));
  kv.seq_rm(0, 0, 30);
  EXPECT_EQ(kv.cells(0).first_free(), 0u);
  EXPECT_EQ(cells_of(place(kv, run(0, 40, 2))), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(kv.cells(0).first_free(), 2u);
  place(kv, run(0, 42, 29));  // fills the hole up to cell 29 and continues at 40
  EXPECT_EQ(kv.cells(0).first_free(), 41u);
}

// ---------------------------------------------------------------------------------------------
// n_kv and masks
// ---------------------------------------------------------------------------------------------

TEST(KvCacheMask, NKvIsPaddedAndBounded) {
  KvCache kv(small_layout(100));
  EXPECT_EQ(kv.n_kv(0), 32u);  // empty cache still spans one pad unit
  place(kv, run(0, 0, 33));
  EXPECT_EQ(kv.n_kv(0), 64u);
  place(kv, run(0, 33, 40));
  EXPECT_EQ(kv.n_kv(0), 96u);
  place(kv, run(0, 73, 24));  // cells up to 96 -> 128 rounded, capped at the cache size
  EXPECT_EQ(kv.n_kv(0), 100u);  // never past the cache
  kv.seq_rm(0, 20, -1);
  EXPECT_EQ(kv.n_kv(0), 32u);
  KvCache tiny(small_layout(5));
  EXPECT_EQ(tiny.n_kv(0), 5u);
}

TEST(KvCacheMask, CausalPerSequenceMask) {
  KvCache kv(small_layout(8, 2));
  UBatch prompt;
  prompt.add(0, {0, 1});  // shared prefix token
  prompt.add(1, {0});
  prompt.add(2, {0});
  prompt.add(1, {1});
  place(kv, prompt);  // cells 0..3
  UBatch q;
  q.add(1, {0});
  q.add(2, {1});
  q.add(0, {1});
  std::vector<float> mask(3 * 8, 7.0f);
  kv.fill_mask(q, {0, 1, 2}, 0, mask.data(), 8);
  const float I = -INFINITY;
  const std::vector<float> want = {
      0, 0, I, I, I, I, I, I,  // seq 0 at pos 1: cells at pos 0 and 1 of seq 0
      0, I, I, 0, I, I, I, I,  // seq 1 at pos 2: its own cells 0 and 3
      0, I, I, I, I, I, I, I,  // seq 1 at pos 0: only the shared cell
  };
  EXPECT_EQ(mask, want);
  // Rows for a subset of tokens, in the order given.
  std::vector<float> one(8, 7.0f);
  kv.fill_mask(q, {2}, 0, one.data(), 8);
  EXPECT_EQ(one, std::vector<float>(want.begin() + 16, want.end()));
  EXPECT_THROW(kv.fill_mask(q, {3}, 0, one.data(), 8), Error);
}

// ---------------------------------------------------------------------------------------------
// Context shift bookkeeping
// ---------------------------------------------------------------------------------------------

TEST(KvCacheShift, SeqAddAndDivRecordTheRotationDelta) {
  KvCache kv(small_layout(16, 2));
  place(kv, run(0, 0, 10));  // cells 0..9 at positions 0..9
  EXPECT_FALSE(kv.has_shift());
  // The classic context shift: drop positions [2, 6), move the rest back by 4.
  kv.seq_rm(0, 2, 6);
  kv.seq_add(0, 6, -1, -4);
  const KvCells& c = kv.cells(0);
  EXPECT_TRUE(kv.has_shift());
  EXPECT_EQ(c.pos(6), 2);
  EXPECT_EQ(c.shift(6), -4);
  EXPECT_EQ(c.shift(0), 0);
  EXPECT_EQ(kv.seq_pos_min(0), 0);
  EXPECT_EQ(kv.seq_pos_max(0), 5);
  // Group-attention style division: position 5 -> 2 means rotate by 2 - 5 = -3 more.
  kv.seq_div(0, 4, -1, 2);
  EXPECT_EQ(c.pos(9), 2);
  EXPECT_EQ(c.shift(9), -4 + (2 - 5));
  EXPECT_EQ(c.pos(8), 2);  // 4 / 2
  EXPECT_EQ(kv.seq_pos_max(0), 3);
  kv.reset_shift();
  EXPECT_FALSE(kv.has_shift());
  for (uint32_t i = 0; i < c.size(); ++i) EXPECT_EQ(c.shift(i), 0);
  EXPECT_EQ(c.pos(9), 2);  // positions stay
}

TEST(KvCacheShift, NegativePositionsAreRemoved) {
  KvCache kv(small_layout(8));
  place(kv, run(0, 0, 6));
  kv.seq_add(0, -1, -1, -3);
  EXPECT_EQ(kv.cells(0).used(), 3u);
  EXPECT_EQ(kv.seq_pos_min(0), 0);
  EXPECT_EQ(kv.seq_pos_max(0), 2);
  EXPECT_EQ(kv.cells(0).first_free(), 0u);
  EXPECT_EQ(cells_of(place(kv, run(0, 3, 1))), (std::vector<uint32_t>{0}));
}

TEST(KvCacheShift, SharedCellsMoveForEverySequence) {
  // One cell holds one K row, so moving it for one sequence moves it for all (llama.cpp too).
  KvCache kv(small_layout(8, 2));
  place(kv, run(0, 0, 3));
  kv.seq_cp(0, 1, -1, -1);
  kv.seq_add(0, -1, -1, 5);
  EXPECT_EQ(kv.seq_pos_min(1), 5);
  EXPECT_EQ(kv.seq_pos_max(1), 7);
}

TEST(KvCacheShift, RefusesPositionOverflowWithoutChangingAnything) {
  KvCache kv(small_layout(8));
  place(kv, run(0, 10, 2));
  const Snapshot before = snapshot(kv);
  EXPECT_THROW(kv.seq_add(0, -1, -1, std::numeric_limits<Pos>::max() - 5), Error);
  EXPECT_EQ(snapshot(kv), before);
  EXPECT_THROW(kv.seq_div(0, -1, -1, 0), Error);
  EXPECT_THROW(kv.seq_div(0, -1, -1, -2), Error);
}

// ---------------------------------------------------------------------------------------------
// Sequence operations: argument handling
// ---------------------------------------------------------------------------------------------

TEST(KvCacheSeqOps, RangesAreHalfOpenWithOpenEnds) {
  KvCache kv(small_layout(16, 2));
  place(kv, run(0, 0, 10));
  EXPECT_TRUE(kv.seq_rm(0, 3, 3));  // empty range
  EXPECT_EQ(kv.cells(0).used(), 10u);
  EXPECT_TRUE(kv.seq_rm(0, 8, -1));  // [8, inf)
  EXPECT_EQ(kv.seq_pos_max(0), 7);
  EXPECT_TRUE(kv.seq_rm(0, -5, 2));  // [0, 2)
  EXPECT_EQ(kv.seq_pos_min(0), 2);
  kv.seq_cp(0, 1, 4, 6);
  EXPECT_EQ(kv.seq_pos_min(1), 4);
  EXPECT_EQ(kv.seq_pos_max(1), 5);
  EXPECT_TRUE(kv.seq_rm(-1, 5, 7));  // every sequence
  EXPECT_EQ(kv.seq_pos_max(1), 4);
  EXPECT_EQ(kv.cells(0).used(), 4u);  // positions 2, 3, 4, 7
}

TEST(KvCacheSeqOps, InvalidSequenceIdsAreErrors) {
  KvCache kv(small_layout(8, 2));
  EXPECT_THROW(kv.seq_rm(2, -1, -1), Error);
  EXPECT_THROW(kv.seq_cp(0, 2, -1, -1), Error);
  EXPECT_THROW(kv.seq_cp(-1, 0, -1, -1), Error);
  EXPECT_THROW(kv.seq_keep(-1), Error);
  EXPECT_THROW(kv.seq_add(5, -1, -1, 1), Error);
  EXPECT_THROW(kv.seq_div(5, -1, -1, 2), Error);
  EXPECT_THROW(kv.seq_pos_min(2), Error);
  EXPECT_THROW(kv.seq_pos_max(-1), Error);
  EXPECT_THROW(kv.layout().stream_of(2), Error);
  EXPECT_THROW(kv.n_kv(1), Error);
}

// ---------------------------------------------------------------------------------------------
// One stream per sequence
// ---------------------------------------------------------------------------------------------

void write_rows(KvCache& kv, const Placement& pl, uint8_t base) {
  for (size_t t = 0; t < pl.size(); ++t) {
    std::memset(kv.rows().k_data(0, pl[t].stream) + pl[t].cell * kv.rows().row_bytes_k(), base + t,
                kv.rows().row_bytes_k());
    std::memset(kv.rows().v_data(0, pl[t].stream) + pl[t].cell * kv.rows().row_bytes_v(), base + 100 + t,
                kv.rows().row_bytes_v());
  }
}

TEST(KvCacheStreams, EachSequenceHasItsOwnStream) {
  KvCache kv(small_layout(40, 3, false));
  EXPECT_EQ(kv.layout().n_streams(), 3u);
  for (SeqId s = 0; s < 3; ++s) EXPECT_EQ(kv.layout().stream_of(s), static_cast<uint32_t>(s));
  UBatch ub;
  ub.add(0, {1});
  ub.add(0, {2});
  ub.add(1, {1});
  ub.add(1, {2});
  const Placement pl = place(kv, ub);
  EXPECT_EQ(pl[0].stream, 1u);
  EXPECT_EQ(pl[0].cell, 0u);
  EXPECT_EQ(pl[1].stream, 2u);
  EXPECT_EQ(pl[1].cell, 0u);
  EXPECT_EQ(pl[2].cell, 1u);
  EXPECT_EQ(pl[3].cell, 1u);
  EXPECT_EQ(kv.cells(0).used(), 0u);
  EXPECT_EQ(kv.cells(1).used(), 2u);
  // Each stream fills independently: 40 cells for seq 0 fit although seq 1 and 2 hold cells.
  EXPECT_TRUE(kv.find_slot(run(0, 0, 40)).has_value());
  EXPECT_FALSE(kv.find_slot(run(1, 2, 39)).has_value());
  place(kv, run(2, 2, 35));
  EXPECT_EQ(kv.n_kv(2), 40u);
  EXPECT_EQ(kv.n_kv(1), 32u);

  UBatch mixed;
  mixed.add(0, {0, 1});
  EXPECT_THROW(kv.find_slot(mixed), Error);  // one token cannot live in two streams
  UBatch wrong_stream = run(1, 5, 1);
  std::vector<float> mask(40);
  EXPECT_THROW(kv.fill_mask(wrong_stream, {0}, 0, mask.data(), 40), Error);
}

TEST(KvCacheStreams, CrossStreamCopyCopiesRowsAndReplacesDestination) {
  KvCache kv(small_layout(16, 2, false));
  const Placement p0 = place(kv, run(0, 0, 5));
  write_rows(kv, p0, 10);
  const Placement p1 = place(kv, run(1, 0, 7));  // dst's old content, to be replaced
  write_rows(kv, p1, 60);
  kv.seq_rm(0, 1, 2);        // a hole in the source: cell 1
  kv.seq_add(0, 3, -1, 10);  // pending shifts travel with the rows
  kv.seq_cp(0, 1, -1, -1);

  const KvCells& src = kv.cells(0);
  const KvCells& dst = kv.cells(1);
  EXPECT_EQ(dst.used(), 4u);
  for (uint32_t i = 0; i < 16; ++i) {
    EXPECT_EQ(dst.pos(i), src.pos(i)) << i;
    EXPECT_EQ(dst.shift(i), src.shift(i)) << i;
    if (src.is_empty(i)) continue;
    EXPECT_TRUE(dst.has_seq(i, 1));
    EXPECT_FALSE(dst.has_seq(i, 0));
    EXPECT_EQ(0, std::memcmp(kv.rows().k_data(0, 1) + i * kv.rows().row_bytes_k(),
                             kv.rows().k_data(0, 0) + i * kv.rows().row_bytes_k(), kv.rows().row_bytes_k()));
    EXPECT_EQ(0, std::memcmp(kv.rows().v_data(0, 1) + i * kv.rows().row_bytes_v(),
                             kv.rows().v_data(0, 0) + i * kv.rows().row_bytes_v(), kv.rows().row_bytes_v()));
  }
  EXPECT_EQ(kv.rows().k_data(0, 1)[4 * kv.rows().row_bytes_k()], 14);
  EXPECT_EQ(kv.seq_pos_min(1), 0);
  EXPECT_EQ(kv.seq_pos_max(1), 14);
  EXPECT_EQ(dst.first_free(), 1u);
  EXPECT_TRUE(kv.has_shift());
  // The source is untouched.
  EXPECT_EQ(src.used(), 4u);
  EXPECT_EQ(kv.seq_pos_max(0), 14);
}

TEST(KvCacheStreams, PartialCrossStreamCopyIsRefused) {
  KvCache kv(small_layout(16, 2, false));
  place(kv, run(0, 3, 5));  // positions 3..7
  place(kv, run(1, 0, 2));
  const Snapshot before = snapshot(kv);
  EXPECT_THROW(kv.seq_cp(0, 1, 4, -1), Error);
  EXPECT_THROW(kv.seq_cp(0, 1, -1, 7), Error);
  EXPECT_EQ(snapshot(kv), before);
  kv.seq_cp(0, 1, 3, 8);  // covers every position of seq 0: a whole copy
  EXPECT_EQ(kv.seq_pos_min(1), 3);
  EXPECT_EQ(kv.seq_pos_max(1), 7);
  kv.seq_rm(0, -1, -1);
  kv.seq_cp(0, 1, 5, 6);  // an empty source copies as a whole: dst becomes empty
  EXPECT_EQ(kv.seq_pos_max(1), -1);
}

TEST(KvCacheStreams, RemoveAllAndKeepSpanStreams) {
  KvCache kv(small_layout(16, 3, false));
  for (SeqId s = 0; s < 3; ++s) place(kv, run(s, 0, 4));
  kv.seq_rm(-1, 2, -1);
  for (SeqId s = 0; s < 3; ++s) EXPECT_EQ(kv.seq_pos_max(s), 1);
  kv.seq_keep(1);
  EXPECT_EQ(kv.seq_pos_max(0), -1);
  EXPECT_EQ(kv.seq_pos_max(1), 1);
  EXPECT_EQ(kv.seq_pos_max(2), -1);
  EXPECT_EQ(kv.cells(0).used() + kv.cells(2).used(), 0u);
}

}  // namespace
}  // namespace agentkv::memory
