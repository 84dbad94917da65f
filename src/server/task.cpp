#include "server/task.h"

namespace agentkv::server {

const char* stop_type_name(StopType s) {
  switch (s) {
    case StopType::None: return "none";
    case StopType::Eos: return "eos";
    case StopType::Word: return "word";
    case StopType::Limit: return "limit";
  }
  return "none";
}

Json Timings::to_json() const {
  // Rates of an empty phase are reported as 0 rather than inf/NaN (JSON has neither).
  auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto per_second = [](double ms, int64_t n) { return ms > 0.0 ? 1e3 / ms * static_cast<double>(n) : 0.0; };
  Json out{
      {"cache_n", cache_n},
      {"prompt_n", prompt_n},
      {"prompt_ms", prompt_ms},
      {"prompt_per_token_ms", per_token(prompt_ms, prompt_n)},
      {"prompt_per_second", per_second(prompt_ms, prompt_n)},
      {"predicted_n", predicted_n},
      {"predicted_ms", predicted_ms},
      {"predicted_per_token_ms", per_token(predicted_ms, predicted_n)},
      {"predicted_per_second", per_second(predicted_ms, predicted_n)},
  };
  if (draft_n > 0) {
    out["draft_n"] = draft_n;
    out["draft_n_accepted"] = draft_n_accepted;
  }
  return out;
}

void TaskChannel::push(TaskEvent e) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::vector<TaskEvent> TaskChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<TaskEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

}  // namespace agentkv::server
