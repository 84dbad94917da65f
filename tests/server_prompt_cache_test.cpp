// Prompt reuse (longest common prefix, llama-server's n_past-- rule, what the memory keeps on a
// dense and on a hybrid model) and slot choice (id_slot, session, prefix similarity, LRU).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "model/model.h"
#include "memory/prefix_index.h"
#include "server/base64.h"
#include "server/prompt_cache.h"
#include "server/slot_selection.h"
#include "fixtures.h"

namespace agentkv::server {
namespace {

const std::string kFixtures = AGENTKV_FIXTURES_DIR;
using Tokens = std::vector<Token>;

TEST(PromptReuse, CommonPrefix) {
  EXPECT_EQ(common_prefix(Tokens{}, Tokens{1, 2}), 0u);
  EXPECT_EQ(common_prefix(Tokens{1, 2, 3}, Tokens{1, 2, 4}), 2u);
  EXPECT_EQ(common_prefix(Tokens{1, 2}, Tokens{1, 2, 3}), 2u);
  EXPECT_EQ(common_prefix(Tokens{1, 2, 3}, Tokens{1, 2}), 2u);
  EXPECT_EQ(common_prefix(Tokens{5}, Tokens{6}), 0u);
}

TEST(PromptReuse, WholePromptCachedStillEvaluatesItsLastToken) {
  EXPECT_EQ(reusable_prefix(Tokens{1, 2, 3}, Tokens{1, 2, 3}), 2u);     // identical: n_past--
  EXPECT_EQ(reusable_prefix(Tokens{1, 2, 3, 4}, Tokens{1, 2, 3}), 2u);  // prompt inside the cache
  EXPECT_EQ(reusable_prefix(Tokens{1, 2}, Tokens{1, 2, 3, 4}), 2u);     // extension: all of the cache
  EXPECT_EQ(reusable_prefix(Tokens{1, 9, 3}, Tokens{1, 2, 3}), 1u);     // divergence
  EXPECT_EQ(reusable_prefix(Tokens{1}, Tokens{1}), 0u);
  EXPECT_EQ(reusable_prefix(Tokens{1}, Tokens{}), 0u);
}

// Decodes `tokens` into sequence `seq` as the scheduler does and records them in the cache.
void evaluate(Context& ctx, PromptCache& cache, memory::SeqId seq, const Tokens& tokens) {
  Batch b;
  b.add_sequence(tokens.data(), tokens.size(), static_cast<memory::Pos>(cache.size()), seq, true);
  ASSERT_EQ(ctx.decode(b), 0);
  for (Token t : tokens) cache.append(t);
}

ContextParams small_context() {
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_seq_max = 2;
  cp.n_threads = 1;
  return cp;
}

TEST(PromptReuse, DenseMemoryKeepsThePrefixAndDropsTheRest) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen3-micro.gguf");
  Context ctx(*model, small_context());
  PromptCache cache;
  evaluate(ctx, cache, 1, {10, 11, 12, 13, 14});

  ReuseResult r = cache.reuse_for(Tokens{10, 11, 12, 20, 21}, true, ctx.memory(), 1);
  EXPECT_EQ(r.n_cached, 5u);
  EXPECT_EQ(r.n_common, 3u);
  EXPECT_EQ(r.n_kept, 3u);
  EXPECT_FALSE(r.state_refused);
  EXPECT_EQ(cache.tokens(), (Tokens{10, 11, 12}));
  EXPECT_EQ(ctx.memory().seq_pos_max(1), 2);  // memory agrees with the cache
  EXPECT_EQ(ctx.memory().seq_pos_max(0), -1);  // other sequences untouched

  // Identical prompt: the last token is dropped so that it is evaluated again.
  r = cache.reuse_for(Tokens{10, 11, 12}, true, ctx.memory(), 1);
  EXPECT_EQ(r.n_kept, 2u);
  EXPECT_EQ(ctx.memory().seq_pos_max(1), 1);

  // cache_prompt=false: nothing is kept.
  r = cache.reuse_for(Tokens{10, 11}, false, ctx.memory(), 1);
  EXPECT_EQ(r.n_kept, 0u);
  EXPECT_TRUE(cache.tokens().empty());
  EXPECT_EQ(ctx.memory().seq_pos_max(1), -1);
}

// Logits of the last token of `tokens` evaluated from scratch in a context of its own (then
// `more` as a second batch, when given).
std::vector<float> fresh_logits(const Model& model, const Tokens& tokens, const Tokens& more = {}) {
  Context ctx(model, small_context());
  Batch b;
  b.add_sequence(tokens.data(), tokens.size(), 0, 0, true);
  EXPECT_EQ(ctx.decode(b), 0);
  if (!more.empty()) {
    Batch b2;
    b2.add_sequence(more.data(), more.size(), static_cast<memory::Pos>(tokens.size()), 0, true);
    EXPECT_EQ(ctx.decode(b2), 0);
  }
  return std::vector<float>(ctx.last_logits(), ctx.last_logits() + model.n_vocab());
}

TEST(PromptReuse, HybridMemoryRollsBackToTheSnapshotBeforeTheDivergence) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen35moe-micro.gguf");
  Context ctx(*model, small_context());
  PrefixCacheConfig pc;
  pc.page_tokens = 2;
  pc.holder = 1;  // sequence 1 holds the cached pages
  ASSERT_NE(ctx.enable_prefix_cache(pc), nullptr);
  PrefixCache& prefix_cache = *ctx.prefix_cache();
  PromptCache cache;
  evaluate(ctx, cache, 0, {10, 11, 12, 13});
  ASSERT_TRUE(prefix_cache.snapshot(0, cache.tokens(), 0));  // end of the first prompt
  evaluate(ctx, cache, 0, {14, 15});

  ReuseResult r = cache.reuse_for(Tokens{10, 11, 12, 13, 20}, true, ctx.memory(), 0, &prefix_cache);
  EXPECT_EQ(r.n_common, 4u);
  EXPECT_EQ(r.n_kept, 4u);
  EXPECT_TRUE(r.checkpoint_restored);
  EXPECT_FALSE(r.state_refused);
  EXPECT_EQ(cache.tokens(), (Tokens{10, 11, 12, 13}));
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 3);

  // Evaluating the new token on the restored state gives what a fresh run split the same way
  // gives, bit for bit (one batch for the checkpointed prefix, then the token alone: a batch of
  // 5 would take other kernels, with llama.cpp's other float orders).
  evaluate(ctx, cache, 0, {20});
  const std::vector<float> expected = fresh_logits(*model, {10, 11, 12, 13}, {20});
  for (int64_t i = 0; i < model->n_vocab(); ++i) ASSERT_EQ(ctx.last_logits()[i], expected[i]) << i;

  // No snapshot before position 2: start over.
  r = cache.reuse_for(Tokens{10, 99}, true, ctx.memory(), 0, &prefix_cache);
  EXPECT_EQ(r.n_kept, 0u);
  EXPECT_TRUE(r.state_refused);
}

TEST(PromptReuse, SavedLogitsAnswerTheSamePromptWithoutEvaluation) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen3-micro.gguf");
  Context ctx(*model, small_context());
  PromptCache cache;
  evaluate(ctx, cache, 0, {10, 11, 12});
  cache.keep_logits({ctx.last_logits(), static_cast<size_t>(model->n_vocab())});
  evaluate(ctx, cache, 0, {13});

  ReuseResult r = cache.reuse_for(Tokens{10, 11, 12}, true, ctx.memory(), 0);
  EXPECT_TRUE(r.use_saved_logits);
  EXPECT_EQ(r.n_kept, 3u);
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 2);
  EXPECT_EQ(cache.saved_logits(3).size(), static_cast<size_t>(model->n_vocab()));

  // A shorter prompt forgets the logits of the longer one.
  r = cache.reuse_for(Tokens{10, 11}, true, ctx.memory(), 0);
  EXPECT_FALSE(r.use_saved_logits);
  EXPECT_EQ(r.n_kept, 1u);
  EXPECT_TRUE(cache.saved_logits(3).empty());
}

TEST(Base64, Rfc4648Vectors) {
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    const std::vector<uint8_t> bytes(plain.begin(), plain.end());
    EXPECT_EQ(base64_encode(bytes), encoded);
    EXPECT_EQ(base64_decode(encoded, "test"), bytes);
  }
  EXPECT_THROW(base64_decode("Zm9", "test"), Error);
  EXPECT_THROW(base64_decode("Zm9v!A==", "test"), Error);
  EXPECT_THROW(base64_decode("Zg==Zg==", "test"), Error);
}

TEST(PromptReuse, HybridMemoryReusesExtensionsButRestartsOnDivergence) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen35-micro.gguf");
  Context ctx(*model, small_context());
  PromptCache cache;
  evaluate(ctx, cache, 0, {10, 11, 12, 13});

  // An extension needs no removal: the recurrent state already holds exactly the cache.
  ReuseResult r = cache.reuse_for(Tokens{10, 11, 12, 13, 14, 15}, true, ctx.memory(), 0);
  EXPECT_EQ(r.n_kept, 4u);
  EXPECT_FALSE(r.state_refused);
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 3);

  // A divergence inside the cache cannot be undone in a recurrent state: start over.
  r = cache.reuse_for(Tokens{10, 11, 99}, true, ctx.memory(), 0);
  EXPECT_EQ(r.n_common, 2u);
  EXPECT_EQ(r.n_kept, 0u);
  EXPECT_TRUE(r.state_refused);
  EXPECT_TRUE(cache.tokens().empty());
  EXPECT_EQ(ctx.memory().seq_pos_max(0), -1);
}

std::vector<SlotCandidate> three_slots(const Tokens& a, const Tokens& b, const Tokens& c) {
  static Tokens store[3];
  store[0] = a;
  store[1] = b;
  store[2] = c;
  return {{0, true, store[0], 5, ""}, {1, true, store[1], 3, ""}, {2, true, store[2], 7, ""}};
}

TEST(SlotChoice, PrefersTheLongestSharedPrefixAboveTheThreshold) {
  auto slots = three_slots({1, 2, 3}, {1, 2, 3, 4, 5}, {9});
  const Tokens prompt{1, 2, 3, 4, 6};
  SlotChoice c = choose_slot(slots, {prompt, -1, ""}, 0.10);
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.reason, SlotReason::Prefix);
  EXPECT_DOUBLE_EQ(c.similarity, 0.8);
  // Below the threshold the least recently used idle slot wins.
  c = choose_slot(slots, {prompt, -1, ""}, 0.90);
  EXPECT_EQ(c.slot, 1);  // last_used 3 is the oldest
  EXPECT_EQ(c.reason, SlotReason::LeastRecentlyUsed);
  slots[1].idle = false;
  c = choose_slot(slots, {prompt, -1, ""}, 0.10);
  EXPECT_EQ(c.slot, 0);
  EXPECT_EQ(c.reason, SlotReason::Prefix);
  c = choose_slot(slots, {Tokens{7, 7}, -1, ""}, 0.10);
  EXPECT_EQ(c.slot, 0);  // no prefix anywhere: LRU among idle (0 used at 5, 2 at 7)
  EXPECT_EQ(c.reason, SlotReason::LeastRecentlyUsed);
}

TEST(SlotChoice, ExplicitSlotWaitsUntilIdle) {
  auto slots = three_slots({1}, {1}, {1});
  EXPECT_EQ(choose_slot(slots, {Tokens{1}, 2, ""}, 0.1).slot, 2);
  EXPECT_EQ(choose_slot(slots, {Tokens{1}, 2, ""}, 0.1).reason, SlotReason::Requested);
  slots[2].idle = false;
  EXPECT_EQ(choose_slot(slots, {Tokens{1}, 2, ""}, 0.1).slot, -1);
  slots[0].idle = slots[1].idle = false;
  EXPECT_EQ(choose_slot(slots, {Tokens{1}, -1, ""}, 0.1).slot, -1);  // nothing idle: queue
}

TEST(SlotChoice, SessionsStayOnTheirSlotAndOthersAvoidBoundSlots) {
  auto slots = three_slots({1, 2, 3}, {5}, {6});
  slots[0].session_id = "alice";
  // A request of another conversation with the same prefix does not take alice's slot...
  SlotChoice c = choose_slot(slots, {Tokens{1, 2, 3, 4}, -1, ""}, 0.10);
  EXPECT_NE(c.slot, 0);
  // ...alice gets her slot back even though another slot is older...
  c = choose_slot(slots, {Tokens{8}, -1, "alice"}, 0.10);
  EXPECT_EQ(c.slot, 0);
  EXPECT_EQ(c.reason, SlotReason::Session);
  // ...and waits for it while it is busy.
  slots[0].idle = false;
  EXPECT_EQ(choose_slot(slots, {Tokens{8}, -1, "alice"}, 0.10).slot, -1);
  // A new session takes an unbound slot; when all idle slots are bound, the LRU one is taken.
  slots[0].idle = true;
  slots[1].session_id = "bob";
  slots[2].session_id = "carol";
  c = choose_slot(slots, {Tokens{8}, -1, "dave"}, 0.10);
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.reason, SlotReason::LeastRecentlyUsed);
}

}  // namespace
}  // namespace agentkv::server
