// Sliding-window memory (memory/window_kv.h, docs/memory-semantics.md §10): a model's sliding-window
// layers keep only each sequence's window in a cache of their own. Random operation sequences run
// on two contexts of one model — the window part, and --swa-full (every row kept, the simple
// reference) — and every logit must be bit-equal; the window part's cells per sequence stay within
// its window + rollback + two micro-batches; dropping up to the rollback's positions since the last
// decode always works, and a refused drop changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/make_model.h"
#include "agentkv/seq_snapshot.h"
#include "agentkv/session_state.h"
#include "engine/context_impl.h"
#include "fixture_models.h"
#include "memory/window_kv.h"

namespace agentkv {
namespace {


ContextParams params(bool swa_full, uint32_t n_ubatch) {
  ContextParams p;
  p.n_ctx = 16384;
  p.n_seq_max = 4;
  p.n_ubatch = n_ubatch;
  p.n_threads = 2;
  p.kv.swa_full = swa_full;
  return p;
}

// The two contexts driven in lockstep.
struct Pair {
  const Model& model;
  Context window, full;
  std::vector<std::vector<Token>> tokens;  // what each sequence holds
  std::vector<int> dropped;                // positions each sequence dropped since it last decoded
  Pair(const Model& m, uint32_t n_ubatch)
      : model(m), window(m, params(false, n_ubatch)), full(m, params(true, n_ubatch)), tokens(4), dropped(4) {}

  // Decodes `n` random tokens onto each of `seqs` (one batch) and compares every output row.
  void decode(std::mt19937& rng, const std::vector<MemorySeqId>& seqs, int n) {
    Batch b;
    std::uniform_int_distribution<Token> tok(0, static_cast<Token>(model.n_vocab() - 1));
    for (MemorySeqId s : seqs) {
      dropped[static_cast<size_t>(s)] = 0;
      for (int i = 0; i < n; ++i) {
        const Token t = tok(rng);
        b.add(t, static_cast<MemoryPos>(tokens[static_cast<size_t>(s)].size()), {s}, i == n - 1 || i % 5 == 0);
        tokens[static_cast<size_t>(s)].push_back(t);
      }
    }
    ASSERT_EQ(window.decode(b), 0);
    ASSERT_EQ(full.decode(b), 0);
    for (int i = 0; i < window.n_outputs(); ++i)
      ASSERT_EQ(std::memcmp(window.logits(i), full.logits(i), sizeof(float) * static_cast<size_t>(model.n_vocab())), 0)
          << "output " << i;
    check_window_bound();
  }

  void check_window_bound() const {
    const memory::WindowKv* w = sequence_memory(window).window();
    ASSERT_NE(w, nullptr);
    const memory::KvCells& cells = w->kv().cells(0);
    for (MemorySeqId s = 0; s < 4; ++s) {
      size_t n = 0;
      for (uint32_t i = 0; i < cells.size(); ++i) n += cells.has_seq(i, s) ? 1 : 0;
      EXPECT_EQ(cells.seq_positions(s).size(), n) << "the position index's count (what /slots reports) against a scan";
      EXPECT_LE(n, static_cast<size_t>(w->keep()) + 2 * window.impl().params.n_ubatch) << "sequence " << s;
    }
  }
};

void run_random_ops(const std::string& preset, uint32_t n_ubatch, uint32_t seed) {
  AGENTKV_NEEDS_FIXTURES();  // the tokenizer
  auto model = testing_support::preset_model(preset, "window");
  Pair p(*model, n_ubatch);
  const memory::WindowKv* w = sequence_memory(p.window).window();
  ASSERT_NE(w, nullptr) << "the window part is the default";
  ASSERT_EQ(sequence_memory(p.full).window(), nullptr);
  ASSERT_TRUE(p.window.needs_snapshots());
  ASSERT_FALSE(p.full.needs_snapshots());
  const memory::Pos window = w->window();

  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int refused = 0, removed = 0;
  for (int step = 0; step < 60; ++step) {
    const auto s = static_cast<MemorySeqId>(pick(0, 2));
    auto& held = p.tokens[static_cast<size_t>(s)];
    const int op = pick(0, 9);
    if (op <= 4 || held.empty()) {  // decode, sometimes two sequences in one batch
      std::vector<MemorySeqId> seqs = {s};
      const auto other = static_cast<MemorySeqId>((s + 1) % 3);
      if (pick(0, 3) == 0 && !p.tokens[static_cast<size_t>(other)].empty()) seqs.push_back(other);
      p.decode(rng, seqs, pick(1, 3 * window));
    } else if (op <= 7) {  // drop the end: short (inside the rollback) or long
      const int n = pick(0, 1) ? pick(1, memory::WindowKv::kRollback) : pick(1, static_cast<int>(held.size()));
      const auto p0 = static_cast<MemoryPos>(held.size() - static_cast<size_t>(std::min<int>(n, static_cast<int>(held.size()))));
      const bool ok = p.window.memory().seq_rm(s, p0, -1);
      int& since = p.dropped[static_cast<size_t>(s)];
      if (since + n <= memory::WindowKv::kRollback) {
        EXPECT_TRUE(ok) << "a drop inside the rollback (" << since << " + " << n << ")";
      }
      if (!ok) {
        ++refused;
        // Nothing changed: the sequence goes on where it was.
        ASSERT_EQ(p.window.memory().seq_pos_max(s), static_cast<MemoryPos>(held.size()) - 1);
        continue;
      }
      ++removed;
      since += n;
      ASSERT_TRUE(p.full.memory().seq_rm(s, p0, -1));
      held.resize(static_cast<size_t>(p0));
    } else if (op == 8) {  // a copy into another sequence (shared cells), which then goes its own way
      const auto dst = static_cast<MemorySeqId>((s + 2) % 3);
      for (Context* c : {&p.window, &p.full}) {
        c->memory().seq_rm(dst, -1, -1);
        c->memory().seq_cp(s, dst, -1, -1);
      }
      p.tokens[static_cast<size_t>(dst)] = held;
      p.dropped[static_cast<size_t>(dst)] = p.dropped[static_cast<size_t>(s)];
    } else {  // a saved state into another sequence, and a snapshot back
      const auto dst = static_cast<MemorySeqId>(3);
      SaveOptions o;
      const std::vector<uint8_t> a = save_seq(p.window, s, o), b = save_seq(p.full, s, o);
      load_seq(p.window, a, dst);
      load_seq(p.full, b, dst);
      p.tokens[3] = held;
      p.decode(rng, {dst}, pick(1, window));
      const SeqSnapshot snap_w = SeqSnapshot::capture(p.window, dst), snap_f = SeqSnapshot::capture(p.full, dst);
      p.decode(rng, {dst}, pick(1, 2 * window));
      snap_w.restore(p.window, dst);
      snap_f.restore(p.full, dst);
      p.tokens[3].resize(static_cast<size_t>(p.full.memory().seq_pos_max(dst) + 1));
      p.decode(rng, {dst}, pick(1, window));
    }
  }
  std::printf("%s ub %u: %d ends dropped, %d refused\n", preset.c_str(), n_ubatch, removed, refused);
  EXPECT_GT(removed, 0);
}

TEST(WindowKv, Gemma3RandomOpsMatchSwaFull) { run_random_ops("gemma3-micro", 512, 1); }
TEST(WindowKv, Gemma3SmallMicroBatches) { run_random_ops("gemma3-micro", 7, 2); }
TEST(WindowKv, GptOssRandomOpsMatchSwaFull) { run_random_ops("gpt-oss-micro", 512, 3); }

// The window part holds a fraction of what every row would: a sequence keeps its window and the
// rollback, whatever its length.
TEST(WindowKv, SequenceBytesStayBounded) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = testing_support::preset_model("gemma3-micro");
  Context ctx(*model, params(false, 64));
  const memory::WindowKv& w = *sequence_memory(ctx).window();
  Batch b;
  for (int i = 0; i < 600; ++i) b.add(static_cast<Token>(i % 97 + 10), i, {0}, i == 599);
  ASSERT_EQ(ctx.decode(b), 0);
  EXPECT_EQ(w.kv().seq_pos_max(0), 599);
  EXPECT_EQ(w.kv().seq_pos_min(0), 576 - w.keep());  // pruned as the last micro-batch (576..599) was placed
  EXPECT_EQ(sequence_memory(ctx).kv()->seq_pos_min(0), 0);   // the full layers keep everything
  // The refusal names the reason and leaves the sequence as it was.
  EXPECT_FALSE(ctx.memory().seq_rm(0, 100, -1));
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 599);
  EXPECT_TRUE(ctx.memory().seq_rm(0, 600 - memory::WindowKv::kRollback, -1));
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 599 - memory::WindowKv::kRollback);
}

}  // namespace
}  // namespace agentkv
