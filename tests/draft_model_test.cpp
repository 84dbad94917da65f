// The draft model (agentkv/draft_model.h): a property test against a plain reference — random
// histories per sequence that grow, branch back and start over, one sequence or several drafted at
// once (one batch per draft position) —
// where each draft must equal the greedy continuation a fresh context computes from the whole
// history (batch-invariant numerics, p_min 0), on a dense model, a hybrid (recurrent state rolled
// back after each draft) and Gemma 3 (window memory); p_min ends a draft at the first token below
// it; the vocabulary check refuses what llama.cpp refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <random>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/draft_model.h"
#include "agentkv/error.h"
#include "agentkv/numerics.h"
#include "agentkv/sampling.h"
#include "fixture_models.h"

namespace agentkv {
namespace {

struct BatchInvariant {
  BatchInvariant() { set_batch_invariant(true); }
  ~BatchInvariant() { set_batch_invariant(false); }
};

struct Continuation {
  std::vector<Token> tokens;
  std::vector<float> top_prob;  // the probability the model gave each
};

// Greedy continuation of `history` by a fresh context, k tokens, with each one's probability.
Continuation reference(const Model& m, const std::vector<Token>& history, size_t k) {
  ContextParams p;
  p.n_ctx = 512;
  Context ctx(m, p);
  Batch b;
  b.add_sequence(history.data(), history.size(), 0, 0, true);
  EXPECT_EQ(ctx.decode(b), 0);
  Continuation c;
  while (c.tokens.size() < k) {
    const float* l = ctx.last_logits();
    const Token t = argmax_token(l, m.n_vocab());
    double sum = 0.0;
    for (int64_t i = 0; i < m.n_vocab(); ++i) sum += std::exp(static_cast<double>(l[i] - l[t]));
    c.tokens.push_back(t);
    c.top_prob.push_back(static_cast<float>(1.0 / sum));
    b.clear();
    b.add(t, static_cast<MemoryPos>(history.size() + c.tokens.size() - 1), {0}, true);
    EXPECT_EQ(ctx.decode(b), 0);
  }
  return c;
}

void check_against_reference(const Model& m, uint32_t seed) {
  BatchInvariant on;
  DraftModelParams p;
  p.n_seq = 3;
  p.n_ctx = 1024;
  DraftModel drafter(m, m, p);
  std::mt19937 rng(seed);
  std::vector<std::vector<Token>> histories(p.n_seq);
  auto random_token = [&] { return std::uniform_int_distribution<Token>(1, static_cast<Token>(m.n_vocab() - 1))(rng); };
  size_t together = 0;
  for (int step = 0; step < 24; ++step) {
    // One sequence or several at once (one batch per draft position over all of them).
    std::vector<MemorySeqId> seqs = {0, 1, 2};
    std::shuffle(seqs.begin(), seqs.end(), rng);
    seqs.resize(std::uniform_int_distribution<size_t>(1, 3)(rng));
    const int64_t evaluated_before = drafter.stats().n_tokens;
    bool grown = true;  // every history only gained tokens after what the draft memory holds
    int64_t expected_cost = 0;
    std::vector<DraftAsk> asks;
    for (MemorySeqId seq : seqs) {
      std::vector<Token>& h = histories[static_cast<size_t>(seq)];
      const int op = std::uniform_int_distribution<int>(0, 9)(rng);
      if (op < 6 || h.size() < 4) {  // the target accepted some tokens and chose the next
        grown = grown && !h.empty();
        const size_t added = std::uniform_int_distribution<size_t>(1, 5)(rng);
        for (size_t n = 0; n < added; ++n) h.push_back(random_token());
        expected_cost += static_cast<int64_t>(added);
      } else if (op < 9) {  // an earlier point and another branch (a new turn on the same slot)
        grown = false;
        h.resize(std::uniform_int_distribution<size_t>(1, h.size() - 1)(rng));
        h.push_back(random_token());
      } else {  // another conversation altogether
        grown = false;
        h.assign(3, 0);
        for (Token& t : h) t = random_token();
      }
      DraftAsk a;
      a.seq = seq;
      a.history = h;
      a.k = std::uniform_int_distribution<size_t>(1, 8)(rng);
      expected_cost += static_cast<int64_t>(a.k) - 1;
      asks.push_back(std::move(a));
    }
    if (asks.size() == 1) {
      asks[0].drafts = drafter.draft(asks[0].seq, asks[0].history, asks[0].k, 0.0f);
    } else {
      drafter.draft(asks);
      ++together;
    }
    for (const DraftAsk& a : asks)
      ASSERT_EQ(a.drafts, reference(m, a.history, a.k).tokens) << "step " << step << " seq " << a.seq << " of " << asks.size();
    // Grown histories cost only their new tokens and the drafts after the first (no start over:
    // a hybrid's state went back to the history's end, the drafts' K/V rows left).
    if (grown) EXPECT_EQ(drafter.stats().n_tokens - evaluated_before, expected_cost) << "step " << step;
  }
  EXPECT_GT(together, 5u);
  EXPECT_GT(drafter.ms_per_draft(), 0.0);
}

TEST(DraftModel, DraftsTheGreedyContinuationOfEveryHistoryDense) {
  AGENTKV_NEEDS_FIXTURES();
  check_against_reference(testing_support::fixture_model("qwen3-micro"), 1);
}

TEST(DraftModel, DraftsTheGreedyContinuationOfEveryHistoryHybrid) {
  AGENTKV_NEEDS_FIXTURES();
  check_against_reference(testing_support::fixture_model("qwen35-micro"), 2);
}

TEST(DraftModel, DraftsTheGreedyContinuationOfEveryHistoryWindow) {
  AGENTKV_NEEDS_FIXTURES();
  auto m = testing_support::preset_model("gemma3-micro", "draft");
  check_against_reference(*m, 3);
}

// Three sequences that do not fit the draft memory together: the batch that catches them up finds
// no room, and each is caught up alone (the others' draft memory dropped): the drafts are still
// each history's greedy continuation.
TEST(DraftModel, SequencesThatDoNotFitTogetherDraftOneAtATime) {
  AGENTKV_NEEDS_FIXTURES();
  BatchInvariant on;
  const Model& m = testing_support::fixture_model("qwen3-micro");
  DraftModelParams p;
  p.n_seq = 3;
  p.n_ctx = 64;
  DraftModel drafter(m, m, p);
  std::mt19937 rng(9);
  std::vector<DraftAsk> asks(3);
  for (size_t i = 0; i < asks.size(); ++i) {
    asks[i].seq = static_cast<MemorySeqId>(i);
    for (int n = 0; n < 30; ++n) asks[i].history.push_back(std::uniform_int_distribution<Token>(1, 5000)(rng));
    asks[i].k = 6;
  }
  drafter.draft(asks);
  for (const DraftAsk& a : asks) EXPECT_EQ(a.drafts, reference(m, a.history, a.k).tokens) << "seq " << a.seq;
}

TEST(DraftModel, ADraftEndsAtTheFirstTokenBelowPMin) {
  AGENTKV_NEEDS_FIXTURES();
  BatchInvariant on;
  const Model& m = testing_support::fixture_model("qwen3-micro");
  const std::vector<Token> history = {11, 22, 33, 44, 55};
  const Continuation c = reference(m, history, 8);
  // A floor between the probabilities: the draft is the run before the first token under it.
  std::vector<float> sorted = c.top_prob;
  std::sort(sorted.begin(), sorted.end());
  const float p_min = 0.5f * (sorted[3] + sorted[4]);
  size_t run = 0;
  while (run < c.tokens.size() && c.top_prob[run] >= p_min) ++run;
  DraftModel drafter(m, m, DraftModelParams{});
  EXPECT_EQ(drafter.draft(0, history, 8, p_min), std::vector<Token>(c.tokens.begin(), c.tokens.begin() + run));
  EXPECT_TRUE(drafter.draft(0, history, 8, 1.01f).empty());
  // Image rows (negative ids) are nothing a text model reads: no drafts.
  EXPECT_TRUE(drafter.draft(0, std::vector<Token>{11, -1, 22}, 4, 0.0f).empty());
  EXPECT_THROW(drafter.draft(1, history, 4, 0.0f), Error);
}

TEST(DraftModel, TheVocabularyCheckRefusesOtherVocabularies) {
  AGENTKV_NEEDS_FIXTURES();
  const Model& dense = testing_support::fixture_model("qwen3-micro");
  EXPECT_EQ(draft_model_mismatch(testing_support::fixture_model("qwen3-micro-q8_0"), dense), "");
  EXPECT_EQ(draft_model_mismatch(testing_support::fixture_model("qwen35-micro"), dense), "");
  auto gemma = testing_support::preset_model("gemma3-micro", "draft");
  const std::string why = draft_model_mismatch(*gemma, dense);
  EXPECT_FALSE(why.empty());
  EXPECT_THROW(DraftModel(*gemma, dense, DraftModelParams{}), Error);
  std::printf("gemma3 for qwen3: %s\n", why.c_str());
}

}  // namespace
}  // namespace agentkv
