// A slot: one sequence of the shared memory (slot id == sequence id) and the task it is serving,
// if any. Owned and touched by the scheduler thread only (the HTTP threads
// read it under the scheduler's lock).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agentkv/sampling.h"
#include "agentkv/pooling.h"
#include "server/grammar_run.h"
#include "server/draft_policy.h"
#include "server/reasoning_budget.h"
#include "server/task.h"

namespace agentkv::server {

enum class SlotState { Idle, Prompt, Generating };

struct Slot {
  using Clock = std::chrono::steady_clock;

  int id = 0;  // also its sequence in the memory, which keeps its cache (agentkv/request_memory.h)
  SlotState state = SlotState::Idle;
  uint64_t last_used = 0;   // scheduler's use counter when the slot last finished a task
  std::string session_id;   // session bound to this slot ("" if none)
  uint64_t n_shifts = 0;    // context shifts of this slot since the server started (/slots)
  uint64_t n_evicted = 0;   // ... and the positions they dropped

  // The task being served (state != Idle).
  std::shared_ptr<Task> task;
  size_t n_prompt_done = 0;   // prompt tokens in memory; prompt[n_prompt_done] is evaluated next
  size_t n_cache_reused = 0;  // prompt tokens that came from the cache (timings.cache_n)
  std::optional<Sampler> sampler;
  std::vector<float> biased_logits;  // the logits row plus the task's logit_bias (sampled instead)
  std::optional<StopChecker> stop_checker;
  std::optional<GrammarRun> grammar;  // constrained decoding (the task's grammar)
  std::optional<ReasoningBudget> reasoning;  // the task's reasoning budget, when it has one
  std::optional<EmbeddingPool> embedding;  // embedding servers: the prompt's rows being pooled
  int batch_outputs = 0;                   // ... and how many of the batch's outputs are its rows
  std::vector<float> grammar_logits;  // the logits row with the grammar's mask applied
  std::vector<TokenProbs> probs;      // n_probs / logprobs of the tokens generated so far
  size_t probs_sent = 0;              // streamed: probs[0, probs_sent) went out with token events
  Token pending = -1;         // sampled, to be evaluated by the next batch
  // Speculative decoding (docs/speculative.md, draft_policy.h): this step's drafts after `pending`
  // (in the batch, each with its logits), and the accepted tokens a hybrid's state gave back when a
  // draft was rejected (evaluated again ahead of `pending`, without logits).
  std::vector<Token> drafts;
  std::vector<Token> replay;
  DraftPolicy draft_policy;
  int32_t n_drafted = 0;           // this task's drafts tried (timings draft_n) ...
  int32_t n_drafts_accepted = 0;   // ... and accepted (draft_n_accepted)
  // The last token the finished task sampled (never evaluated, so not in the cache) and the cache
  // size it follows: chat prompts align to the cache plus this token (prompt_align.h).
  Token unevaluated_tail = -1;
  size_t tail_at = 0;
  int32_t n_decoded = 0;
  std::string generated_text;
  std::vector<Token> generated_tokens;
  size_t tokens_sent = 0;             // streamed: generated_tokens[0, tokens_sent) went out with token events
  bool has_new_line = false;
  Clock::time_point t_start;        // prompt processing began
  Clock::time_point t_first_token;  // first token sampled (prompt processing ended)

  // This step's share of the batch.
  int batch_output = -1;           // index of this slot's logits in the batch, -1 if none
  size_t batch_prompt_tokens = 0;  // prompt tokens this slot put in the batch
  bool in_batch = false;

  bool idle() const { return state == SlotState::Idle; }
};

inline double ms_between(Slot::Clock::time_point a, Slot::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace agentkv::server
