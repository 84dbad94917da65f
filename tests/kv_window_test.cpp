// Windowed KV residency (KvLayout::hot_cells): at most hot_cells cells keep hot rows, older
// positions move to the tail, attention reads both (merged by log-sum-exp when the tail has its own
// type). Checked (1) at the cache level by random operation sequences against an all-hot cache
// with the same operations — every row read back equal (exact tail) or within the tail type's
// rounding, the attention view listing the same keys, state images and page records equal — and
// (2) at the model level: the residency gate, logits of a windowed context against an all-hot one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "engine/context_impl.h"
#include "kernels/quant.h"
#include "memory/attention_view.h"
#include "memory/kv_cache.h"
#include "memory/kv_state.h"
#include "memory/page_record.h"
#include "model/model.h"
#include "fixture_models.h"

namespace agentkv {
namespace {

using memory::KvCache;
using memory::KvLayout;
using memory::Pos;
using memory::SeqId;
using memory::UBatch;

constexpr int64_t kWidth = 64;
constexpr uint32_t kCells = 96, kHot = 24, kSeqs = 3;

KvLayout layout(uint32_t hot, GgmlType tail, const std::string& tail_dir = "") {
  KvLayout l;
  l.tail_dir = tail_dir;
  l.layer_has_kv = {true, false, true};
  l.n_embd_k = l.n_embd_v = kWidth;
  l.n_cells = kCells;
  l.n_seq_max = kSeqs;
  l.hot_cells = hot;
  l.tail_type_k = l.tail_type_v = tail;
  return l;
}

std::vector<float> row_floats(const KvCache& kv, int layer, uint32_t cell, bool k) {
  std::vector<uint8_t> bytes(k ? kv.rows().row_bytes_k() : kv.rows().row_bytes_v());
  if (k) kv.rows().read_k(layer, 0, cell, bytes.data());
  else kv.rows().read_v(layer, 0, cell, bytes.data());
  std::vector<float> out(kWidth);
  dequantize_row(GgmlType::F16, bytes.data(), out.data(), kWidth);
  return out;
}

// The windowed cache agrees with the all-hot one: same cells, rows equal (exact tail) or within
// the tail type's rounding of the row's largest value, at most hot_cells hot, newest rows hot.
void check_same(const KvCache& ref, const KvCache& win, GgmlType tail, const std::vector<uint32_t>& last_placed,
                const std::string& where) {
  const auto& rc = ref.cells(0);
  const auto& wc = win.cells(0);
  const memory::KvResidency r = win.window().residency();
  ASSERT_LE(r.hot_used, kHot) << where;
  for (uint32_t c : last_placed)
    if (!wc.is_empty(c)) {
      ASSERT_TRUE(win.window().is_hot(0, c)) << where << ": cell " << c << " just written is not hot";
    }
  uint64_t used = 0;
  for (uint32_t c = 0; c < kCells; ++c) {
    ASSERT_EQ(rc.pos(c), wc.pos(c)) << where << " cell " << c;
    ASSERT_EQ(rc.seqs(c), wc.seqs(c)) << where << " cell " << c;
    if (rc.is_empty(c)) continue;
    ++used;
    for (int layer : {0, 2})
      for (bool k : {true, false}) {
        const std::vector<float> a = row_floats(ref, layer, c, k), b = row_floats(win, layer, c, k);
        float amax = 0.f;
        for (float x : a) amax = std::max(amax, std::fabs(x));
        // q8_0: half a step of the block's scale amax/127, plus f16 rounding of the scale and the result.
        const float tol = win.window().is_hot(0, c) || tail == GgmlType::F16 ? 0.f : amax / 127.f * 0.5f + amax * 2e-3f;
        for (int64_t i = 0; i < kWidth; ++i)
          ASSERT_LE(std::fabs(a[i] - b[i]), tol) << where << " cell " << c << " layer " << layer << (k ? " K" : " V")
                                                 << " element " << i << (win.window().is_hot(0, c) ? " (hot)" : " (tail)");
      }
  }
  ASSERT_EQ(r.hot_used + r.tail_used, used) << where;
}

// Attention views list the same keys; a split view (tail type differs) lists the tail keys first.
void check_views(const KvCache& ref, const KvCache& win, GgmlType tail, const std::string& where) {
  UBatch ub;
  for (SeqId s = 0; s < static_cast<SeqId>(kSeqs); ++s) {
    const Pos p = ref.seq_pos_max(s);
    if (p >= 0) ub.add(p, {s});
  }
  if (ub.size() == 0) return;
  const auto a = memory::attention_groups(ref, ub);
  const auto b = memory::attention_groups(win, ub);
  ASSERT_EQ(a.size(), b.size()) << where;
  for (size_t g = 0; g < a.size(); ++g) {
    if (tail == GgmlType::F16) {
      ASSERT_EQ(b[g].n_tail, 0u) << where;
      ASSERT_EQ(a[g].rows, b[g].rows) << where;
      ASSERT_EQ(a[g].mask, b[g].mask) << where;
      continue;
    }
    std::vector<int32_t> sorted_a = a[g].rows, sorted_b = b[g].rows;
    std::sort(sorted_a.begin(), sorted_a.end());
    std::sort(sorted_b.begin(), sorted_b.end());
    ASSERT_EQ(sorted_a, sorted_b) << where;
    for (size_t j = 0; j < b[g].rows.size(); ++j) {
      const auto cell = static_cast<uint32_t>(b[g].rows[j]);
      ASSERT_EQ(win.window().is_hot(0, cell), j >= b[g].n_tail) << where << ": key " << j;
      if (j > 0 && j != b[g].n_tail) {  // each part by position
        ASSERT_LT(win.cells(0).pos(static_cast<uint32_t>(b[g].rows[j - 1])), win.cells(0).pos(cell)) << where;
      }
    }
    std::vector<const uint8_t*> k, v;
    memory::layer_key_rows(win, b[g], 2, k, v);
    for (size_t j = b[g].n_tail; j < k.size(); ++j)
      ASSERT_EQ(k[j], win.rows().k_row(2, 0, static_cast<uint32_t>(b[g].rows[j]))) << where;
    for (size_t j = 0; j < b[g].n_tail; ++j)
      ASSERT_EQ(k[j], win.rows().tail_k_row(2, 0, static_cast<uint32_t>(b[g].rows[j]))) << where;
  }
}

void random_operations(GgmlType tail, int seeds, int ops, const std::string& tail_dir = "") {
  for (int seed = 0; seed < seeds; ++seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    KvCache ref(layout(0, GgmlType::F16)), win(layout(kHot, tail, tail_dir));
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    std::vector<uint8_t> row(ref.rows().row_bytes_k());
    std::vector<float> values(kWidth);
    std::vector<uint32_t> last_placed;
    for (int op = 0; op < ops; ++op) {
      const std::string where = "seed " + std::to_string(seed) + " op " + std::to_string(op);
      const SeqId s = pick(static_cast<int>(kSeqs));
      const int kind = pick(10);
      if (std::getenv("KVW_DEBUG")) std::printf("op %d kind %d seq %d\n", op, kind, s);
      if (kind < 5) {  // append 1..8 tokens to s, rows random
        UBatch ub;
        const Pos p0 = ref.seq_pos_max(s) + 1;
        const int n = 1 + pick(8);
        for (int i = 0; i < n; ++i) ub.add(p0 + i, {s});
        const auto pa = ref.find_slot(ub), pb = win.find_slot(ub);
        ASSERT_EQ(pa.has_value(), pb.has_value()) << where;
        if (!pa) continue;
        ref.apply(ub, *pa);
        win.apply(ub, *pb);
        last_placed.clear();
        for (size_t t = 0; t < ub.size(); ++t) {
          ASSERT_EQ((*pa)[t].cell, (*pb)[t].cell) << where;
          const uint32_t c = (*pa)[t].cell;
          last_placed.push_back(c);
          for (int layer : {0, 2})
            for (bool k : {true, false}) {
              const float scale = std::ldexp(1.0f, pick(6) - 2);
              for (float& x : values) x = scale * (static_cast<float>(rng() % 20001) / 10000.f - 1.f);
              quantize_row(GgmlType::F16, values.data(), row.data(), kWidth);
              std::memcpy(k ? ref.rows().k_row(layer, 0, c) : ref.rows().v_row(layer, 0, c), row.data(), row.size());
              std::memcpy(k ? win.rows().k_row(layer, 0, c) : win.rows().v_row(layer, 0, c), row.data(), row.size());
            }
        }
      } else if (kind == 5) {  // drop a suffix or a middle range
        const Pos hi = ref.seq_pos_max(s);
        if (hi < 0) continue;
        const Pos p0 = pick(static_cast<int>(hi) + 1);
        const Pos p1 = pick(2) ? -1 : p0 + 1 + pick(4);
        ref.seq_rm(s, p0, p1);
        win.seq_rm(s, p0, p1);
      } else if (kind == 6) {  // another sequence joins s's cells
        const SeqId d = pick(static_cast<int>(kSeqs));
        if (d == s) continue;
        ref.seq_rm(d, -1, -1);
        win.seq_rm(d, -1, -1);
        ref.seq_cp(s, d, -1, -1);
        win.seq_cp(s, d, -1, -1);
      } else if (kind == 7) {  // copy-on-write primitive: one used cell's rows over another's
        std::vector<uint32_t> used;
        for (uint32_t c = 0; c < kCells; ++c)
          if (!ref.cells(0).is_empty(c)) used.push_back(c);
        if (used.size() < 2) continue;
        const uint32_t a = used[static_cast<size_t>(pick(static_cast<int>(used.size())))];
        const uint32_t b = used[static_cast<size_t>(pick(static_cast<int>(used.size())))];
        ref.rows().copy_cell_rows(0, a, b);
        win.rows().copy_cell_rows(0, a, b);
        // The windowed copy from a tail cell carries the tail's rounding: make the reference the same.
        if (!win.window().is_hot(0, b) || !win.window().is_hot(0, a))
          for (int layer : {0, 2}) {
            win.rows().read_k(layer, 0, b, row.data());
            std::memcpy(ref.rows().k_row(layer, 0, b), row.data(), row.size());
            win.rows().read_v(layer, 0, b, row.data());
            std::memcpy(ref.rows().v_row(layer, 0, b), row.data(), row.size());
          }
      } else if (kind == 8) {  // fake prefix on an empty sequence
        if (ref.seq_pos_max(s) >= 0) continue;
        const size_t free_cells = kCells - ref.usage().cells_used;
        const Pos n = pick(static_cast<int>(std::min<size_t>(free_cells, 30)) + 1);
        ref.seq_fake_prefix(s, n);
        win.seq_fake_prefix(s, n);
      } else {  // state image and page record of a sequence: the same bytes
        if (ref.seq_pos_max(s) < 0 || tail != GgmlType::F16) continue;
        const memory::KvImage ia = memory::kv_state_view(ref, s), ib = memory::kv_state_view(win, s);
        ASSERT_EQ(ia.cells.size(), ib.cells.size()) << where;
        for (size_t l = 0; l < ia.k.size(); ++l) {
          memory::RowCursor ka(ia.k[l], ref.rows().row_bytes_k()), kb(ib.k[l], win.rows().row_bytes_k());
          for (size_t i = 0; i < ia.cells.size(); ++i)
            ASSERT_EQ(std::memcmp(ka.next(), kb.next(), ref.rows().row_bytes_k()), 0) << where << " state row " << i;
        }
        std::vector<int32_t> tokens;
        std::vector<uint32_t> cells;
        for (uint32_t c = 0; c < kCells; ++c)
          if (ref.cells(0).has_seq(c, s)) tokens.push_back(static_cast<int32_t>(c)), cells.push_back(c);
        ASSERT_EQ(memory::encode_page(ref, 1, 0, tokens, cells), memory::encode_page(win, 1, 0, tokens, cells)) << where;
      }
      check_same(ref, win, tail, last_placed, where);
      check_views(ref, win, tail, where);
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_GT(win.window().residency().demotions, 0u) << "seed " << seed << ": nothing moved to the tail";
  }
}

TEST(KvWindow, RandomOperationsWithAnExactTailAgreeWithAllHot) { random_operations(GgmlType::F16, 20, 500); }
TEST(KvWindow, RandomOperationsWithAQ8TailStayWithinItsRounding) { random_operations(GgmlType::Q8_0, 10, 500); }

// The tail in files mapped from a folder (a context beyond RAM): the same agreement, and the
// files are gone from the folder from the start (unlinked once mapped).
TEST(KvWindow, ATailInMappedFilesAgreesAndLeavesNoFile) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("kv_window_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  random_operations(GgmlType::F16, 3, 300, dir.string());
  random_operations(GgmlType::Q8_0, 3, 300, dir.string());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
  EXPECT_THROW(KvCache(layout(kHot, GgmlType::F16, (dir / "missing").string())), Error);
}

// Appends n tokens to seq (after its newest position), a micro-batch of `step` at a time.
void append(KvCache& kv, SeqId seq, int n, int step = 4) {
  for (int done = 0; done < n; done += step) {
    UBatch ub;
    const Pos p0 = kv.seq_pos_max(seq) + 1;
    for (int i = 0; i < std::min(step, n - done); ++i) ub.add(p0 + i, {seq});
    const auto placement = kv.find_slot(ub);
    ASSERT_TRUE(placement);
    kv.apply(ub, *placement);
  }
}

// Cells of seq at positions >= from that are hot / all of them.
std::pair<int, int> hot_from(const KvCache& kv, SeqId seq, Pos from) {
  std::pair<int, int> out{0, 0};
  for (uint32_t c = 0; c < kCells; ++c)
    if (kv.cells(0).has_seq(c, seq) && kv.cells(0).pos(c) >= from) out.first += kv.window().is_hot(0, c), ++out.second;
  return out;
}

TEST(KvWindow, EachSequenceKeepsItsNewestRowsHot) {
  // A short sequence beside a long one: the window gives up the cells furthest behind their own
  // sequence's newest position, not the lowest positions (which would be all of the short one's).
  KvCache kv(layout(kHot, GgmlType::F16));
  append(kv, 0, 60);
  append(kv, 1, 8);
  append(kv, 0, 4);
  EXPECT_EQ(hot_from(kv, 1, 0), std::make_pair(8, 8));
  EXPECT_EQ(hot_from(kv, 0, 64 - 12), std::make_pair(12, 12));
  EXPECT_EQ(kv.window().residency().hot_used, kHot);
}

TEST(KvWindow, TheBackgroundSequencesCellsLeaveTheWindowFirst) {
  // The prefix index's holder keeps pages for later (set_window_background): cells only it holds
  // go before any of a sequence that is being read, however recent their positions look.
  for (bool background : {false, true}) {
    KvCache kv(layout(kHot, GgmlType::F16));
    if (background) kv.window().set_background(2);
    append(kv, 2, 8);
    append(kv, 0, 20);
    const auto seq0 = hot_from(kv, 0, 0), holder = hot_from(kv, 2, 0);
    if (background) {
      EXPECT_EQ(seq0, std::make_pair(20, 20));
      EXPECT_EQ(holder, std::make_pair(4, 8));
    } else {  // two sequences like any others: each gives up its oldest
      EXPECT_LT(seq0.first, 20);
      EXPECT_GT(holder.first, 4);
    }
  }
  KvCache kv(layout(kHot, GgmlType::F16));
  EXPECT_THROW(kv.window().set_background(static_cast<SeqId>(kSeqs)), Error);
}

TEST(KvWindow, RefusesABatchLargerThanTheHotRows) {
  KvCache win(layout(kHot, GgmlType::F16));
  UBatch ub;
  for (Pos p = 0; p < static_cast<Pos>(kHot) + 1; ++p) ub.add(p, {0});
  EXPECT_FALSE(win.find_slot(ub).has_value());
  EXPECT_THROW(win.rows().k_data(0, 0), std::logic_error);
}

// ---- the residency gate on the fixture models ----

const Model& model(const std::string& name) { return testing_support::fixture_model(name); }

// Logits of a 600-token prompt (its last 8 tokens as outputs) and 8 greedy decode steps.
std::vector<std::vector<float>> run_logits(const Model& m, uint32_t hot, GgmlType tail, memory::KvResidency* res = nullptr,
                                           GgmlType hot_type = GgmlType::F16) {
  ContextParams cp;
  cp.kv.type_k = cp.kv.type_v = hot_type;
  cp.n_ctx = 1024;
  cp.n_ubatch = 64;
  cp.n_threads = 2;
  cp.kv.hot_cells = hot;
  cp.kv.tail_type_k = cp.kv.tail_type_v = tail;
  Context ctx(m, cp);
  std::vector<Token> prompt;
  for (int i = 0; i < 600; ++i) prompt.push_back(static_cast<Token>((i * 7919 + 13) % 1000 + 100));
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<Pos>(i), {0}, i + 8 >= prompt.size());
  EXPECT_EQ(ctx.decode(b), 0);
  std::vector<std::vector<float>> out;
  const int n_vocab = static_cast<int>(m.n_vocab());
  for (int i = 0; i < ctx.n_outputs(); ++i) out.emplace_back(ctx.logits(i), ctx.logits(i) + n_vocab);
  for (int step = 0; step < 8; ++step) {
    const std::vector<float>& last = out.back();
    const auto next = static_cast<Token>(std::max_element(last.begin(), last.end()) - last.begin());
    Batch d;
    d.add(next, static_cast<Pos>(prompt.size() + static_cast<size_t>(step)), {0}, true);
    EXPECT_EQ(ctx.decode(d), 0);
    out.emplace_back(ctx.last_logits(), ctx.last_logits() + n_vocab);
  }
  if (res) *res = sequence_memory(ctx).kv()->window().residency();
  return out;
}

std::vector<float> log_softmax(const std::vector<float>& x) {
  const float mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v - mx));
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i] - mx - std::log(sum));
  return out;
}

struct Gate {
  bool top1_equal = true;
  float max_logprob_diff = 0.f;
};

Gate compare(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  Gate g;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::max_element(a[i].begin(), a[i].end()) - a[i].begin() != std::max_element(b[i].begin(), b[i].end()) - b[i].begin())
      g.top1_equal = false;
    const std::vector<float> la = log_softmax(a[i]), lb = log_softmax(b[i]);
    for (size_t j = 0; j < la.size(); ++j) g.max_logprob_diff = std::max(g.max_logprob_diff, std::fabs(la[j] - lb[j]));
  }
  return g;
}

class KvWindowGate : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { AGENTKV_NEEDS_FIXTURES(); }
};

// A quarter of the context hot, the tail in the hot type: keys are read in one position order
// wherever they live, so the logits are the all-hot ones, bit for bit.
TEST_P(KvWindowGate, AnExactTailGivesTheAllHotLogits) {
  const Model& m = model(GetParam());
  memory::KvResidency res;
  const auto all_hot = run_logits(m, 0, GgmlType::F16);
  const auto windowed = run_logits(m, 256, GgmlType::F16, &res);
  EXPECT_EQ(res.hot_used, 256u);
  EXPECT_EQ(res.tail_used, 608u - 256u);
  ASSERT_EQ(all_hot.size(), windowed.size());
  for (size_t i = 0; i < all_hot.size(); ++i)
    EXPECT_EQ(std::memcmp(all_hot[i].data(), windowed[i].data(), all_hot[i].size() * sizeof(float)), 0) << "output " << i;
}

// A compressed tail: the all-resident run of the tail's type gives the same logits when the hot
// window has that type too (one pass over keys in position order); with an f16 window and a q8_0
// tail (two passes merged by log-sum-exp) the logits stay nearer the all-f16 ones than an all-q8_0
// cache's, top-1 equal everywhere.
TEST_P(KvWindowGate, ACompressedTailMatchesTheAllResidentRunOfItsType) {
  const Model& m = model(GetParam());
  const auto all_q8 = run_logits(m, 0, GgmlType::Q8_0, nullptr, GgmlType::Q8_0);
  const auto windowed_q8 = run_logits(m, 256, GgmlType::Q8_0, nullptr, GgmlType::Q8_0);
  for (size_t i = 0; i < all_q8.size(); ++i)
    EXPECT_EQ(std::memcmp(all_q8[i].data(), windowed_q8[i].data(), all_q8[i].size() * sizeof(float)), 0) << "output " << i;

  const auto all_f16 = run_logits(m, 0, GgmlType::F16);
  const Gate mixed = compare(all_f16, run_logits(m, 256, GgmlType::Q8_0));
  const Gate resident = compare(all_f16, all_q8);
  EXPECT_TRUE(mixed.top1_equal);
  EXPECT_LE(mixed.max_logprob_diff, resident.max_logprob_diff * 1.1f);
  std::printf("%s: max logprob diff from all-f16: f16 window + q8_0 tail %.3g, all q8_0 %.3g\n", GetParam().c_str(),
              mixed.max_logprob_diff, resident.max_logprob_diff);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvWindowGate, ::testing::Values("qwen3-micro", "qwen35-micro"));

}  // namespace
}  // namespace agentkv
