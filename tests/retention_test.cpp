// Context-shift eviction (agentkv/retention.h, issue 18) on qwen3-micro with f32 keys:
// 1. The query window records, per attention layer, the last W queries of each sequence.
// 2. choose_evictions: every policy drops exactly min(n_discard, candidates) positions, ascending,
//    within its candidates; positional and sinks drop the oldest; keydiff drops a group of keys
//    made identical (the least distinctive) and snapkv keeps a key made to match the recorded
//    queries; the scoring policies drop only positions scored no higher than every kept one.
// 3. evict_positions closes the gaps: positions 0..M-1 in the old order, every kept K row equal to
//    its old row rotated by its move (RoPE composes), V rows untouched, and decoding goes on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/context_impl.h"
#include "agentkv/retention.h"
#include "kernels/ops.h"
#include "memory/kv_cache.h"
#include "memory/query_window.h"
#include "model/model.h"
#include "fixtures.h"

namespace agentkv {
namespace {

using memory::Pos;

const std::string kModels = std::string(AGENTKV_FIXTURES_DIR) + "/models/";
constexpr int kN = 64;      // tokens in the sequence
constexpr int kWindow = 8;  // queries recorded

std::vector<Token> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<Token> d(0, 5000);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

struct Fixture {
  std::unique_ptr<Model> model = Model::load(kModels + "qwen3-micro.gguf");
  std::unique_ptr<Context> ctx;
  explicit Fixture(uint32_t seed = 1) {
    ContextParams cp;
    cp.n_ctx = 256;
    cp.n_threads = 1;
    cp.kv.type_k = cp.kv.type_v = GgmlType::F32;
    cp.kv.query_window = kWindow;
    ctx = std::make_unique<Context>(*model, cp);
    const auto t = tokens(kN, seed);
    Batch b;
    b.add_sequence(t.data(), t.size() - 4, 0, 0, false);  // a prompt, then four decoded tokens
    EXPECT_EQ(ctx->decode(b), 0);
    for (size_t i = t.size() - 4; i < t.size(); ++i) {
      Batch one;
      one.add(t[i], static_cast<Pos>(i), {0}, true);
      EXPECT_EQ(ctx->decode(one), 0);
    }
  }
  const memory::KvCache& kv() const { return *sequence_memory(*ctx).kv(); }
  // The cell of each position of sequence 0.
  std::map<Pos, uint32_t> cells() const {
    std::map<Pos, uint32_t> out;
    const memory::KvCells& c = kv().cells(0);
    for (uint32_t i = 0; i < c.used_max_p1(); ++i)
      if (!c.is_empty(i) && c.has_seq(i, 0)) out[c.pos(i)] = i;
    return out;
  }
  int first_kv_layer() const {
    int l = 0;
    while (!kv().rows().layer_has_kv(l)) ++l;
    return l;
  }
  float* k_row(int layer, Pos p) { return reinterpret_cast<float*>(sequence_memory(*ctx).kv()->rows().k_row(layer, 0, cells().at(p))); }
};

EvictionRequest request(EvictPolicy policy, int n_keep, int n_discard, int n_recent) {
  EvictionRequest r;
  r.seq = 0;
  r.n_past = kN;
  r.n_keep = n_keep;
  r.n_discard = n_discard;
  r.n_recent = n_recent;
  r.policy = policy;
  return r;
}

TEST(QueryWindow, KeepsTheLastQueriesOfEveryLayerInOrder) {
  memory::QueryWindow w({false, true, true}, 2, 2, 3);
  for (Pos p = 0; p < 5; ++p)
    for (int layer : {1, 2}) {  // a micro-batch runs layer by layer: layer 2 finds layer 1's slots
      const float q[2] = {static_cast<float>(p), static_cast<float>(layer)};
      w.record(layer, 1, p, q);
    }
  ASSERT_EQ(w.count(1), 3u);
  EXPECT_EQ(w.count(0), 0u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(w.pos(1, i), static_cast<Pos>(2 + i));
    EXPECT_EQ(w.row(1, 1, i)[0], static_cast<float>(2 + i));
    EXPECT_EQ(w.row(2, 1, i)[1], 2.f);
  }
  const float stale[2] = {9, 9};
  w.record(2, 1, 0, stale);  // a position the ring no longer holds: ignored
  for (uint32_t i = 0; i < 3; ++i) EXPECT_NE(w.row(2, 1, i)[0], 9.f);
  w.clear(1);
  EXPECT_EQ(w.count(1), 0u);
}

TEST(Retention, EveryPolicyDropsExactlyItsCountWithinItsCandidates) {
  AGENTKV_NEEDS_FIXTURES();
  Fixture f;
  ASSERT_EQ(recorded_queries(*f.ctx)->count(0), static_cast<uint32_t>(kWindow));
  for (EvictPolicy p : {EvictPolicy::Positional, EvictPolicy::Sinks, EvictPolicy::KeyDiff, EvictPolicy::SnapKV}) {
    for (int n_discard : {1, 10, 40, 1000}) {
      const EvictionRequest r = request(p, 6, n_discard, 16);
      const auto dropped = choose_evictions(*f.ctx, r);
      const bool scored = p == EvictPolicy::KeyDiff || p == EvictPolicy::SnapKV;
      // The scoring policies keep at least n_recent newest positions, and the newest half of what stays.
      const int lo = p == EvictPolicy::Sinks ? 4 : 6, stays = kN - std::min(n_discard, kN);
      const int hi = scored ? kN - std::max(16, std::min(stays / 2, stays - lo)) : kN;
      ASSERT_EQ(dropped.size(), static_cast<size_t>(std::min(n_discard, hi - lo))) << evict_policy_name(p);
      ASSERT_TRUE(std::is_sorted(dropped.begin(), dropped.end()));
      ASSERT_EQ(std::set<Pos>(dropped.begin(), dropped.end()).size(), dropped.size());
      ASSERT_GE(dropped.front(), lo);
      ASSERT_LT(dropped.back(), hi);
      if (!scored) {
        for (size_t i = 0; i < dropped.size(); ++i) ASSERT_EQ(dropped[i], lo + static_cast<Pos>(i)) << evict_policy_name(p);
        continue;
      }
      // What goes is scored no higher than anything that stays.
      const auto scores = retention_scores(*f.ctx, r);
      ASSERT_EQ(scores.size(), static_cast<size_t>(hi - lo));
      const std::set<Pos> gone(dropped.begin(), dropped.end());
      float worst_kept = INFINITY, best_gone = -INFINITY;
      for (int q = lo; q < hi; ++q) {
        const float s = scores[static_cast<size_t>(q - lo)];
        if (gone.count(q)) best_gone = std::max(best_gone, s);
        else worst_kept = std::min(worst_kept, s);
      }
      EXPECT_LE(best_gone, worst_kept) << evict_policy_name(p);
    }
  }
  // The sequence is unchanged by choosing.
  EXPECT_EQ(f.ctx->memory().seq_pos_max(0), kN - 1);
}

TEST(Retention, KeyDiffDropsTheLeastDistinctiveKeys) {
  AGENTKV_NEEDS_FIXTURES();
  Fixture f;
  const int n_embd_k = static_cast<int>(f.kv().layout().n_embd_k);
  // Ten candidates get one and the same key in every layer: together they pull the mean key
  // towards them, so they are the least distinctive.
  // (Candidates: [4, 37): 10 of 64 go, so the newest 27 stay.)
  const std::vector<Pos> same = {6, 9, 12, 15, 18, 21, 24, 27, 30, 33};
  for (int layer = 0; layer < static_cast<int>(f.kv().layout().layer_has_kv.size()); ++layer) {
    if (!f.kv().rows().layer_has_kv(layer)) continue;
    const std::vector<float> k(f.k_row(layer, 2), f.k_row(layer, 2) + n_embd_k);  // a kept position's key
    for (Pos p : same) std::copy(k.begin(), k.end(), f.k_row(layer, p));
  }
  const auto dropped = choose_evictions(*f.ctx, request(EvictPolicy::KeyDiff, 4, static_cast<int>(same.size()), 8));
  EXPECT_EQ(dropped, same);
}

TEST(Retention, SnapKvKeepsTheKeyTheRecentQueriesAttendTo) {
  AGENTKV_NEEDS_FIXTURES();
  Fixture f;
  const ModelConfig& cfg = f.model->config();
  const int64_t hd = cfg.head_dim_k, rep = cfg.n_head / cfg.n_head_kv;
  const memory::QueryWindow& qw = *recorded_queries(*f.ctx);
  // Position 30's key, in every layer and KV head, points where that layer's recorded queries
  // point (their sum over the window and the head group), scaled up: it takes their attention.
  const Pos star = 30;
  for (int layer = 0; layer < static_cast<int>(f.kv().layout().layer_has_kv.size()); ++layer) {
    if (!f.kv().rows().layer_has_kv(layer)) continue;
    float* k = f.k_row(layer, star);
    for (int64_t g = 0; g < cfg.n_head_kv; ++g) {
      std::vector<float> dir(static_cast<size_t>(hd), 0.f);
      for (uint32_t j = 0; j < qw.count(0); ++j)
        for (int64_t h = g * rep; h < (g + 1) * rep; ++h)
          for (int64_t d = 0; d < hd; ++d) dir[static_cast<size_t>(d)] += qw.row(layer, 0, j)[h * hd + d];
      double norm = 0;
      for (float x : dir) norm += x * x;
      for (int64_t d = 0; d < hd; ++d) k[g * hd + d] = static_cast<float>(40.0 * dir[static_cast<size_t>(d)] / std::sqrt(norm));
    }
  }
  // 45 of 64 go: 19 stay, the newest 9 of them without scoring, so 6 of the candidates
  // [4, 55) stay: that key and positions of the span it leads (the pooling keeps the 8 after an
  // attended position and the one before it), nothing else.
  const auto dropped = choose_evictions(*f.ctx, request(EvictPolicy::SnapKV, 4, 45, 8));
  ASSERT_EQ(dropped.size(), 45u);
  EXPECT_FALSE(std::binary_search(dropped.begin(), dropped.end(), star));
  for (Pos p = 4; p < 55; ++p)
    if (!std::binary_search(dropped.begin(), dropped.end(), p)) {
      EXPECT_TRUE(p >= star - 1 && p <= star + 8) << p;
    }
  // keydiff, which reads no queries, does not single it out the same way: the choice differs.
  const auto by_keys = choose_evictions(*f.ctx, request(EvictPolicy::KeyDiff, 4, 45, 8));
  EXPECT_NE(dropped, by_keys);
}

TEST(Retention, EvictionClosesTheGapsAndRotatesEachKeptKeyByItsMove) {
  AGENTKV_NEEDS_FIXTURES();
  Fixture f;
  const int layer = f.first_kv_layer();
  const int n_embd_k = static_cast<int>(f.kv().layout().n_embd_k);
  std::map<Pos, std::vector<float>> k_before, v_before;
  for (const auto& [p, cell] : f.cells()) {
    const float* k = reinterpret_cast<const float*>(f.kv().rows().k_row(layer, 0, cell));
    const float* v = reinterpret_cast<const float*>(f.kv().rows().v_row(layer, 0, cell));
    k_before[p].assign(k, k + n_embd_k);
    v_before[p].assign(v, v + f.kv().layout().n_embd_v);
  }
  const std::vector<Pos> dropped = {5, 6, 7, 12, 20, 21, 33, 50, 62};
  evict_positions(*f.ctx, 0, dropped, kN);
  EXPECT_EQ(recorded_queries(*f.ctx)->count(0), 0u);  // the recorded queries carried old positions
  f.ctx->apply_pending_shift();
  const int kept = kN - static_cast<int>(dropped.size());
  EXPECT_EQ(f.ctx->memory().seq_pos_min(0), 0);
  EXPECT_EQ(f.ctx->memory().seq_pos_max(0), kept - 1);
  const auto now = f.cells();
  ASSERT_EQ(now.size(), static_cast<size_t>(kept));
  const ModelConfig& cfg = f.model->config();
  Pos new_pos = 0;
  double worst = 0;
  for (Pos old = 0; old < kN; ++old) {
    if (std::binary_search(dropped.begin(), dropped.end(), old)) continue;
    const uint32_t cell = now.at(new_pos);
    std::vector<float> want = k_before[old];
    for (int64_t h = 0; h < cfg.n_head_kv; ++h)
      rope_neox(want.data() + h * cfg.head_dim_k, cfg.head_dim_k, cfg.n_rot, static_cast<float>(new_pos - old),
                cfg.rope_freq_base, cfg.rope_freq_scale);
    const float* k = reinterpret_cast<const float*>(f.kv().rows().k_row(layer, 0, cell));
    const float* v = reinterpret_cast<const float*>(f.kv().rows().v_row(layer, 0, cell));
    for (int i = 0; i < n_embd_k; ++i) worst = std::max(worst, double(std::fabs(k[i] - want[static_cast<size_t>(i)])));
    EXPECT_TRUE(std::equal(v_before[old].begin(), v_before[old].end(), v)) << "V row of old position " << old;
    ++new_pos;
  }
  EXPECT_LT(worst, 1e-4);
  // Decoding goes on at the closed-up positions.
  Batch b;
  b.add(77, kept, {0}, true);
  EXPECT_EQ(f.ctx->decode(b), 0);
  EXPECT_EQ(f.ctx->memory().seq_pos_max(0), kept);
}

}  // namespace
}  // namespace agentkv
