// Fake prefix: a sequence reports positions [0, L) without computing them. Checked: the cell
// table and positions of every memory type, zero K/V rows (also in cells that held real rows
// before), zero recurrent state, lockstep of a hybrid's two halves, refusals that change nothing,
// and on the fixture models that decoding after it attends over L + N keys like a real prefix
// (same count as after decoding L real tokens) while the call itself stays cheap.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fake_prefix.h"
#include "engine/context_impl.h"
#include "memory/kv_cache.h"
#include "memory/recurrent.h"
#include "memory/sequence_memory.h"
#include "model/model.h"
#include "fixtures.h"

namespace agentkv {
namespace {

using memory::KvCache;
using memory::KvLayout;
using memory::Pos;
using memory::UBatch;

const std::string kModels = std::string(AGENTKV_FIXTURES_DIR) + "/models/";

KvLayout small_layout(GgmlType t, uint32_t cells, uint32_t n_seq = 2, bool unified = true) {
  KvLayout l;
  l.layer_has_kv = {true, true};
  l.n_embd_k = l.n_embd_v = 64;
  l.type_k = l.type_v = t;
  l.n_cells = cells;
  l.n_seq_max = n_seq;
  l.unified = unified;
  return l;
}

bool rows_all_zero(const KvCache& kv, uint32_t stream, uint32_t cell) {
  for (int layer = 0; layer < 2; ++layer) {
    const uint8_t* k = kv.rows().k_data(layer, stream) + cell * kv.rows().row_bytes_k();
    const uint8_t* v = kv.rows().v_data(layer, stream) + cell * kv.rows().row_bytes_v();
    if (std::any_of(k, k + kv.rows().row_bytes_k(), [](uint8_t b) { return b != 0; })) return false;
    if (std::any_of(v, v + kv.rows().row_bytes_v(), [](uint8_t b) { return b != 0; })) return false;
  }
  return true;
}

void fill_rows(KvCache& kv, uint32_t stream, uint32_t cell, uint8_t byte) {
  for (int layer = 0; layer < 2; ++layer) {
    std::memset(kv.rows().k_data(layer, stream) + cell * kv.rows().row_bytes_k(), byte, kv.rows().row_bytes_k());
    std::memset(kv.rows().v_data(layer, stream) + cell * kv.rows().row_bytes_v(), byte, kv.rows().row_bytes_v());
  }
}

TEST(FakePrefixKv, FreshCacheGetsPositionsOnly) {
  KvCache kv(small_layout(GgmlType::Q8_0, 256));
  kv.seq_fake_prefix(1, 100);
  EXPECT_EQ(kv.seq_pos_min(1), 0);
  EXPECT_EQ(kv.seq_pos_max(1), 99);
  EXPECT_EQ(kv.seq_pos_max(0), -1);
  const auto& c = kv.cells(0);
  EXPECT_EQ(c.used(), 100u);
  EXPECT_EQ(c.used_max_p1(), 100u);
  EXPECT_EQ(c.first_free(), 100u);
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(c.pos(i), Pos(i));
    EXPECT_EQ(c.seqs(i).count(), 1u);
    EXPECT_TRUE(c.has_seq(i, 1));
    EXPECT_EQ(c.shift(i), 0);
    EXPECT_TRUE(c.known_zero(i));
    EXPECT_TRUE(rows_all_zero(kv, 0, i));
  }
  // The mask shows every fake cell to the next token of the sequence: attention reads them.
  UBatch ub;
  ub.add(100, {1});
  auto placement = kv.find_slot(ub);
  ASSERT_TRUE(placement);
  EXPECT_EQ((*placement)[0].cell, 100u);
  kv.apply(ub, *placement);
  EXPECT_FALSE(c.known_zero(100));  // a real token's rows are about to be written
  std::vector<float> mask(kv.n_kv(0));
  kv.fill_mask(ub, {0}, 0, mask.data(), static_cast<int64_t>(mask.size()));
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 0.0f), 101);
}

TEST(FakePrefixKv, ReusedCellsAreZeroed) {
  KvCache kv(small_layout(GgmlType::F16, 64));
  // Sequence 0 fills cells 0..39 with real (non-zero) rows, then gives back 10..29.
  UBatch ub;
  for (int i = 0; i < 40; ++i) ub.add(i, {0});
  kv.apply(ub, *kv.find_slot(ub));
  for (uint32_t i = 0; i < 40; ++i) fill_rows(kv, 0, i, 0x5a);
  kv.seq_rm(0, 10, 30);
  // Sequence 1's 30 positions take the 20 holes and 10 fresh cells (40..49).
  kv.seq_fake_prefix(1, 30);
  const auto& c = kv.cells(0);
  for (uint32_t i = 10; i < 30; ++i) EXPECT_EQ(c.pos(i), Pos(i - 10));
  for (uint32_t i = 40; i < 50; ++i) EXPECT_EQ(c.pos(i), Pos(i - 20));
  for (uint32_t i : {10u, 29u, 40u, 49u}) {
    EXPECT_TRUE(rows_all_zero(kv, 0, i)) << i;
    EXPECT_TRUE(c.known_zero(i));
  }
  // Sequence 0's rows are untouched.
  EXPECT_FALSE(rows_all_zero(kv, 0, 9));
  EXPECT_FALSE(rows_all_zero(kv, 0, 30));
  // Fake cells given back and taken again by another fake prefix need no zeroing (still known
  // zero); clearing with zero_data marks everything zero again.
  kv.seq_rm(1, -1, -1);
  kv.seq_fake_prefix(0 + 1, 5);
  EXPECT_TRUE(c.known_zero(10));
  kv.clear(true);
  for (uint32_t i = 0; i < 64; ++i) EXPECT_TRUE(c.known_zero(i));
}

TEST(FakePrefixKv, RefusalsChangeNothing) {
  KvCache kv(small_layout(GgmlType::F16, 16, 2, /*unified=*/false));
  UBatch ub;
  ub.add(0, {0});
  kv.apply(ub, *kv.find_slot(ub));
  EXPECT_THROW(kv.seq_fake_prefix(0, 4), Error);   // not empty
  EXPECT_THROW(kv.seq_fake_prefix(1, 17), Error);  // more positions than cells in its stream
  EXPECT_THROW(kv.seq_fake_prefix(1, -1), Error);
  EXPECT_THROW(kv.seq_fake_prefix(2, 1), Error);   // no such sequence
  EXPECT_EQ(kv.cells(1).used(), 0u);
  EXPECT_EQ(kv.seq_pos_max(0), 0);
  kv.seq_fake_prefix(1, 0);  // nothing to do
  EXPECT_EQ(kv.seq_pos_max(1), -1);
  kv.seq_fake_prefix(1, 16);  // its own stream: all 16 cells
  EXPECT_EQ(kv.seq_pos_max(1), 15);
  EXPECT_EQ(kv.cells(1).used(), 16u);
}

TEST(FakePrefixKv, LongPrefixIsMetadataOnly) {
  // 32768 positions in a fresh cache: cell table writes only. Generous bound (CI machines are
  // noisy); agentkv bench --fake-prefix-op measures it properly.
  KvCache kv(small_layout(GgmlType::F16, 40000));
  const auto t0 = std::chrono::steady_clock::now();
  kv.seq_fake_prefix(0, 32768);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(kv.seq_pos_max(0), 32767);
  EXPECT_LT(ms, 20.0);
  std::printf("seq_fake_prefix(32768): %.3f ms\n", ms);
}

TEST(FakePrefixRecurrent, ZeroStateAtTheLastPosition) {
  memory::RecurrentLayout l;
  l.layer_recurrent = {true, false, true};
  l.n_conv = 6;
  l.n_ssm = 8;
  l.n_seq_max = 2;
  memory::RecurrentMemory rec(l);
  // Sequence 0 takes a cell, dirties its state, and is removed: the cell is reused below.
  UBatch ub;
  ub.add(0, {0});
  auto p = rec.find_slot(ub);
  rec.apply(ub, *p);
  const uint32_t dirty = p->cell_of(0);
  for (int layer : {0, 2}) {
    std::fill_n(rec.conv_state(layer, dirty), 6, 3.0f);
    std::fill_n(rec.ssm_state(layer, dirty), 8, 3.0f);
  }
  ASSERT_TRUE(rec.seq_rm(0, -1, -1));
  rec.seq_fake_prefix(1, 50);
  EXPECT_EQ(rec.seq_pos_min(1), 49);
  EXPECT_EQ(rec.seq_pos_max(1), 49);
  const int32_t cell = rec.seq_cell(1);
  ASSERT_GE(cell, 0);
  for (int layer : {0, 2}) {
    for (int i = 0; i < 6; ++i) EXPECT_EQ(rec.conv_state(layer, cell)[i], 0.0f);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(rec.ssm_state(layer, cell)[i], 0.0f);
  }
  EXPECT_THROW(rec.seq_fake_prefix(1, 5), Error);  // not empty
  EXPECT_EQ(rec.seq_pos_max(1), 49);
  // The next token continues the sequence in the same cell (no copy, no re-zeroing).
  UBatch next;
  next.add(50, {1});
  auto q = rec.find_slot(next);
  EXPECT_EQ(q->cell_of(1), static_cast<uint32_t>(cell));
}

// ---------------------------------------------------------------------------------------------
// On the fixture models, through the context
// ---------------------------------------------------------------------------------------------

ContextParams params() {
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_threads = 1;
  return cp;
}

std::vector<Token> some_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<Token> d(0, 3000);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// Decodes N tokens after a prefix of L positions (fake or real); returns the stats of those N.
DecodeStats decode_after_prefix(Context& ctx, Pos L, int N, bool fake) {
  const auto prefix = some_tokens(L, 1);
  if (fake) {
    seq_fake_prefix(ctx, 0, L);
  } else {
    Batch b;
    b.add_sequence(prefix.data(), prefix.size(), 0, 0, true);
    EXPECT_EQ(ctx.decode(b), 0);
  }
  ctx.reset_stats();
  const auto toks = some_tokens(N, 2);
  Batch b;
  b.add_sequence(toks.data(), 3, L, 0, true);  // a batch of 3, then one by one
  EXPECT_EQ(ctx.decode(b), 0);
  for (int i = 3; i < N; ++i) {
    b.clear();
    b.add(toks[static_cast<size_t>(i)], L + i, {0}, true);
    EXPECT_EQ(ctx.decode(b), 0);
  }
  EXPECT_EQ(ctx.memory().seq_pos_max(0), L + N - 1);
  return ctx.stats();
}

void check_model(const std::string& file) {
  auto model = Model::load(kModels + file);
  const Pos L = 200;
  const int N = 7;
  Context fake_ctx(*model, params());
  const DecodeStats fake = decode_after_prefix(fake_ctx, L, N, true);
  EXPECT_EQ(fake.n_tokens, N);
  EXPECT_EQ(fake.last_keys_attended, L + N);
  int64_t sum = 0;
  for (int i = 1; i <= N; ++i) sum += L + i;
  EXPECT_EQ(fake.n_keys_attended, sum);
  // Same attention work as a real prefix of L tokens.
  Context real_ctx(*model, params());
  const DecodeStats real = decode_after_prefix(real_ctx, L, N, false);
  EXPECT_EQ(real.n_keys_attended, fake.n_keys_attended);
  EXPECT_EQ(real.last_keys_attended, fake.last_keys_attended);
  // Logits are finite (meaningless by design, but computed).
  const float* l = fake_ctx.last_logits();
  for (int64_t i = 0; i < model->n_vocab(); ++i) ASSERT_TRUE(std::isfinite(l[i]));
}

TEST(FakePrefixModel, DenseQwen3) {
  AGENTKV_NEEDS_FIXTURES();
  check_model("qwen3-micro.gguf");
}

TEST(FakePrefixModel, HybridQwen35MoeKeepsBothHalvesInLockstep) {
  AGENTKV_NEEDS_FIXTURES();
  check_model("qwen35moe-micro.gguf");
  auto model = Model::load(kModels + "qwen35moe-micro.gguf");
  ContextParams cp = params();
  cp.n_seq_max = 2;
  Context ctx(*model, cp);
  auto& mem = sequence_memory(ctx);
  seq_fake_prefix(ctx, 1, 64);
  EXPECT_EQ(mem.kv()->seq_pos_min(1), 0);
  EXPECT_EQ(mem.kv()->seq_pos_max(1), 63);
  EXPECT_EQ(mem.rec()->seq_pos_max(1), 63);
  EXPECT_EQ(mem.seq_pos_max(1), 63);
  EXPECT_EQ(mem.seq_pos_min(1), 63);  // hybrid: the range both halves vouch for
  // Refusals leave both halves as they were: not empty; more positions than free cells.
  EXPECT_THROW(seq_fake_prefix(ctx, 1, 4), Error);
  EXPECT_THROW(seq_fake_prefix(ctx, 0, 512 - 64 + 1), Error);
  EXPECT_EQ(mem.kv()->seq_pos_max(0), -1);
  EXPECT_EQ(mem.rec()->seq_pos_max(0), -1);
  EXPECT_EQ(mem.kv()->cells(0).used(), 64u);
}

}  // namespace
}  // namespace agentkv
