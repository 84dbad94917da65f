// State save/restore of the sequence memory without a model: byte-exact round trips for every KV
// cache type (per sequence and whole, into caches fragmented differently from the saving one),
// the recurrent part, partial saves, pending shifts, in-memory snapshots, checkpoint records, and
// every way a blob can be refused — each time checking that the memory is left exactly as it was.
// Row sizes are checked against ggml's block sizes written out here, not against the code's own
// arithmetic. Decoding with real models after a restore is in state_decode_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "agentkv/error.h"
#include "memory/memory_state.h"
#include "memory/snapshot.h"
#include "memory/state_info.h"

namespace agentkv::memory {
namespace {

// ggml's block sizes and bytes per block for the KV cache types (ggml.c type_traits), and agentkv's.
struct TypeBytes {
  GgmlType type;
  int64_t block;
  size_t block_bytes;
};
const TypeBytes kKvTypes[] = {
    {GgmlType::F32, 1, 4},     {GgmlType::F16, 1, 2},     {GgmlType::BF16, 1, 2},
    {GgmlType::Q8_0, 32, 34},  {GgmlType::Q4_0, 32, 18},  {GgmlType::Q4_1, 32, 20},
    {GgmlType::Q5_0, 32, 22},  {GgmlType::Q5_1, 32, 24},  {GgmlType::IQ4_NL, 32, 18},
    {GgmlType::TQ4, 64, 34},   {GgmlType::TQ3, 64, 26},  // agentkv's own (docs/quant-types.md)
};
void PrintTo(const TypeBytes& t, std::ostream* os) { *os << ggml_type_name(t.type); }
size_t expected_row_bytes(const TypeBytes& t, int64_t n) { return static_cast<size_t>(n / t.block) * t.block_bytes; }

// Different widths catch K/V mix-ups; both multiples of tq4 / tq3's 64-element blocks.
constexpr int64_t kEmbdK = 64, kEmbdV = 128;
constexpr int64_t kConv = 12, kSsm = 40;

struct MemSpec {
  GgmlType type_k = GgmlType::F16, type_v = GgmlType::F16;
  uint32_t n_cells = 40;
  uint32_t n_seq_max = 4;
  bool unified = true;
  bool hybrid = false;
  int64_t n_embd_k = kEmbdK;
};

// Layers 0, 2, 3 have KV; layer 1 is recurrent in hybrid memories (and has KV otherwise).
std::unique_ptr<SequenceMemory> make_memory(const MemSpec& s) {
  KvLayout kl;
  kl.layer_has_kv = {true, !s.hybrid, true, true};
  kl.n_embd_k = s.n_embd_k;
  kl.n_embd_v = kEmbdV;
  kl.type_k = s.type_k;
  kl.type_v = s.type_v;
  kl.n_cells = s.n_cells;
  kl.n_seq_max = s.n_seq_max;
  kl.unified = s.unified;
  std::unique_ptr<RecurrentMemory> rec;
  if (s.hybrid) {
    RecurrentLayout rl;
    rl.layer_recurrent = {false, true, false, false};
    rl.n_conv = kConv;
    rl.n_ssm = kSsm;
    rl.n_seq_max = s.n_seq_max;
    rec = std::make_unique<RecurrentMemory>(rl);
  }
  return std::make_unique<SequenceMemory>(std::make_unique<KvCache>(kl), std::move(rec));
}

// Places n tokens of seq at p0.. and writes random bytes where a forward pass would write: the
// K/V rows of the placed cells and the sequence's recurrent state.
void decode(SequenceMemory& m, SeqId seq, Pos p0, int n, std::mt19937& rng) {
  UBatch ub;
  for (int i = 0; i < n; ++i) ub.add(p0 + i, {seq});
  auto pl = m.prepare(ub);
  ASSERT_TRUE(pl.has_value());
  m.apply(ub, *pl);
  KvCache& kv = *m.kv();
  for (const CellRef& ref : pl->kv)
    for (int layer = 0; layer < 4; ++layer) {
      if (!kv.rows().layer_has_kv(layer)) continue;
      uint8_t* k = kv.rows().k_data(layer, ref.stream) + ref.cell * kv.rows().row_bytes_k();
      uint8_t* v = kv.rows().v_data(layer, ref.stream) + ref.cell * kv.rows().row_bytes_v();
      for (size_t b = 0; b < kv.rows().row_bytes_k(); ++b) k[b] = static_cast<uint8_t>(rng());
      for (size_t b = 0; b < kv.rows().row_bytes_v(); ++b) v[b] = static_cast<uint8_t>(rng());
    }
  if (RecurrentMemory* rec = m.rec()) {
    const uint32_t cell = pl->rec.cell_of(seq);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int64_t i = 0; i < kConv; ++i) rec->conv_state(1, cell)[i] = u(rng);
    for (int64_t i = 0; i < kSsm; ++i) rec->ssm_state(1, cell)[i] = u(rng);
  }
}

// Every byte of the memory: cell tables, all K/V storage, recurrent cells, tails and states.
// Equal dumps mean an operation changed nothing. used_only: rows and states of used cells only
// (what a whole restore reproduces; the bytes of empty cells are never read).
std::vector<uint8_t> dump(const SequenceMemory& m, bool used_only = false) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  if (const KvCache* kv = m.kv()) {
    const uint32_t n = kv->layout().n_cells;
    for (uint32_t s = 0; s < kv->layout().n_streams(); ++s) {
      const KvCells& c = kv->cells(s);
      put(c.pos_data(), n * sizeof(Pos));
      for (uint32_t i = 0; i < n; ++i) {
        const Pos shift = c.shift(i);
        put(&shift, sizeof shift);
      }
      put(c.seq_data(), n * sizeof(SeqSet));
      for (int layer = 0; layer < 4; ++layer) {
        if (!kv->rows().layer_has_kv(layer)) continue;
        for (uint32_t i = 0; i < n; ++i) {
          if (used_only && c.is_empty(i)) continue;
          put(kv->rows().k_data(layer, s) + i * kv->rows().row_bytes_k(), kv->rows().row_bytes_k());
          put(kv->rows().v_data(layer, s) + i * kv->rows().row_bytes_v(), kv->rows().row_bytes_v());
        }
      }
    }
  }
  if (const RecurrentMemory* rec = m.rec()) {
    for (uint32_t c = 0; c < rec->n_cells(); ++c) {
      const Pos p = rec->cell_pos(c);
      put(&p, sizeof p);
      for (SeqId s : rec->cell_seqs(c)) put(&s, sizeof s);
      if (used_only && rec->cell_seqs(c).empty()) continue;
      put(rec->conv_state(1, c), kConv * sizeof(float));
      put(rec->ssm_state(1, c), kSsm * sizeof(float));
    }
    for (SeqId s = 0; s < static_cast<SeqId>(rec->layout().n_seq_max); ++s) {
      const int32_t c = rec->seq_cell(s);
      put(&c, sizeof c);
    }
  }
  return out;
}

// A sequence's attention content: position -> (K rows, V rows) of every KV layer.
using SeqRows = std::map<Pos, std::vector<uint8_t>>;
SeqRows seq_rows(const SequenceMemory& m, SeqId seq) {
  SeqRows out;
  const KvCache& kv = *m.kv();
  const uint32_t s = kv.layout().stream_of(seq);
  const KvCells& c = kv.cells(s);
  for (uint32_t i = 0; i < c.size(); ++i) {
    if (c.is_empty(i) || !c.has_seq(i, seq)) continue;
    auto& bytes = out[c.pos(i)];
    EXPECT_TRUE(bytes.empty()) << "position " << c.pos(i) << " twice";
    for (int layer = 0; layer < 4; ++layer) {
      if (!kv.rows().layer_has_kv(layer)) continue;
      const uint8_t* k = kv.rows().k_data(layer, s) + i * kv.rows().row_bytes_k();
      const uint8_t* v = kv.rows().v_data(layer, s) + i * kv.rows().row_bytes_v();
      bytes.insert(bytes.end(), k, k + kv.rows().row_bytes_k());
      bytes.insert(bytes.end(), v, v + kv.rows().row_bytes_v());
    }
  }
  return out;
}

std::vector<uint32_t> cells_of(const SequenceMemory& m, SeqId seq) {
  const KvCells& c = m.kv()->cells(m.kv()->layout().stream_of(seq));
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < c.size(); ++i)
    if (!c.is_empty(i) && c.has_seq(i, seq)) out.push_back(i);
  return out;
}

std::vector<float> rec_state(const SequenceMemory& m, SeqId seq) {
  const RecurrentMemory& rec = *m.rec();
  const int32_t c = rec.seq_cell(seq);
  if (c < 0) return {};
  std::vector<float> out(rec.conv_state(1, c), rec.conv_state(1, c) + kConv);
  out.insert(out.end(), rec.ssm_state(1, c), rec.ssm_state(1, c) + kSsm);
  return out;
}

std::vector<uint8_t> save(const SequenceMemory& m, SeqId seq, uint32_t flags = kStateAll) {
  StateContents c;
  c.fingerprint = 0x1234;
  c.memory = memory_state_view(m, seq, flags);
  return encode_state(c);
}

void load(SequenceMemory& m, const std::vector<uint8_t>& blob, SeqId dest) {
  const StateContents c = decode_state(blob, "state");
  restore_memory(m, c.memory, dest);
}

// Recomputes length and checksum after a test edited a blob, so the structural checks behind
// the checksum get exercised.
void reseal(std::vector<uint8_t>& blob) {
  const uint64_t len = blob.size();
  std::memcpy(blob.data() + 8, &len, sizeof len);
  const uint64_t sum = XXH64(blob.data(), blob.size() - 8, 0);
  std::memcpy(blob.data() + blob.size() - 8, &sum, sizeof sum);
}

// The source used by the round-trip tests: seq 1 ends up in three separate cell ranges, seq 2
// shares seq 0's first cells, and seq 3 has holes.
void fill_source(SequenceMemory& m, std::mt19937& rng) {
  decode(m, 0, 0, 5, rng);
  decode(m, 1, 0, 4, rng);
  decode(m, 0, 5, 3, rng);
  decode(m, 3, 0, 6, rng);
  decode(m, 1, 4, 4, rng);
  decode(m, 1, 8, 2, rng);
  m.seq_rm(3, 2, 4);
  m.seq_cp(0, 2, 0, 3);
}

class StateTypes : public ::testing::TestWithParam<TypeBytes> {};

TEST_P(StateTypes, SequenceRoundTripIsByteExactIntoAFragmentedCacheAndAnotherSequence) {
  const TypeBytes t = GetParam();
  std::mt19937 rng(7);
  auto src = make_memory({.type_k = t.type, .type_v = t.type});
  fill_source(*src, rng);
  const std::vector<uint32_t> src_cells = cells_of(*src, 1);
  ASSERT_EQ(src_cells, (std::vector<uint32_t>{5, 6, 7, 8, 18, 19, 20, 21, 22, 23}));

  const std::vector<uint8_t> blob = save(*src, 1);
  // Rows are elements / block_size * block_bytes (a llama.cpp bug once copied elements * 1 for
  // q8_0 ranges, i.e. 1/32 of them... or past them).
  const StateContents parsed = decode_state(blob, "state");
  ASSERT_TRUE(parsed.memory.kv.has_value());
  const size_t rk = expected_row_bytes(t, kEmbdK), rv = expected_row_bytes(t, kEmbdV);
  ASSERT_EQ(parsed.memory.kv->k.size(), 4u);  // all four layers have KV in a dense memory
  for (size_t l = 0; l < 4; ++l) {
    EXPECT_EQ(parsed.memory.kv->k[l].total_bytes(), src_cells.size() * rk);
    EXPECT_EQ(parsed.memory.kv->v[l].total_bytes(), src_cells.size() * rv);
  }
  EXPECT_GT(blob.size(), src_cells.size() * 4 * (rk + rv));

  // Destination: other content, holes at cells 0-1 and 4-7, and seq 3's old cells 11-13 (freed
  // by the load): a different chunking than the save's 5-8, 18-23.
  auto dst = make_memory({.type_k = t.type, .type_v = t.type, .n_cells = 24});
  decode(*dst, 0, 0, 2, rng);
  decode(*dst, 2, 0, 2, rng);
  decode(*dst, 0, 2, 3, rng);
  decode(*dst, 2, 2, 4, rng);
  decode(*dst, 3, 0, 3, rng);  // the destination's old content, replaced by the load
  dst->seq_rm(0, 0, 2);
  dst->seq_rm(0, 2, 5);
  dst->seq_rm(2, 2, 3);
  const SeqRows other = seq_rows(*dst, 2);
  load(*dst, blob, 3);

  EXPECT_EQ(cells_of(*dst, 3), (std::vector<uint32_t>{0, 1, 4, 5, 6, 7, 11, 12, 13, 14}));
  EXPECT_EQ(seq_rows(*dst, 3), seq_rows(*src, 1));
  EXPECT_EQ(seq_rows(*dst, 2), other);
  EXPECT_EQ(dst->seq_pos_max(3), 9);
  EXPECT_EQ(dst->seq_pos_min(3), 0);
}

TEST_P(StateTypes, WholeRoundTripRestoresEveryCellExactly) {
  const TypeBytes t = GetParam();
  std::mt19937 rng(11);
  auto src = make_memory({.type_k = t.type, .type_v = GgmlType::F16, .hybrid = true});
  fill_source(*src, rng);
  src->kv()->seq_add(0, 6, -1, 3);  // a pending shift travels with its cell
  const std::vector<uint8_t> blob = save(*src, -1);

  auto dst = make_memory({.type_k = t.type, .type_v = GgmlType::F16, .hybrid = true});
  decode(*dst, 2, 0, 9, rng);  // content that the load replaces
  load(*dst, blob, -1);
  EXPECT_EQ(dump(*dst, true), dump(*src, true));
  EXPECT_TRUE(dst->kv()->has_shift());
}

INSTANTIATE_TEST_SUITE_P(AllKvTypes, StateTypes, ::testing::ValuesIn(kKvTypes),
                         [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

TEST(State, PerSequenceStreamsRestoreIntoAnotherStream) {
  std::mt19937 rng(3);
  auto src = make_memory({.unified = false});
  decode(*src, 2, 0, 7, rng);
  decode(*src, 2, 7, 2, rng);
  auto dst = make_memory({.unified = false});
  decode(*dst, 0, 0, 4, rng);
  const auto before = seq_rows(*dst, 0);
  load(*dst, save(*src, 2), 1);
  EXPECT_EQ(seq_rows(*dst, 1), seq_rows(*src, 2));
  EXPECT_EQ(seq_rows(*dst, 0), before);
  EXPECT_EQ(dst->kv()->cells(1).used(), 9u);
}

TEST(State, HybridSequenceRoundTripCarriesTheRecurrentState) {
  std::mt19937 rng(5);
  auto src = make_memory({.hybrid = true});
  decode(*src, 0, 0, 6, rng);
  decode(*src, 1, 0, 3, rng);
  src->seq_cp(0, 2, -1, -1);  // seq 2 shares seq 0's recurrent cell
  const std::vector<uint8_t> blob = save(*src, 2);

  auto dst = make_memory({.hybrid = true});
  decode(*dst, 1, 0, 2, rng);
  decode(*dst, 3, 0, 2, rng);
  load(*dst, blob, 1);
  EXPECT_EQ(rec_state(*dst, 1), rec_state(*src, 0));
  EXPECT_EQ(dst->rec()->seq_pos_max(1), 5);
  EXPECT_EQ(seq_rows(*dst, 1), seq_rows(*src, 0));
  EXPECT_EQ(dst->seq_pos_max(1), 5);
  EXPECT_EQ(dst->rec()->cell_seqs(dst->rec()->seq_cell(1)).size(), 1u);

  // The restored sequence continues like any other: its next token places normally.
  decode(*dst, 1, 6, 1, rng);
  EXPECT_EQ(dst->seq_pos_max(1), 6);
}

TEST(State, PartialSaveHoldsOnlyTheRecurrentPartAndKeepsTheAttentionCells) {
  std::mt19937 rng(9);
  auto m = make_memory({.hybrid = true});
  decode(*m, 0, 0, 5, rng);
  const std::vector<float> state_at_4 = rec_state(*m, 0);
  const std::vector<uint8_t> blob = save(*m, 0, kStatePartialOnly);
  EXPECT_FALSE(decode_state(blob, "state").memory.kv.has_value());
  EXPECT_LT(blob.size(), 1000u);

  decode(*m, 0, 5, 3, rng);
  const SeqRows kv_after = seq_rows(*m, 0);
  load(*m, blob, 0);
  EXPECT_EQ(rec_state(*m, 0), state_at_4);
  EXPECT_EQ(m->rec()->seq_pos_max(0), 4);
  EXPECT_EQ(seq_rows(*m, 0), kv_after);  // attention cells untouched, positions 5..7 included
  // The caller drops the attention cells past the restored position, then continues at 5.
  EXPECT_TRUE(m->seq_rm(0, 5, -1));
  EXPECT_EQ(m->seq_pos_max(0), 4);
  decode(*m, 0, 5, 1, rng);

  // Dense memory: nothing cannot be recomputed, so a partial save is empty and restores nothing.
  auto dense = make_memory({});
  decode(*dense, 0, 0, 3, rng);
  const auto before = dump(*dense);
  load(*dense, save(*dense, 0, kStatePartialOnly), 0);
  EXPECT_EQ(dump(*dense), before);
}

TEST(State, PendingShiftIsRestoredPerSequence) {
  std::mt19937 rng(1);
  auto src = make_memory({});
  decode(*src, 0, 0, 6, rng);
  src->seq_add(0, 3, -1, 10);
  auto dst = make_memory({});
  load(*dst, save(*src, 0), 2);
  const KvCells& c = dst->kv()->cells(0);
  for (uint32_t i = 0; i < 6; ++i) EXPECT_EQ(c.shift(i), i < 3 ? 0 : 10) << i;
  EXPECT_EQ(dst->seq_pos_max(2), 15);
}

TEST(State, SnapshotRestoresLikeABlobAndOwnsItsRows) {
  std::mt19937 rng(4);
  auto m = make_memory({.type_k = GgmlType::Q4_1, .type_v = GgmlType::Q5_0, .hybrid = true});
  decode(*m, 0, 0, 7, rng);
  decode(*m, 1, 0, 2, rng);
  const SeqRows rows = seq_rows(*m, 0);
  const std::vector<float> state = rec_state(*m, 0);
  MemorySnapshot snap = MemorySnapshot::capture(*m, 0);
  EXPECT_EQ(snap.row_bytes(), 7 * 3 * (expected_row_bytes(kKvTypes[5], kEmbdK) + expected_row_bytes(kKvTypes[6], kEmbdV)) +
                                  (kConv + kSsm) * sizeof(float));
  MemorySnapshot moved = std::move(snap);

  // Overwrite everything the snapshot copied, then restore into another sequence.
  m->seq_rm(0, -1, -1);
  decode(*m, 0, 0, 9, rng);
  moved.restore(*m, 3);
  EXPECT_EQ(seq_rows(*m, 3), rows);
  EXPECT_EQ(rec_state(*m, 3), state);

  // A snapshot that does not fit is refused without a change.
  auto other = make_memory({.type_k = GgmlType::Q4_1, .type_v = GgmlType::Q5_0});
  const auto before = dump(*other);
  EXPECT_THROW(moved.restore(*other, 0), Error);
  EXPECT_EQ(dump(*other), before);

  // Whole snapshots.
  MemorySnapshot whole = MemorySnapshot::capture(*m, -1);
  const auto all = dump(*m);
  m->clear();
  whole.restore(*m, -1);
  EXPECT_EQ(dump(*m), all);
}

TEST(State, CheckpointRecordsRoundTrip) {
  std::mt19937 rng(8);
  auto m = make_memory({.hybrid = true});
  std::vector<MemorySnapshot> snaps;
  std::vector<std::vector<float>> states;
  for (int i = 0; i < 3; ++i) {
    decode(*m, 0, 4 * i, 4, rng);
    snaps.push_back(MemorySnapshot::capture(*m, 0, kStatePartialOnly));
    states.push_back(rec_state(*m, 0));
  }
  StateContents c;
  c.memory = memory_state_view(*m, 0, kStateAll);
  c.has_tokens = true;
  c.tokens = {5, 6, 7};
  c.logits = {0.5f, -1.f};
  for (int i = 0; i < 3; ++i) c.checkpoints.push_back({4 * i + 3, snaps[i].image()});
  const std::vector<uint8_t> blob = encode_state(c);
  const StateContents d = decode_state(blob, "state");
  EXPECT_EQ(d.tokens, c.tokens);
  EXPECT_EQ(d.logits, c.logits);
  ASSERT_EQ(d.checkpoints.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(d.checkpoints[i].pos, 4 * i + 3);
    MemorySnapshot s = MemorySnapshot::copy_of(d.checkpoints[i].image);
    EXPECT_EQ(s.flags(), kStatePartialOnly);
    s.restore(*m, 2);
    EXPECT_EQ(rec_state(*m, 2), states[i]);
    EXPECT_EQ(m->rec()->seq_pos_max(2), 4 * i + 3);
  }
}

TEST(State, InfoDescribesWhatTheBlobHolds) {
  std::mt19937 rng(12);
  auto m = make_memory({.type_k = GgmlType::Q5_1, .type_v = GgmlType::IQ4_NL, .hybrid = true});
  fill_source(*m, rng);
  StateContents c;
  c.fingerprint = 0xfeedbeef01020304;
  c.memory = memory_state_view(*m, 1, kStateAll);
  c.has_tokens = true;
  c.tokens = {11, 22, 33};
  c.logits = {0.f, 2.5f, 1.f};
  const MemorySnapshot cp = MemorySnapshot::capture(*m, 1, kStatePartialOnly);
  c.checkpoints.push_back({9, cp.image()});
  const std::vector<uint8_t> blob = encode_state(c);
  const std::string text = describe_state(decode_state(blob, "state"), blob.size());
  c.page_tokens = 1;
  c.page_hashes = {0x1111222233334444, 0x5555666677778888};  // hashes are the index's business
  const std::vector<uint8_t> blob2 = encode_state(c);
  const std::string text2 = describe_state(decode_state(blob2, "state"), blob2.size());
  EXPECT_NE(text2.find("page chain: 2 pages of 1 tokens: 1111222233334444 5555666677778888"), std::string::npos) << text2;
  EXPECT_NE(text.find("page chain: not saved"), std::string::npos) << text;
  for (const char* line : {"version 5", "feedbeef01020304", "contents: sequence 1, flags all",
                           "K q5_1 x 64 (48 B/row), V iq4_nl x 128 (72 B/row), 3 layers [0, 2, 3]",
                           "cells: 10 in 2 range(s) s0[5, 9) s0[18, 24)", "positions: 0 .. 9",
                           "cell 1 at position 9 for {1}", "tokens: 3: 11 22 33", "argmax 1 = 2.5000",
                           "checkpoint 0 at position 9", "flags partial"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing '" << line << "' in:\n" << text;
}

TEST(State, VersionOneBlobsStillLoadAndCannotHoldPages) {
  std::mt19937 rng(13);
  auto src = make_memory({});
  fill_source(*src, rng);
  StateContents c;
  c.memory = memory_state_view(*src, 1, kStateAll);
  c.has_tokens = true;
  c.tokens.assign(10, 7);
  c.version = 1;
  const std::vector<uint8_t> v1 = encode_state(c);
  StateContents back = decode_state(v1, "state");
  EXPECT_EQ(back.version, 1u);
  EXPECT_TRUE(back.page_hashes.empty());
  auto dst = make_memory({});
  load(*dst, v1, 2);
  EXPECT_EQ(seq_rows(*dst, 2), seq_rows(*src, 1));

  // Pages exist only from version 2 on: writing them as version 1 is a bug, reading them in a
  // version 1 blob a foreign or corrupt file.
  c.page_tokens = 4;
  c.page_hashes = {1, 2};
  EXPECT_THROW(encode_state(c), std::logic_error);
  c.version = kStateVersion;
  std::vector<uint8_t> v2 = encode_state(c);
  EXPECT_EQ(decode_state(v2, "state").page_hashes, (std::vector<uint64_t>{1, 2}));
  v2[4] = 1;
  reseal(v2);
  try {
    decode_state(v2, "state");
    FAIL() << "a version 1 blob with a page chain was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected section 'PAGE'"), std::string::npos) << e.what();
  }
  // More pages than tokens.
  c.page_hashes = {1, 2, 3};
  try {
    decode_state(encode_state(c), "state");
    FAIL() << "3 pages of 4 tokens over 10 tokens were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("need the sequence's tokens"), std::string::npos) << e.what();
  }
}

// Every refusal leaves the memory byte for byte as it was.
class Refusals : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(21);
    src_ = make_memory({.type_k = GgmlType::Q8_0, .type_v = GgmlType::Q8_0});
    fill_source(*src_, rng);
    blob_ = save(*src_, 1);
    dst_ = make_memory({.type_k = GgmlType::Q8_0, .type_v = GgmlType::Q8_0, .n_cells = 24});
    decode(*dst_, 0, 0, 5, rng);
    decode(*dst_, 3, 0, 4, rng);
    dst_->seq_rm(0, 1, 3);
    before_ = dump(*dst_);
  }
  // Loading `blob` into dst (as dest) must throw an Error mentioning `needle`, and change nothing.
  void expect_refused(const std::vector<uint8_t>& blob, SeqId dest, const std::string& needle,
                      SequenceMemory* target = nullptr) {
    SequenceMemory& m = target ? *target : *dst_;
    const auto before = target ? dump(m) : before_;
    try {
      load(m, blob, dest);
      ADD_FAILURE() << "accepted; expected an error about '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(dump(m), before) << "memory changed by a refused load (" << needle << ")";
  }
  std::unique_ptr<SequenceMemory> src_, dst_;
  std::vector<uint8_t> blob_;
  std::vector<uint8_t> before_;
};

TEST_F(Refusals, TruncatedBlobs) {
  for (size_t cut : {size_t{0}, size_t{3}, size_t{20}, size_t{43}, blob_.size() / 2, blob_.size() - 9,
                     blob_.size() - 1}) {
    std::vector<uint8_t> b(blob_.begin(), blob_.begin() + static_cast<long>(cut));
    expect_refused(b, 2, "truncated");
  }
}

TEST_F(Refusals, CorruptBytes) {
  for (size_t at : {size_t{30}, size_t{60}, size_t{100}, blob_.size() / 2, blob_.size() - 20, blob_.size() - 3}) {
    std::vector<uint8_t> b = blob_;
    b[at] ^= 0x40;
    expect_refused(b, 2, "checksum");
  }
  std::vector<uint8_t> b = blob_;
  b.push_back(0);
  expect_refused(b, 2, "trailing");
  b = blob_;
  b[0] = 'X';
  expect_refused(b, 2, "not an agentkv state");
  b = blob_;
  b[4] = 6;
  reseal(b);
  expect_refused(b, 2, "format version 6");
}

TEST_F(Refusals, StructuralCorruptionBehindAValidChecksum) {
  // KV payload: header (32) + section count (4) + tag (4) + length (8) = offset 48; K row bytes
  // at +24. A writer that stored elements instead of blocks would write 64 here for q8_0.
  std::vector<uint8_t> b = blob_;
  const uint64_t wrong_row = 64;
  std::memcpy(b.data() + 48 + 24, &wrong_row, sizeof wrong_row);
  reseal(b);
  expect_refused(b, 2, "row sizes");

  b = blob_;
  const uint32_t bad_type = 99;
  std::memcpy(b.data() + 48, &bad_type, sizeof bad_type);
  reseal(b);
  expect_refused(b, 2, "unknown ggml type");

  b = blob_;
  const uint32_t flags = 0x10;
  std::memcpy(b.data() + 24, &flags, sizeof flags);
  reseal(b);
  expect_refused(b, 2, "unknown flags");

  // Cell count (after the layout: 48 + 56 bytes + 4 layer count + 4 layers x 4).
  b = blob_;
  const uint32_t huge = 0x40000000;
  std::memcpy(b.data() + 48 + 56 + 4 + 16, &huge, sizeof huge);
  reseal(b);
  expect_refused(b, 2, "corrupt");

  // The section length points past the blob.
  b = blob_;
  const uint64_t long_section = b.size();
  std::memcpy(b.data() + 40, &long_section, sizeof long_section);
  reseal(b);
  expect_refused(b, 2, "left");
}

// Random damage behind a valid checksum (what a buggy writer could produce): every outcome is a
// clean accept or an Error, and a refusal changes nothing.
TEST_F(Refusals, RandomStructuralDamage) {
  std::mt19937 rng(99);
  const std::vector<uint8_t> whole = save(*src_, -1);
  int refused = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const bool use_whole = iter % 2 == 1;
    std::vector<uint8_t> b = use_whole ? whole : blob_;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      // Mostly the metadata before the rows, where a damaged field changes the structure.
      const size_t span = std::min<size_t>(b.size() - 8 - 32, 400);
      const size_t at = 32 + rng() % span;
      b[at] = static_cast<uint8_t>(rng());
    }
    reseal(b);
    auto target = make_memory({.type_k = GgmlType::Q8_0, .type_v = GgmlType::Q8_0});
    std::mt19937 fill(5);
    decode(*target, 0, 0, 4, fill);
    const auto before = dump(*target);
    try {
      load(*target, b, use_whole ? -1 : 2);
    } catch (const Error&) {
      ++refused;
      EXPECT_EQ(dump(*target), before) << "iteration " << iter;
    }
  }
  EXPECT_GT(refused, 150);
}

TEST_F(Refusals, MismatchedMemories) {
  std::mt19937 rng(2);
  auto f16 = make_memory({.n_cells = 24});
  decode(*f16, 0, 0, 3, rng);
  expect_refused(blob_, 0, "KV types", f16.get());

  auto narrow = make_memory({.type_k = GgmlType::Q8_0, .type_v = GgmlType::Q8_0, .n_embd_k = 32});
  expect_refused(blob_, 0, "KV widths", narrow.get());

  auto hybrid = make_memory({.type_k = GgmlType::Q8_0, .type_v = GgmlType::Q8_0, .hybrid = true});
  decode(*hybrid, 1, 0, 2, rng);
  expect_refused(blob_, 0, "recurrent part", hybrid.get());
  expect_refused(save(*hybrid, 1), 0, "recurrent part");

  // Whole blob from a unified cache into per-sequence streams.
  auto streams = make_memory({.type_k = GgmlType::Q8_0, .type_v = GgmlType::Q8_0, .unified = false});
  expect_refused(save(*src_, -1), -1, "stream", streams.get());
  // Whole blob whose cells do not exist in a smaller cache (src uses cells up to 23).
  auto small = make_memory({.type_k = GgmlType::Q8_0, .type_v = GgmlType::Q8_0, .n_cells = 20});
  expect_refused(save(*src_, -1), -1, "does not exist", small.get());
}

TEST_F(Refusals, WrongKindOrNoRoom) {
  expect_refused(blob_, -1, "destination sequence");
  expect_refused(save(*src_, -1), 1, "whole memory");
  expect_refused(blob_, 7, "sequence");  // dest outside n_seq_max

  // dst has 24 cells with 7 used; 11 more leave 6 free cells for a blob of 10.
  std::mt19937 rng(6);
  decode(*dst_, 2, 0, 11, rng);
  before_ = dump(*dst_);
  expect_refused(blob_, 1, "only 6 are free");
  // Into seq 2 its own 11 cells count as free: fits.
  load(*dst_, blob_, 2);
  EXPECT_EQ(seq_rows(*dst_, 2), seq_rows(*src_, 1));
}

}  // namespace
}  // namespace agentkv::memory
