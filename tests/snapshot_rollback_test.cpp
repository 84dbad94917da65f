// Recurrent snapshots on page chains (memory/prefix_index.h) on a real hybrid model
// (qwen35moe-micro): a sequence dropped and attached again up to a snapshot, then continued,
// gives exactly (bit for bit) the logits of a fresh context that evaluated the same tokens in the
// same batches, and the forward pass saw only the tokens after the snapshot. This is how a slot
// rolls back after its prompt diverges (RequestMemory::begin) and how another slot starts from
// pages it did not compute; it replaced the per-slot checkpoint store.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/context_impl.h"
#include "memory/prefix_index.h"
#include "model/model.h"
#include "fixtures.h"

namespace agentkv {
namespace {

using memory::Pos;

const std::string kModels = std::string(AGENTKV_FIXTURES_DIR) + "/models/";
constexpr memory::SeqId kHolder = 2;

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

ContextParams params() {
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 1;
  cp.n_seq_max = 3;  // two sequences and the index's holder
  return cp;
}

memory::PrefixIndex& enable_index(Context& ctx) {
  PrefixCacheConfig ic;
  ic.page_tokens = 4;
  ic.holder = kHolder;
  return memory::enable_prefix_index(sequence_memory(ctx), ic);
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

class SnapshotRollback : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!::agentkv::testing_support::fixtures_present()) return;  // SetUp() skips each test
    ::agentkv::testing_support::run_suite_setup([] { model_ = Model::load(kModels + "qwen35moe-micro.gguf").release(); },
                                                setup_error_);
  }
  void SetUp() override {
    AGENTKV_NEEDS_FIXTURES();
    AGENTKV_SUITE_SETUP_OK(setup_error_);
  }
  static inline std::string setup_error_;
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* SnapshotRollback::model_ = nullptr;

TEST_F(SnapshotRollback, AttachAtTheSnapshotRecomputesOnlyTheNewSuffixAndMatchesAFreshContext) {
  // Turn 1: prompt A, then the answer B; a snapshot at the end of each.
  const auto A = tokens(13, 1), B = tokens(9, 2), C = tokens(6, 3);
  Context ctx(*model_, params());
  memory::PrefixIndex& index = enable_index(ctx);
  decode(ctx, A);
  ASSERT_TRUE(index.snapshot(0, A, 0));
  decode(ctx, B);
  ASSERT_TRUE(index.snapshot(0, concat(A, B), 0));
  EXPECT_EQ(index.snapshots_along(concat(A, B), 0).size(), 2u);
  EXPECT_FALSE(ctx.memory().seq_rm(0, 13, -1));  // a recurrent state cannot drop B by itself

  // Turn 2 diverges after A: A + C. The sequence goes; its pages stay cached.
  const auto AC = concat(A, C);
  ASSERT_TRUE(ctx.memory().seq_rm(0, -1, -1));
  EXPECT_EQ(index.lookup(AC, 0, AC.size() - 1), 13u);
  EXPECT_EQ(index.lookup(AC, 1, AC.size() - 1), 0u);  // another salt sees nothing
  ASSERT_EQ(index.attach(0, AC, 0, AC.size() - 1), 13u);
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 12);
  EXPECT_EQ(sequence_memory(ctx).kv()->seq_pos_max(0), 12);
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
  sequence_memory(wrong).kv()->seq_rm(0, 13, -1);
  sequence_memory(wrong).rec()->seq_own_cell(0, 12);
  const auto bad = decode(wrong, C);
  double diff = 0;
  for (size_t i = 0; i < bad.size(); ++i) diff = std::max(diff, double(std::fabs(bad[i] - want[i])));
  EXPECT_GT(diff, 1e-2);
}

TEST_F(SnapshotRollback, AnEarlierSnapshotRecomputesTheTokensSinceIt) {
  // The snapshot is 5 tokens before the divergence: those 5 are recomputed with C.
  const auto A1 = tokens(8, 4), A2 = tokens(5, 5), B = tokens(7, 6), C = tokens(4, 7);
  Context ctx(*model_, params());
  memory::PrefixIndex& index = enable_index(ctx);
  decode(ctx, A1);
  ASSERT_TRUE(index.snapshot(0, A1, 0));
  decode(ctx, concat(A2, B));
  index.publish(0, concat(concat(A1, A2), B), 0, /*with_tail=*/true);
  const auto prompt = concat(concat(A1, A2), C);
  ASSERT_TRUE(ctx.memory().seq_rm(0, -1, -1));
  ASSERT_EQ(index.attach(0, prompt, 0, 13), 8u);
  ctx.reset_stats();
  const auto got = decode(ctx, concat(A2, C));
  EXPECT_EQ(ctx.stats().n_tokens, static_cast<int64_t>(A2.size() + C.size()));

  Context fresh(*model_, params());
  decode(fresh, A1);
  const auto want = decode(fresh, concat(A2, C));
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

TEST_F(SnapshotRollback, AnotherSequenceStartsFromTheSnapshotAndLeavesTheFirstAlone) {
  const auto A = tokens(12, 8), B = tokens(5, 9), C = tokens(3, 10);
  Context ctx(*model_, params());
  memory::PrefixIndex& index = enable_index(ctx);
  decode(ctx, A);
  ASSERT_TRUE(index.snapshot(0, A, 0));
  ASSERT_EQ(index.attach(1, concat(A, C), 0, A.size() + C.size() - 1), A.size());
  ctx.reset_stats();
  const auto got_c = decode(ctx, C, 1);
  EXPECT_EQ(ctx.stats().n_tokens, static_cast<int64_t>(C.size()));
  const auto got_b = decode(ctx, B, 0);  // the first sequence continues where it was

  Context fresh(*model_, params());
  decode(fresh, A);
  const auto want_c = decode(fresh, C);
  Context fresh_b(*model_, params());
  decode(fresh_b, A);
  const auto want_b = decode(fresh_b, B);
  EXPECT_EQ(0, std::memcmp(got_c.data(), want_c.data(), got_c.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(got_b.data(), want_b.data(), got_b.size() * sizeof(float)));
}

}  // namespace
}  // namespace agentkv
