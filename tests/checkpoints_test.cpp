// Checkpoints of a hybrid sequence (qwen35moe-micro): rolling back to one and recomputing only
// the tokens after it gives exactly (bit for bit) the logits of a fresh context that evaluated
// the same tokens in the same batches, and the forward pass saw only those tokens. Also: stale
// checkpoints are refused, the byte budget evicts the least recently used, restoring a sequence
// whose state cell is shared leaves the other sequence alone, and pure attention memory rolls
// back too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/context.h"
#include "memory/checkpoints.h"
#include "model/model.h"

namespace agentkv {
namespace {

using memory::CheckpointStore;
using memory::Pos;

const std::string kModels = std::string(AGENTKV_FIXTURES_DIR) + "/models/";

std::vector<Token> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<Token> d(0, 8000);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

std::vector<Token> concat(std::vector<Token> a, const std::vector<Token>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

ContextParams params(uint32_t n_seq = 1) {
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 1;
  cp.n_seq_max = n_seq;
  return cp;
}

// Decodes toks as one batch for sequence s from the sequence's next position; returns the logits
// of every token.
std::vector<float> decode(Context& ctx, const std::vector<Token>& toks, memory::SeqId s = 0) {
  const Pos p0 = ctx.memory().seq_pos_max(s) + 1;
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], p0 + static_cast<Pos>(i), {s}, true);
  EXPECT_EQ(ctx.decode(b), 0);
  const size_t n_vocab = static_cast<size_t>(ctx.model().n_vocab());
  std::vector<float> out(static_cast<size_t>(ctx.n_outputs()) * n_vocab);
  for (int i = 0; i < ctx.n_outputs(); ++i) std::memcpy(&out[i * n_vocab], ctx.logits(i), n_vocab * sizeof(float));
  return out;
}

class CheckpointsHybrid : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = Model::load(kModels + "qwen35moe-micro.gguf").release(); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* CheckpointsHybrid::model_ = nullptr;

TEST_F(CheckpointsHybrid, RollbackRecomputesOnlyTheNewSuffixAndMatchesAFreshContext) {
  // Turn 1: prompt A, then the answer B; a checkpoint at the end of each.
  const auto A = tokens(13, 1), B = tokens(9, 2), C = tokens(6, 3);
  Context ctx(*model_, params());
  CheckpointStore store(1 << 20);
  decode(ctx, A);
  ASSERT_TRUE(store.take(ctx.memory(), 0, A));
  decode(ctx, B);
  ASSERT_TRUE(store.take(ctx.memory(), 0, concat(A, B)));
  EXPECT_EQ(store.list(0).size(), 2u);
  EXPECT_FALSE(ctx.memory().seq_rm(0, 13, -1));  // a recurrent state cannot drop B by itself

  // Turn 2 diverges after A: A + C.
  const auto AC = concat(A, C);
  const auto restored = store.restore_latest_before(ctx.memory(), 0, 13, AC);
  ASSERT_TRUE(restored);
  EXPECT_EQ(restored->pos, 12);
  EXPECT_EQ(restored->n_tokens, 13);
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 12);
  EXPECT_EQ(ctx.memory().kv()->seq_pos_max(0), 12);
  EXPECT_EQ(store.list(0).size(), 1u);  // the A+B checkpoint described a history that is gone
  ctx.reset_stats();
  const auto got = decode(ctx, C);
  EXPECT_EQ(ctx.stats().n_tokens, static_cast<int64_t>(C.size()));

  Context fresh(*model_, params());
  decode(fresh, A);
  const auto want = decode(fresh, C);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "logits differ";

  // Control: rolling back the positions but keeping the state that absorbed B does not match.
  Context wrong(*model_, params());
  decode(wrong, A);
  decode(wrong, B);
  wrong.memory().kv()->seq_rm(0, 13, -1);
  wrong.memory().rec()->seq_own_cell(0, 12);
  const auto bad = decode(wrong, C);
  double diff = 0;
  for (size_t i = 0; i < bad.size(); ++i) diff = std::max(diff, double(std::fabs(bad[i] - want[i])));
  EXPECT_GT(diff, 1e-2);
}

TEST_F(CheckpointsHybrid, RollbackToAnEarlierCheckpointRecomputesTheTokensSinceIt) {
  // The checkpoint is 5 tokens before the divergence: those 5 are recomputed with C.
  const auto A1 = tokens(8, 4), A2 = tokens(5, 5), B = tokens(7, 6), C = tokens(4, 7);
  Context ctx(*model_, params());
  CheckpointStore store(1 << 20);
  decode(ctx, A1);
  ASSERT_TRUE(store.take(ctx.memory(), 0, A1));
  decode(ctx, concat(A2, B));
  const auto prompt = concat(concat(A1, A2), C);
  const auto r = store.restore_latest_before(ctx.memory(), 0, 13, prompt);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->pos, 7);
  ctx.reset_stats();
  const auto got = decode(ctx, concat(A2, C));
  EXPECT_EQ(ctx.stats().n_tokens, static_cast<int64_t>(A2.size() + C.size()));

  Context fresh(*model_, params());
  decode(fresh, A1);
  const auto want = decode(fresh, concat(A2, C));
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

TEST_F(CheckpointsHybrid, StaleOrMismatchedCheckpointsAreNotRestored) {
  const auto A = tokens(10, 8), B = tokens(4, 9);
  Context ctx(*model_, params());
  CheckpointStore store(1 << 20);
  decode(ctx, A);
  ASSERT_TRUE(store.take(ctx.memory(), 0, A));
  decode(ctx, B);
  // Another prompt whose first 10 tokens differ: the hash does not match; memory unchanged.
  auto other = concat(A, B);
  other[3] ^= 1;
  EXPECT_FALSE(store.restore_latest_before(ctx.memory(), 0, 3, other));  // no checkpoint before pos 3
  EXPECT_FALSE(store.restore_latest_before(ctx.memory(), 0, 12, other));
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 13);
  EXPECT_EQ(store.size(), 0u);  // found not to apply: dropped
  // Attention cells removed under the checkpoint: it no longer applies.
  ASSERT_TRUE(store.take(ctx.memory(), 0, concat(A, B)));
  ASSERT_TRUE(ctx.memory().seq_rm(0, -1, -1));
  decode(ctx, A);
  EXPECT_FALSE(store.restore_latest_before(ctx.memory(), 0, 100));
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 9);
  EXPECT_TRUE(store.take(ctx.memory(), 0, A));  // taking again works
  Context empty(*model_, params());
  EXPECT_FALSE(store.take(empty.memory(), 0, {}));  // nothing to take
}

TEST_F(CheckpointsHybrid, BudgetEvictsTheLeastRecentlyUsed) {
  Context ctx(*model_, params());
  decode(ctx, tokens(4, 10));
  CheckpointStore probe(1 << 20);
  ASSERT_TRUE(probe.take(ctx.memory(), 0));
  const size_t one = probe.bytes();
  ASSERT_GT(one, 0u);

  CheckpointStore store(2 * one + one / 2);  // room for two
  ASSERT_TRUE(store.take(ctx.memory(), 0));  // pos 3
  decode(ctx, tokens(2, 11));
  ASSERT_TRUE(store.take(ctx.memory(), 0));  // pos 5
  decode(ctx, tokens(2, 12));
  ASSERT_TRUE(store.take(ctx.memory(), 0));  // pos 7: evicts pos 3
  auto list = store.list(0);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].pos, 5);
  EXPECT_EQ(list[1].pos, 7);
  EXPECT_LE(store.bytes(), store.byte_budget());
  // Retaking at the same position replaces, not duplicates.
  ASSERT_TRUE(store.take(ctx.memory(), 0));
  EXPECT_EQ(store.list(0).size(), 2u);
  // A checkpoint larger than the whole budget is refused.
  CheckpointStore tiny(one / 2);
  EXPECT_FALSE(tiny.take(ctx.memory(), 0));
  EXPECT_EQ(tiny.size(), 0u);
}

TEST_F(CheckpointsHybrid, RestoringASharedStateLeavesTheOtherSequenceAlone) {
  Context ctx(*model_, params(2));
  auto& mem = ctx.memory();
  CheckpointStore store(1 << 20);
  decode(ctx, tokens(6, 13), 0);
  mem.seq_cp(0, 1, -1, -1);  // seq 1 shares seq 0's cells and state
  ASSERT_EQ(mem.rec()->seq_cell(0), mem.rec()->seq_cell(1));
  ASSERT_TRUE(store.take(mem, 1));
  decode(ctx, tokens(3, 14), 1);  // copy-on-write: seq 1 moves to its own cell
  ASSERT_NE(mem.rec()->seq_cell(0), mem.rec()->seq_cell(1));
  decode(ctx, tokens(2, 15), 0);

  // Snapshot seq 0's state, roll seq 1 back, compare seq 0 byte for byte.
  const auto& rl = mem.rec()->layout();
  auto seq0_state = [&] {
    std::vector<float> s;
    const uint32_t c = static_cast<uint32_t>(mem.rec()->seq_cell(0));
    for (int il = 0; il < static_cast<int>(rl.layer_recurrent.size()); ++il) {
      if (!rl.layer_recurrent[il]) continue;
      s.insert(s.end(), mem.rec()->conv_state(il, c), mem.rec()->conv_state(il, c) + rl.n_conv);
      s.insert(s.end(), mem.rec()->ssm_state(il, c), mem.rec()->ssm_state(il, c) + rl.n_ssm);
    }
    return s;
  };
  const auto before = seq0_state();
  const auto r = store.restore_latest_before(mem, 1, 9);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->pos, 5);
  EXPECT_EQ(mem.seq_pos_max(1), 5);
  EXPECT_EQ(mem.seq_pos_max(0), 7);
  EXPECT_EQ(seq0_state(), before);
  // Seq 1 then continues exactly like a fresh fork of the 6 shared tokens.
  const auto D = tokens(3, 16);
  const auto got = decode(ctx, D, 1);
  Context fresh(*model_, params());
  decode(fresh, tokens(6, 13));
  const auto want = decode(fresh, D);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

TEST(CheckpointsDense, AttentionOnlyRollbackIsASuffixRemoval) {
  auto model = Model::load(kModels + "qwen3-micro.gguf");
  Context ctx(*model, params());
  CheckpointStore store(1 << 20);
  const auto A = tokens(7, 17), B = tokens(5, 18);
  decode(ctx, A);
  ASSERT_TRUE(store.take(ctx.memory(), 0, A));
  EXPECT_EQ(store.list(0)[0].bytes, sizeof(memory::Checkpoint));  // no state to copy
  decode(ctx, B);
  const auto r = store.restore_latest_before(ctx.memory(), 0, 7, A);
  ASSERT_TRUE(r);
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 6);
  EXPECT_EQ(ctx.memory().kv()->cells(0).used(), 7u);
}

}  // namespace
}  // namespace agentkv
