// A reasoning budget (llama-server's --reasoning-budget and the request's reasoning_budget_tokens /
// thinking_budget_tokens): once the model has written `budget` tokens inside its reasoning block
// (Qwen's <think>, gpt-oss's analysis channel), the block's end is forced, token by token, and the
// answer follows. 0 ends the block as soon as it opens; -1 (no budget) is not made into one.
// The budget counts every reasoning block of one answer together.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace agentkv::server {

class ReasoningBudget {
 public:
  // start / end: the block's tags as text (special tokens included); end_tokens: end tokenized
  // with its special tokens; open: the prompt already opened the block.
  ReasoningBudget(int32_t budget, std::string start, std::string end, std::vector<int32_t> end_tokens, bool open);

  // The token to write next instead of sampling, or -1.
  int32_t forced() const;
  // Every generated token (sampled or forced), with its text (special tokens rendered).
  void accept(int32_t id, const std::string& piece);
  // The forced token cannot be written (the grammar refuses it): the budget stops forcing.
  void abandon() { state_ = State::Done; }
  // Tokens written inside reasoning blocks so far.
  int32_t used() const { return used_; }

 private:
  enum class State { Before, Inside, Forcing, Done };
  void enter();

  int32_t budget_;
  std::string start_, end_;
  std::vector<int32_t> end_tokens_;
  State state_ = State::Before;
  int32_t used_ = 0;
  size_t next_forced_ = 0;
  std::string text_;  // since the last state change: where a tag is looked for
};

}  // namespace agentkv::server
