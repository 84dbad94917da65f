// Exact speculative decoding, greedy (agentkv/speculative.h): with batch-invariant numerics every
// output of a verification loop equals greedy decoding one token at a time — whatever the drafts
// (the target's own next tokens, the same with random corruptions, n-gram lookups, k = 1..8) — and
// the memory ends holding exactly the accepted positions: dense, Gemma 3's window memory, and a
// hybrid whose recurrent state rolls back through a snapshot. The n-gram source against a brute-force
// reference on random histories.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "agentkv/batch.h"
#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/make_model.h"
#include "agentkv/numerics.h"
#include "agentkv/sampling.h"
#include "agentkv/speculative.h"
#include "fixture_models.h"

namespace agentkv {
namespace {

// One lookup written out plainly: longest n first, latest occurrence first, what follows it.
std::vector<Token> brute_lookup(const std::vector<Token>& h, size_t k, size_t max_n, size_t min_n) {
  for (size_t n = max_n; n >= min_n; --n) {
    if (n + 1 > h.size()) continue;
    for (size_t s = h.size() - n; s-- > 0;) {
      bool same = true;
      for (size_t j = 0; j < n; ++j) same = same && h[s + j] == h[h.size() - n + j];
      if (!same) continue;
      std::vector<Token> out;
      for (size_t j = s + n; j < h.size() && out.size() < k; ++j) out.push_back(h[j]);
      return out;
    }
  }
  return {};
}

// The draft: lookups, each on the history extended by the drafts before, until k or none found.
std::vector<Token> brute_ngram(std::vector<Token> h, size_t k, size_t max_n, size_t min_n) {
  std::vector<Token> out;
  while (out.size() < k) {
    const std::vector<Token> run = brute_lookup(h, k - out.size(), max_n, min_n);
    if (run.empty()) break;
    out.insert(out.end(), run.begin(), run.end());
    h.insert(h.end(), run.begin(), run.end());
  }
  return out;
}

TEST(NgramDraft, MatchesTheRuleOnRandomHistories) {
  std::mt19937 rng(3);
  for (int run = 0; run < 3000; ++run) {
    std::vector<Token> h(std::uniform_int_distribution<size_t>(0, 40)(rng));
    const int alphabet = std::uniform_int_distribution<int>(2, 6)(rng);
    for (Token& t : h) t = std::uniform_int_distribution<Token>(0, alphabet - 1)(rng);
    const size_t k = std::uniform_int_distribution<size_t>(0, 8)(rng);
    ASSERT_EQ(ngram_draft(h, k, 4, 2), brute_ngram(h, k, 4, 2)) << "run " << run;
  }
  const std::vector<Token> text = {1, 2, 3, 4, 5, 9, 1, 2, 3};
  EXPECT_EQ(ngram_draft(text, 3), (std::vector<Token>{4, 5, 9}));
  EXPECT_TRUE(ngram_draft(text, 0).empty());
  // A repeating stretch drafts its period on, not just what follows its latest occurrence.
  EXPECT_EQ(ngram_draft(std::vector<Token>{7, 1, 2, 3, 1, 2, 3}, 7), (std::vector<Token>{1, 2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(ngram_draft(std::vector<Token>{9, 5, 5, 5}, 4), (std::vector<Token>{5, 5, 5, 5}));
}


struct BatchInvariant {
  BatchInvariant() { set_batch_invariant(true); }
  ~BatchInvariant() { set_batch_invariant(false); }
};

ContextParams params() {
  ContextParams p;
  p.n_ctx = 1024;
  p.n_threads = 2;
  return p;
}

// Greedy decoding one token at a time after `prompt`: the n tokens it writes.
std::vector<Token> plain_greedy(const Model& m, const std::vector<Token>& prompt, size_t n) {
  Context ctx(m, params());
  Batch b;
  b.add_sequence(prompt.data(), prompt.size(), 0, 0, true);
  EXPECT_EQ(ctx.decode(b), 0);
  std::vector<Token> out = {argmax_token(ctx.last_logits(), m.n_vocab())};
  while (out.size() < n) {
    b.clear();
    b.add(out.back(), static_cast<MemoryPos>(prompt.size() + out.size() - 1), {0}, true);
    EXPECT_EQ(ctx.decode(b), 0);
    out.push_back(argmax_token(ctx.last_logits(), m.n_vocab()));
  }
  return out;
}

void check_exact(const Model& m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Token> prompt(40);
  for (Token& t : prompt) t = std::uniform_int_distribution<Token>(100, 5000)(rng);
  prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 20);  // something for the n-gram source
  const size_t n = 48;
  const std::vector<Token> expected = plain_greedy(m, prompt, n);
  for (int source = 0; source < 4; ++source) {  // 0: oracle, 1: oracle with corruptions, 2: n-gram, 3: all wrong
    for (size_t k = 1; k <= 8; k *= 2) {
      Context ctx(m, params());
      Batch b;
      b.add_sequence(prompt.data(), prompt.size(), 0, 0, true);
      ASSERT_EQ(ctx.decode(b), 0);
      std::vector<Token> out = {argmax_token(ctx.last_logits(), m.n_vocab())};
      std::vector<Token> history = prompt;
      size_t accepted = 0, drafted = 0, evaluated = prompt.size();
      while (out.size() < n) {
        std::vector<Token> drafts;
        if (source < 2) {
          for (size_t j = out.size(); j < std::min(n, out.size() + k); ++j) drafts.push_back(expected[j]);
          if (source == 1)
            for (Token& d : drafts)
              if (rng() % 3 == 0) d = static_cast<Token>(rng() % 5000);
        } else if (source == 3) {
          for (size_t j = out.size(); j < std::min(n, out.size() + k); ++j) drafts.push_back(expected[j] + 1);
        } else {
          std::vector<Token> h = history;
          h.insert(h.end(), out.begin(), out.end());
          drafts = ngram_draft(h, k);
        }
        const VerifiedStep step = verify_greedy(ctx, 0, out.back(), drafts);
        evaluated += 1 + drafts.size();
        ASSERT_EQ(step.tokens.size(), step.n_accepted + 1);
        drafted += drafts.size();
        accepted += step.n_accepted;
        out.insert(out.end(), step.tokens.begin(), step.tokens.end());
      }
      // The memory holds the prompt and every chosen token but the last (not evaluated yet):
      // the rejected drafts' positions are gone.
      EXPECT_EQ(ctx.memory().seq_pos_max(0) + 1, static_cast<MemoryPos>(prompt.size() + out.size() - 1));
      // One pass per step and nothing more: a hybrid's rejected drafts are undone by replaying the
      // accepted tokens' recurrence from the pass's inputs, not by evaluating them again.
      EXPECT_EQ(ctx.stats().n_tokens, static_cast<int64_t>(evaluated)) << "source " << source << " k " << k;
      out.resize(n);
      ASSERT_EQ(out, expected) << "source " << source << " k " << k;
      if (source == 0) EXPECT_EQ(accepted, drafted) << "the target's own tokens are all accepted";
      std::printf("source %d k %zu: %zu of %zu drafts accepted\n", source, k, accepted, drafted);
    }
  }
}

TEST(Speculative, GreedyExactOnTheDenseFixture) {
  AGENTKV_NEEDS_FIXTURES();
  BatchInvariant on;
  check_exact(testing_support::fixture_model("qwen3-micro"), 1);
}

TEST(Speculative, GreedyExactWithASlidingWindowMemory) {
  AGENTKV_NEEDS_FIXTURES();
  BatchInvariant on;
  auto m = testing_support::preset_model("gemma3-micro", "spec");
  check_exact(*m, 2);
}

TEST(Speculative, GreedyExactOnAHybridRolledBackThroughItsTape) {
  AGENTKV_NEEDS_FIXTURES();
  BatchInvariant on;
  check_exact(testing_support::fixture_model("qwen35-micro"), 3);
}

TEST(Speculative, TooManyDraftsAreRefusedBeforeAnythingIsEvaluated) {
  AGENTKV_NEEDS_FIXTURES();
  const Model& m = testing_support::fixture_model("qwen3-micro");
  Context ctx(m, params());
  Batch b;
  const std::vector<Token> prompt = {100, 200, 300};
  b.add_sequence(prompt.data(), prompt.size(), 0, 0, true);
  ASSERT_EQ(ctx.decode(b), 0);
  const std::vector<Token> drafts(kMaxDraft + 1, 5);
  EXPECT_THROW(verify_greedy(ctx, 0, 7, drafts), Error);
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 2);
  EXPECT_EQ(max_drafts(m.config()), kMaxDraft);
}

TEST(Speculative, AWindowModelTakesAtMostWhatItsWindowCanDrop) {
  AGENTKV_NEEDS_FIXTURES();
  auto m = testing_support::preset_model("gemma3-micro", "spec");
  ASSERT_EQ(max_drafts(m->config()), kMaxWindowDraft);
  Context ctx(*m, params());
  Batch b;
  const std::vector<Token> prompt = {100, 200, 300};
  b.add_sequence(prompt.data(), prompt.size(), 0, 0, true);
  ASSERT_EQ(ctx.decode(b), 0);
  EXPECT_THROW(verify_greedy(ctx, 0, 7, std::vector<Token>(kMaxWindowDraft + 1, 5)), Error);
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 2);
  // The most it takes: the memory ends at `next` and the accepted drafts, the rest dropped in place.
  const VerifiedStep step = verify_greedy(ctx, 0, 7, std::vector<Token>(kMaxWindowDraft, 5));
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 3 + static_cast<MemoryPos>(step.n_accepted));
}

}  // namespace
}  // namespace agentkv
