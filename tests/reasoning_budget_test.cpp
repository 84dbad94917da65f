// The reasoning budget (server/reasoning_budget.h): random token streams against a simple model of
// the rule — after `budget` tokens inside reasoning blocks (all blocks of an answer together), the
// end tokens are forced one by one; a block the model closes itself stops the count; 0 forces the
// end as soon as a block opens; a prompt that opened the block counts from the first token.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "server/reasoning_budget.h"

namespace agentkv::server {
namespace {

// Token ids of a toy vocabulary: 0..9 plain text "a".."j", 10 = "<think>", 11 = "</think>".
std::string piece(int32_t id) {
  if (id == 10) return "<think>";
  if (id == 11) return "</think>";
  return std::string(1, static_cast<char>('a' + id));
}

TEST(ReasoningBudget, RandomStreamsFollowTheRule) {
  std::mt19937 rng(5);
  for (int run = 0; run < 2000; ++run) {
    const int budget = std::uniform_int_distribution<int>(0, 6)(rng);
    const bool open = rng() % 2;
    ReasoningBudget b(budget, "<think>", "</think>", {11}, open);
    bool inside = open;
    int used = 0;
    for (int step = 0; step < 40; ++step) {
      const int32_t forced = b.forced();
      // The model: the rule says a block past its budget must close now.
      const bool must_close = inside && used >= budget;
      ASSERT_EQ(forced, must_close ? 11 : -1) << "run " << run << " step " << step << " used " << used;
      int32_t id = forced;
      if (id < 0) {
        const int r = std::uniform_int_distribution<int>(0, 9)(rng);
        id = r == 0 ? 10 : r == 1 ? 11 : r;  // sometimes a tag
      }
      b.accept(id, piece(id));
      if (inside) {
        if (id == 11) inside = false;
        else ++used;
      } else if (id == 10) {
        inside = true;
      }
      ASSERT_EQ(b.used(), used);
    }
  }
}

TEST(ReasoningBudget, EndOfSeveralTokensIsForcedInOrder) {
  ReasoningBudget b(2, "<|channel|>analysis<|message|>", "<|end|><|start|>assistant", {7, 8, 9}, false);
  b.accept(1, "<|channel|>");
  b.accept(2, "analysis");
  EXPECT_EQ(b.forced(), -1);
  b.accept(3, "<|message|>");
  b.accept(4, "x");
  EXPECT_EQ(b.forced(), -1);
  b.accept(4, "y");
  EXPECT_EQ(b.forced(), 7);
  b.accept(7, "<|end|>");
  EXPECT_EQ(b.forced(), 8);
  b.accept(8, "<|start|>");
  EXPECT_EQ(b.forced(), 9);
  b.accept(9, "assistant");
  EXPECT_EQ(b.forced(), -1);  // the answer is free again
  b.accept(5, "<|channel|>final<|message|>hello");
  EXPECT_EQ(b.forced(), -1);
}

TEST(ReasoningBudget, AbandonedWhenTheEndCannotBeWritten) {
  ReasoningBudget b(0, "<think>", "</think>", {11}, true);
  EXPECT_EQ(b.forced(), 11);
  b.abandon();
  EXPECT_EQ(b.forced(), -1);
  b.accept(3, "d");
  EXPECT_EQ(b.forced(), -1);
}

}  // namespace
}  // namespace agentkv::server
