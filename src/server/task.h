// A completion task travelling from an HTTP handler thread to the scheduler thread, and the
// channel its results travel back on (tokens as they are produced, then one final result or an
// error). The HTTP side cancels through the channel when its client goes away.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agentkv/vision.h"
#include "server/completion_params.h"
#include "server/server_error.h"

namespace agentkv::server {

enum class StopType { None, Eos, Word, Limit };
const char* stop_type_name(StopType s);  // llama-server's "none" / "eos" / "word" / "limit"

// llama-server's timings object. prompt_ms runs from the start of prompt processing to the first
// sampled token; predicted_ms from there to the end.
struct Timings {
  int64_t cache_n = 0;      // prompt tokens reused from the slot's cache
  int64_t prompt_n = 0;     // prompt tokens evaluated
  double prompt_ms = 0.0;
  int64_t predicted_n = 0;  // tokens generated
  double predicted_ms = 0.0;
  int64_t draft_n = 0;           // speculative decoding: drafts tried (shown when > 0, as llama-server)
  int64_t draft_n_accepted = 0;  // ... and accepted
  Json to_json() const;
};

// A generated token's log-probability and the most likely tokens at its step (n_probs /
// logprobs): log-softmax of the logits the sampler saw (logit_bias included), before the
// sampling filters, as llama-server reports them; with post_sampling_probs, the log of the
// distribution the token was drawn from (after top-k / top-p / min-p and temperature).
struct TokenProbs {
  Token id = -1;
  std::string text;
  bool post_sampling = false;  // written as "prob" / "top_probs" (llama-server's names)
  float logprob = 0.0f;
  std::vector<std::pair<Token, float>> top;
  std::vector<std::string> top_text;
};

// llama-server's prompt_progress (return_progress): prompt tokens in all, from the cache, and in
// memory so far (cache included), and the time since the prompt started.
struct PromptProgress {
  int64_t total = 0, cache = 0, processed = 0;
  double time_ms = 0;
};

struct TokenEvent {
  std::string text;  // text released by this token (may be empty while a stop string is pending)
  // Token ids released with this event (return_tokens): every one since the last event, also
  // those whose text was empty or held back (a pending stop string, an incomplete UTF-8 character).
  std::vector<Token> tokens;
  int32_t n_decoded = 0;
  int32_t id_slot = -1;
  int32_t n_prompt = 0;
  std::optional<Timings> timings;  // with timings_per_token
  std::vector<TokenProbs> probs;   // tokens released with this event (n_probs / logprobs)
  std::optional<PromptProgress> progress;  // set: a prompt-progress event (no token)
};

struct FinalResult {
  std::string content;
  std::vector<Token> tokens;  // generated tokens (with return_tokens)
  StopType stop = StopType::None;
  std::string stopping_word;
  bool truncated = false;
  bool has_new_line = false;
  int32_t id_slot = -1;
  int32_t n_prompt = 0;    // prompt length (tokens_evaluated)
  int32_t n_decoded = 0;   // tokens_predicted
  int32_t n_cached = 0;    // tokens the slot's cache holds afterwards (tokens_cached)
  Timings timings;
  std::vector<uint8_t> state;  // the slot's saved state (tasks with return_state)
  std::vector<TokenProbs> probs;  // every generated token's (not streamed) or those not yet sent (streamed)
  std::vector<std::vector<float>> embedding;  // embedding servers: the pooled rows (not normalized)
};

struct TaskEvent {
  enum class Kind { Token, Final, Error } kind = Kind::Token;
  TokenEvent token;
  FinalResult final;
  std::optional<HttpError> error;
};

class TaskChannel {
 public:
  void push(TaskEvent e);
  // Waits until an event arrives or `timeout` passes; returns everything pending.
  std::vector<TaskEvent> wait(std::chrono::milliseconds timeout);
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<TaskEvent> events_;
  std::atomic<bool> cancelled_{false};
};

// A prompt's images: their rows in the prompt (image_row_token ids there) and their embeddings,
// projected on first use: an image whose rows the memory already holds (cached pages, a page
// tier, a restored state) never goes through the projector (VisionEncoder::prepare / project).
struct PromptImages {
  std::vector<ImageSpan> spans;
  mutable std::vector<ImageEmbedding> images;  // images[k] fills spans[k]
  const VisionEncoder* encoder = nullptr;      // what projects them
  // Row r of image k (n_embd floats), the image projected first if it was not. The scheduler's
  // thread only.
  const float* row(size_t k, int64_t r) const;
};

struct Task {
  uint64_t id = 0;
  std::vector<Token> prompt;
  std::shared_ptr<const PromptImages> images;  // null: a text prompt
  CompletionParams params;
  std::shared_ptr<TaskChannel> channel = std::make_shared<TaskChannel>();
  // Scheduler only: the task was taken off its slot because memory ran out while it read its
  // prompt; it waits until no other slot is busy.
  bool deferred_for_memory = false;
  // POST /v1/prefill: when the task ends, the slot's state (session_state.h) comes back in
  // FinalResult::state.
  bool return_state = false;
  // Hybrid models: prompt lengths (token counts) after which the recurrent state is worth keeping
  // because other prompts are likely to diverge there (the end of the system messages).
  std::vector<size_t> snapshot_points;
};

}  // namespace agentkv::server
