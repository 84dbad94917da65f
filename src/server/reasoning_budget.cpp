#include "server/reasoning_budget.h"

#include <utility>

namespace agentkv::server {

ReasoningBudget::ReasoningBudget(int32_t budget, std::string start, std::string end, std::vector<int32_t> end_tokens,
                                 bool open)
    : budget_(budget), start_(std::move(start)), end_(std::move(end)), end_tokens_(std::move(end_tokens)) {
  if (end_tokens_.empty()) state_ = State::Done;  // nothing to force
  else if (open) enter();
}

void ReasoningBudget::enter() {
  text_.clear();
  state_ = used_ >= budget_ ? State::Forcing : State::Inside;
  next_forced_ = 0;
}

int32_t ReasoningBudget::forced() const {
  return state_ == State::Forcing && next_forced_ < end_tokens_.size() ? end_tokens_[next_forced_] : -1;
}

void ReasoningBudget::accept(int32_t id, const std::string& piece) {
  switch (state_) {
    case State::Done:
      return;
    case State::Forcing:
      if (next_forced_ < end_tokens_.size() && id == end_tokens_[next_forced_] && ++next_forced_ == end_tokens_.size()) {
        state_ = State::Before;  // the block is closed: a later one counts against what is left
        text_.clear();
      }
      return;
    case State::Inside:
      text_ += piece;
      if (text_.find(end_) != std::string::npos) {  // the model closed it itself
        state_ = State::Before;
        text_.clear();
        return;
      }
      if (++used_ >= budget_) {
        state_ = State::Forcing;
        next_forced_ = 0;
      }
      return;
    case State::Before:
      text_ += piece;
      if (text_.find(start_) != std::string::npos) enter();
      else if (text_.size() > 4 * start_.size() + 64) text_.erase(0, text_.size() - start_.size());
      return;
  }
}

}  // namespace agentkv::server
