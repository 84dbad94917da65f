// Retrieval heads (agentkv/retrieval_heads.h, KvLayout::tail_heads): a windowed cache whose tail
// keeps only some KV heads' rows. Checked at the cache level (what a demoted cell keeps, what
// reading it gives or refuses, copies), at the model level against references built without the
// feature (a head whose rows the tail dropped attends exactly over the window), and on the trained
// model: the probe singles out its induction head, and keeping that head's rows keeps the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "agentkv/context.h"
#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "agentkv/kv_status.h"
#include "agentkv/retention.h"
#include "agentkv/retrieval_heads.h"
#include "memory/kv_cache.h"
#include "model/model.h"
#include "fixture_models.h"
#include "trained_model.h"

namespace agentkv {
namespace {

using memory::KvCache;
using memory::KvLayout;
using memory::UBatch;

constexpr int kHeads = 4, kHeadDim = 32;
constexpr uint32_t kCells = 32, kHot = 8;

// Two attention layers around a recurrent one; layer 0's tail keeps heads 1 and 3, layer 2's none.
KvLayout tail_heads_layout() {
  KvLayout l;
  l.layer_has_kv = {true, false, true};
  l.n_embd_k = l.n_embd_v = kHeads * kHeadDim;
  l.n_cells = kCells;
  l.hot_cells = kHot;
  l.n_head_kv = kHeads;
  l.tail_heads = {0b1010, 0, 0};
  return l;
}

// Cell c's row of one layer: element i of head h is c + h / 8 + layer / 64 + i / 1024 (exact in f16).
std::vector<uint16_t> row_of(uint32_t cell, int layer) {
  std::vector<uint16_t> r(static_cast<size_t>(kHeads * kHeadDim));
  for (int h = 0; h < kHeads; ++h)
    for (int i = 0; i < kHeadDim; ++i)
      r[static_cast<size_t>(h * kHeadDim + i)] = fp32_to_fp16(static_cast<float>(cell) + h / 8.f + layer / 64.f + i / 1024.f);
  return r;
}

// Places positions [0, n) of sequence 0 one at a time, writing each cell's rows while it is hot.
void fill(KvCache& kv, int n) {
  for (int p = 0; p < n; ++p) {
    UBatch ub;
    ub.add(p, {0});
    const auto placement = kv.find_slot(ub);
    ASSERT_TRUE(placement);
    kv.apply(ub, *placement);
    const uint32_t cell = (*placement)[0].cell;
    for (int layer : {0, 2}) {
      const std::vector<uint16_t> r = row_of(cell, layer);
      std::memcpy(kv.rows().k_row(layer, 0, cell), r.data(), r.size() * 2);
      std::memcpy(kv.rows().v_row(layer, 0, cell), r.data(), r.size() * 2);
    }
  }
}

TEST(KvTailHeads, ADemotedCellKeepsTheKeptHeadsRowsOnly) {
  KvCache kv(tail_heads_layout());
  fill(kv, 20);
  ASSERT_TRUE(kv.rows().tail_drops_heads());
  ASSERT_NE(kv.rows().tail_kept_heads(0), nullptr);
  EXPECT_EQ(*kv.rows().tail_kept_heads(0), (std::vector<int>{1, 3}));
  ASSERT_NE(kv.rows().tail_kept_heads(2), nullptr);
  EXPECT_TRUE(kv.rows().tail_kept_heads(2)->empty());
  const memory::KvResidency r = kv.window().residency();
  EXPECT_EQ(r.hot_used, kHot);
  EXPECT_EQ(r.tail_used, 20u - kHot);
  // Tail storage: layer 0 keeps 2 of 4 heads (K and V), layer 2 none.
  const memory::KvRowBytes bytes = kv.rows().bytes(r);
  EXPECT_EQ(bytes.tail, size_t{2} * kCells * 2 * kHeadDim * 2);
  EXPECT_EQ(bytes.held, size_t{2} * kHot * 2 * kHeads * kHeadDim * 2 + size_t{20 - kHot} * 2 * 2 * kHeadDim * 2);
  int tail_cells = 0;
  for (uint32_t cell = 0; cell < 20; ++cell) {
    if (kv.window().is_hot(0, cell)) continue;
    ++tail_cells;
    std::vector<float> k(kHeads * kHeadDim);
    kv.rows().dequantize_k(0, 0, cell, k.data());
    const std::vector<uint16_t> want = row_of(cell, 0);
    for (int h = 0; h < kHeads; ++h)
      for (int i = 0; i < kHeadDim; ++i) {
        const size_t at = static_cast<size_t>(h * kHeadDim + i);
        EXPECT_EQ(k[at], (h == 1 || h == 3) ? fp16_to_fp32(want[at]) : 0.f) << "cell " << cell << " head " << h;
      }
    // What attention reads: the kept heads' rows back to back.
    const uint8_t* stored = kv.rows().tail_k_row(0, 0, cell);
    EXPECT_EQ(std::memcmp(stored, want.data() + kHeadDim, kHeadDim * 2), 0);
    EXPECT_EQ(std::memcmp(stored + kHeadDim * 2, want.data() + 3 * kHeadDim, kHeadDim * 2), 0);
    std::vector<uint8_t> whole(kv.rows().row_bytes_k());
    EXPECT_THROW(kv.rows().read_k(0, 0, cell, whole.data()), Error) << "a row without its dropped heads cannot be saved";
    EXPECT_THROW(kv.rows().read_v(2, 0, cell, whole.data()), Error);
  }
  EXPECT_EQ(tail_cells, 20 - static_cast<int>(kHot));
}

TEST(KvTailHeads, WritesAndCopiesOfATailCellKeepItsShape) {
  KvCache kv(tail_heads_layout());
  fill(kv, 12);
  const uint32_t tail_cell = 0;
  ASSERT_FALSE(kv.window().is_hot(0, tail_cell));
  // A write into a tail cell stores the kept heads.
  std::vector<float> k(kHeads * kHeadDim);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 97) / 8.f;
  kv.rows().quantize_k(0, 0, tail_cell, k.data());
  std::vector<float> back(k.size());
  kv.rows().dequantize_k(0, 0, tail_cell, back.data());
  for (int h = 0; h < kHeads; ++h)
    for (int i = 0; i < kHeadDim; ++i) {
      const size_t at = static_cast<size_t>(h * kHeadDim + i);
      EXPECT_EQ(back[at], (h == 1 || h == 3) ? k[at] : 0.f);
    }
  // Copying it into a cell that holds a hot row makes that cell a tail cell with the same rows:
  // a hot copy would show the dropped heads as zero keys to every head.
  const uint32_t hot_cell = 11;
  ASSERT_TRUE(kv.window().is_hot(0, hot_cell));
  kv.rows().copy_cell_rows(0, tail_cell, hot_cell);
  EXPECT_FALSE(kv.window().is_hot(0, hot_cell));
  EXPECT_EQ(std::memcmp(kv.rows().tail_k_row(0, 0, hot_cell), kv.rows().tail_k_row(0, 0, tail_cell), 2 * kHeadDim * 2), 0);
  // The freed hot row is taken by the next placement without demoting anything.
  const uint64_t demotions = kv.window().residency().demotions;
  fill(kv, 0);
  UBatch ub;
  ub.add(12, {0});
  const auto placement = kv.find_slot(ub);
  ASSERT_TRUE(placement);
  kv.apply(ub, *placement);
  EXPECT_EQ(kv.window().residency().demotions, demotions);
}

TEST(KvTailHeads, RefusesMasksItCannotServe) {
  KvLayout no_window = tail_heads_layout();
  no_window.hot_cells = 0;
  EXPECT_THROW(KvCache{no_window}, Error);
  KvLayout past = tail_heads_layout();
  past.tail_heads = {0b10000, 0, 0};
  EXPECT_THROW(KvCache{past}, Error);
  KvLayout short_list = tail_heads_layout();
  short_list.tail_heads = {1};
  EXPECT_THROW(KvCache{short_list}, Error);
  KvLayout split_block = tail_heads_layout();  // q8_0 blocks are 32 wide: a 16-wide head would split one
  split_block.n_head_kv = 8;
  split_block.tail_type_k = split_block.tail_type_v = GgmlType::Q8_0;
  EXPECT_THROW(KvCache{split_block}, Error);
}

// Random operation sequences (appends with random rows, removals, sequence copies, copy-on-write
// copies) on a cache whose tail keeps some heads and, in lockstep, on one whose tail keeps every
// head: the same cells; the kept heads' K and V rows always the reference's, the dropped heads'
// the reference's while the cell is hot and gone (zero, not listed to attention) once it is in the
// tail; the newest rows hot and at most kHot of them.
TEST(KvTailHeads, RandomOperationsKeepTheKeptHeadsRowsExactly) {
  constexpr int kSeqs = 3;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    KvLayout full_layout = tail_heads_layout(), heads_layout = tail_heads_layout();
    full_layout.tail_heads.clear();
    full_layout.n_seq_max = heads_layout.n_seq_max = kSeqs;
    KvCache ref(full_layout), kv(heads_layout);
    const size_t row_bytes = ref.rows().row_bytes_k(), head_bytes = kHeadDim * 2;
    std::vector<uint16_t> row(kHeads * kHeadDim);
    for (int op = 0; op < 300; ++op) {
      const std::string where = "seed " + std::to_string(seed) + " op " + std::to_string(op);
      const int s = pick(kSeqs), kind = pick(8);
      std::vector<uint32_t> placed;
      if (kind < 5) {
        UBatch ub;
        const memory::Pos p0 = ref.seq_pos_max(s) + 1;
        for (int i = 0, n = 1 + pick(4); i < n; ++i) ub.add(p0 + i, {s});
        const auto pa = ref.find_slot(ub), pb = kv.find_slot(ub);
        ASSERT_EQ(pa.has_value(), pb.has_value()) << where;
        if (!pa) continue;
        ref.apply(ub, *pa);
        kv.apply(ub, *pb);
        for (size_t t = 0; t < ub.size(); ++t) {
          ASSERT_EQ((*pa)[t].cell, (*pb)[t].cell) << where;
          placed.push_back((*pa)[t].cell);
          for (int layer : {0, 2})
            for (bool k : {true, false}) {
              for (uint16_t& x : row) x = fp32_to_fp16(static_cast<float>(pick(2001) - 1000) / 256.f);
              std::memcpy(k ? ref.rows().k_row(layer, 0, placed.back()) : ref.rows().v_row(layer, 0, placed.back()), row.data(), row_bytes);
              std::memcpy(k ? kv.rows().k_row(layer, 0, placed.back()) : kv.rows().v_row(layer, 0, placed.back()), row.data(), row_bytes);
            }
        }
      } else if (kind == 5) {
        const memory::Pos hi = ref.seq_pos_max(s);
        if (hi < 0) continue;
        const memory::Pos p0 = pick(static_cast<int>(hi) + 1), p1 = pick(2) ? -1 : p0 + 1 + pick(4);
        ref.seq_rm(s, p0, p1);
        kv.seq_rm(s, p0, p1);
      } else if (kind == 6) {
        const int d = pick(kSeqs);
        if (d == s) continue;
        ref.seq_rm(d, -1, -1), kv.seq_rm(d, -1, -1);
        ref.seq_cp(s, d, -1, -1), kv.seq_cp(s, d, -1, -1);
      } else {  // copy-on-write: a used cell's rows over an empty cell's
        std::vector<uint32_t> used, empty;
        for (uint32_t c = 0; c < kCells; ++c) (ref.cells(0).is_empty(c) ? empty : used).push_back(c);
        if (used.empty() || empty.empty()) continue;
        const uint32_t a = used[static_cast<size_t>(pick(static_cast<int>(used.size())))];
        const uint32_t b = empty[static_cast<size_t>(pick(static_cast<int>(empty.size())))];
        ref.rows().copy_cell_rows(0, a, b);
        kv.rows().copy_cell_rows(0, a, b);
        if (!kv.window().is_hot(0, a)) {
          ASSERT_FALSE(kv.window().is_hot(0, b)) << where << ": a copy of a tail cell must not be hot";
        }
      }
      ASSERT_LE(kv.window().residency().hot_used, kHot) << where;
      for (uint32_t c : placed) ASSERT_TRUE(kv.window().is_hot(0, c)) << where;
      for (uint32_t c = 0; c < kCells; ++c) {
        ASSERT_EQ(ref.cells(0).pos(c), kv.cells(0).pos(c)) << where;
        ASSERT_EQ(ref.cells(0).seqs(c), kv.cells(0).seqs(c)) << where;
        if (ref.cells(0).is_empty(c)) continue;
        const int32_t cell = static_cast<int32_t>(c);
        for (int layer : {0, 2}) {
          const uint8_t *rk = nullptr, *rv = nullptr, *k = nullptr, *v = nullptr;
          ref.rows().row_pointers(layer, 0, &cell, 1, &rk, &rv);
          kv.rows().row_pointers(layer, 0, &cell, 1, &k, &v);
          if (kv.window().is_hot(0, c)) {
            ASSERT_EQ(std::memcmp(rk, k, row_bytes), 0) << where << " hot cell " << c;
            ASSERT_EQ(std::memcmp(rv, v, row_bytes), 0) << where << " hot cell " << c;
            continue;
          }
          const std::vector<int>& kept = *kv.rows().tail_kept_heads(layer);
          for (size_t i = 0; i < kept.size(); ++i) {
            ASSERT_EQ(std::memcmp(rk + static_cast<size_t>(kept[i]) * head_bytes, k + i * head_bytes, head_bytes), 0) << where;
            ASSERT_EQ(std::memcmp(rv + static_cast<size_t>(kept[i]) * head_bytes, v + i * head_bytes, head_bytes), 0) << where;
          }
          std::vector<float> deq(kHeads * kHeadDim);
          kv.rows().dequantize_k(layer, 0, c, deq.data());
          for (int h = 0; h < kHeads; ++h)
            if (std::find(kept.begin(), kept.end(), h) == kept.end()) {
              for (int i = 0; i < kHeadDim; ++i) ASSERT_EQ(deq[static_cast<size_t>(h * kHeadDim + i)], 0.f) << where;
            }
        }
      }
    }
    EXPECT_GT(kv.window().residency().demotions, 0u) << "seed " << seed;
  }
}

// ---- the model level: the trained model (trained/agentkv-tiny: 4 layers, 2 KV heads of 64) ----

const testing_support::TrainedModel& trained() { return testing_support::trained_model(); }

TEST(RetrievalHeads, TheProbeSinglesOutTheTrainedModelsInductionHead) {
  const RetrievalHeadScores s = find_retrieval_heads(*trained().model, 2);
  ASSERT_EQ(s.by_layer.size(), 4u);
  // Layer 1's KV head 0 carries the model's copying circuit (docs/trained-model.md): its queries
  // put nearly all their attention on the earlier occurrence or what followed it.
  for (size_t l = 0; l < 4; ++l)
    for (size_t h = 0; h < 2; ++h) {
      if (l == 1 && h == 0) {
        EXPECT_GT(s.by_layer[l][h], 0.8f);
      } else {
        EXPECT_LT(s.by_layer[l][h], 0.1f) << "layer " << l << " head " << h;
      }
    }
  EXPECT_EQ(top_retrieval_heads(s, 0.125), (std::vector<uint64_t>{0, 1, 0, 0}));
  EXPECT_EQ(top_retrieval_heads(s, 0.0), (std::vector<uint64_t>{0, 0, 0, 0}));
  EXPECT_EQ(top_retrieval_heads(s, 1.0), (std::vector<uint64_t>{3, 3, 3, 3}));
  EXPECT_THROW(top_retrieval_heads(s, 1.5), Error);
}

ContextParams window_params(uint32_t hot, std::vector<uint64_t> heads) {
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_ubatch = 8;
  cp.n_threads = 2;
  cp.kv.hot_cells = hot;
  cp.kv.tail_heads = std::move(heads);
  return cp;
}

// Token-by-token decode of tokens[0, n): every step's logits. before(p) runs before position p.
template <typename Before>
std::vector<std::vector<float>> decode_steps(Context& ctx, int n, Before before) {
  const std::vector<Token>& tokens = trained().tokens;
  const auto n_vocab = static_cast<size_t>(ctx.model().n_vocab());
  std::vector<std::vector<float>> out;
  for (int p = 0; p < n; ++p) {
    before(p);
    Batch b;
    b.add(tokens[static_cast<size_t>(p)], p, {0}, true);
    if (ctx.decode(b) != 0) throw Error("decode failed");
    out.emplace_back(ctx.logits(0), ctx.logits(0) + n_vocab);
  }
  return out;
}

TEST(RetrievalHeads, AHeadWhoseRowsTheTailDroppedAttendsOverTheWindowExactly) {
  // Every head streaming: each step attends over the newest kWindow positions (its own included),
  // which a full cache gives when everything older is removed before the step.
  constexpr uint32_t kWindow = 24;
  constexpr int kSteps = 80;
  Context windowed(*trained().model, window_params(kWindow, {0, 0, 0, 0}));
  Context reference(*trained().model, window_params(0, {}));
  const auto got = decode_steps(windowed, kSteps, [](int) {});
  const auto want = decode_steps(reference, kSteps, [&](int p) {
    if (p >= static_cast<int>(kWindow)) reference.memory().seq_rm(0, 0, p - static_cast<int>(kWindow) + 1);
  });
  for (int p = 0; p < kSteps; ++p)
    for (size_t i = 0; i < got[static_cast<size_t>(p)].size(); ++i)
      ASSERT_NEAR(got[static_cast<size_t>(p)][i], want[static_cast<size_t>(p)][i], 1e-4f) << "step " << p << " logit " << i;
}

double mean_kl(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& run, size_t from) {
  double total = 0;
  for (size_t t = from; t < ref.size(); ++t) {
    auto log_softmax = [](const std::vector<float>& x) {
      const float mx = *std::max_element(x.begin(), x.end());
      double sum = 0;
      for (float v : x) sum += std::exp(double(v) - mx);
      std::vector<double> out(x.size());
      for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - mx - std::log(sum);
      return out;
    };
    const auto p = log_softmax(ref[t]), q = log_softmax(run[t]);
    for (size_t i = 0; i < p.size(); ++i) total += std::exp(p[i]) * (p[i] - q[i]);
  }
  return total / double(ref.size() - from);
}

TEST(RetrievalHeads, KeepingTheInductionHeadsRowsKeepsTheOutput) {
  // 320 positions through a 64-cell window: the tail keeps the induction head's rows, or the other
  // head's of the same layer, or none. KL against the full cache over the last 128 steps.
  constexpr int kSteps = 320;
  Context full(*trained().model, window_params(0, {}));
  const auto want = decode_steps(full, kSteps, [](int) {});
  auto kl_keeping = [&](std::vector<uint64_t> heads) {
    Context ctx(*trained().model, window_params(64, std::move(heads)));
    return mean_kl(want, decode_steps(ctx, kSteps, [](int) {}), kSteps - 128);
  };
  const double induction = kl_keeping({0, 1, 0, 0}), other = kl_keeping({0, 2, 0, 0}), none = kl_keeping({0, 0, 0, 0});
  EXPECT_LT(induction, 0.5 * other) << "induction head kept " << induction << ", the other head " << other;
  EXPECT_LT(induction, 0.5 * none) << "induction head kept " << induction << ", none " << none;
  EXPECT_LT(kl_keeping({3, 3, 3, 3}), 1e-6) << "every head kept: the exact windowed cache";
}

TEST(RetrievalHeads, AHybridModelKeepsItsRecurrentStateAndDropsOnlyAttentionRows) {
  AGENTKV_NEEDS_FIXTURES();
  // qwen35moe-micro: one attention layer (layer 3) of one KV head among Gated-DeltaNet layers. With
  // a tail that keeps no head, the steps before the window fills are the exact window's bit for bit
  // (nothing is in the tail yet, the recurrent state is the same), and the later ones differ.
  const Model& m = testing_support::fixture_model("qwen35moe-micro");
  constexpr uint32_t kWindow = 16;
  constexpr int kSteps = 40;
  auto run = [&](std::vector<uint64_t> heads) {
    ContextParams cp = window_params(kWindow, std::move(heads));
    Context ctx(m, cp);
    std::vector<std::vector<float>> out;
    for (int p = 0; p < kSteps; ++p) {
      Batch b;
      b.add(static_cast<Token>(100 + (p * 37) % 500), p, {0}, true);
      if (ctx.decode(b) != 0) throw Error("decode failed");
      out.emplace_back(ctx.logits(0), ctx.logits(0) + m.n_vocab());
    }
    const KvStatus st = kv_status(ctx);
    return std::make_pair(out, st);
  };
  const auto [exact, exact_status] = run({});
  const auto [streaming, status] = run({0, 0, 0, 0});
  EXPECT_EQ(status.tail_heads_kept, 0u);
  EXPECT_EQ(status.tail_heads_total, 1u);
  EXPECT_EQ(status.tail_bytes, 0u);
  EXPECT_GT(exact_status.tail_bytes, 0u);
  for (int p = 0; p < static_cast<int>(kWindow); ++p) ASSERT_EQ(streaming[static_cast<size_t>(p)], exact[static_cast<size_t>(p)]) << p;
  bool differs = false;
  for (int p = kWindow; p < kSteps; ++p) differs = differs || streaming[static_cast<size_t>(p)] != exact[static_cast<size_t>(p)];
  EXPECT_TRUE(differs) << "the tail's keys were read with no head keeping them";
}

TEST(RetrievalHeads, EvictionScoresSkipKeysAHeadNoLongerHolds) {
  // A context shift's scoring reads the keys back; a tail cell's dropped heads are zeros there, which
  // no head attends. With no head kept, snapkv's raw attention on every tail position is exactly 0
  // and keydiff gives them no cosine; the window's positions score as usual.
  constexpr uint32_t kWindow = 64;
  constexpr int kPast = 200;
  ContextParams cp = window_params(kWindow, {0, 0, 0, 0});
  cp.kv.query_window = 32;
  Context ctx(*trained().model, cp);
  Batch b;
  b.add_sequence(trained().tokens.data(), kPast, 0, 0, false);
  ASSERT_EQ(ctx.decode(b), 0);
  EvictionRequest r;
  r.n_past = kPast;
  r.n_keep = 4;
  r.n_discard = 50;
  r.n_recent = 32;
  r.policy = EvictPolicy::SnapKV;
  r.raw_attention = true;
  const std::vector<float> attention = retention_scores(ctx, r);  // candidates [4, 168)
  ASSERT_EQ(attention.size(), static_cast<size_t>(kPast - 32 - 4));
  const int first_hot = kPast - static_cast<int>(kWindow);
  float hot_total = 0.f;
  for (int p = 4; p < kPast - 32; ++p) {
    const float a = attention[static_cast<size_t>(p - 4)];
    if (p < first_hot) {
      ASSERT_EQ(a, 0.f) << "position " << p << " is in a tail no head keeps";
    } else {
      hot_total += a;
    }
  }
  EXPECT_GT(hot_total, 0.f);
  r.policy = EvictPolicy::KeyDiff;
  r.raw_attention = false;
  const std::vector<float> cosines = retention_scores(ctx, r);
  for (size_t i = 0; i < cosines.size(); ++i) {
    const int p = r.n_keep + static_cast<int>(i);
    if (p < first_hot) {
      EXPECT_EQ(cosines[i], 0.f) << p;
    } else {
      EXPECT_NE(cosines[i], 0.f) << p;
    }
  }
}

TEST(RetrievalHeads, TheContextRefusesThemWithoutAWindow) {
  ContextParams cp = window_params(0, {0, 1, 0, 0});
  EXPECT_THROW(Context(*trained().model, cp), Error);
  cp.kv.tail_heads.clear();
  cp.kv.retrieval_heads = 0.5;
  EXPECT_THROW(Context(*trained().model, cp), Error);
}

}  // namespace
}  // namespace agentkv
