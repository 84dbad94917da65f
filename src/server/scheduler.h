// The scheduler: one thread that owns the Context and serves every request with continuous
// batching. Each step it
//   1. drops cancelled tasks and gives queued tasks to idle slots (slot_selection.h); the memory
//      puts what it holds of each prompt in place (agentkv/request_memory.h);
//   2. builds ONE batch: the pending token of every generating slot, then prompt chunks of the
//      slots still reading their prompt, up to n_batch tokens;
//   3. decodes it once, then samples for every slot whose logits came out.
// Requests beyond the slots wait in a FIFO queue (a request waiting for a busy slot of its own
// does not hold back the others).
//
// The slots share one memory of n_ctx cells. When a batch finds no room the memory frees unused
// pages and idle slots' caches (RequestMemory::make_room); if none is left, a slot still reading its prompt
// (it has produced nothing yet) goes back to the front of the queue and waits until the other
// slots are done; if all are generating, the one holding the most memory ends as llama-server
// ends a slot whose context is full (stop_type "limit", truncated).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <mutex>
#include <thread>
#include <vector>

#include "agentkv/context.h"
#include "agentkv/draft_model.h"
#include "agentkv/session_state.h"
#include "agentkv/page_tier.h"
#include "agentkv/prefix_cache.h"
#include "agentkv/request_memory.h"
#include "agentkv/grammar_matcher.h"
#include "server/grammar_run.h"
#include "server/metrics.h"
#include "server/slot.h"
#include "agentkv/pooling.h"
#include "agentkv/retention.h"
#include "server/slot_selection.h"
#include "server/task.h"

namespace agentkv::server {

struct SchedulerConfig {
  int n_slots = 4;
  uint32_t n_ctx = 4096;    // positions one slot may use (unified memory: the whole context)
  uint32_t n_batch = 512;   // tokens per decode; kept <= n_ubatch so that a decode that finds no
                            // room changes nothing (Context::decode keeps earlier micro-batches)
  double slot_similarity = 0.10;
  size_t checkpoint_bytes = 256u << 20;  // hybrid models: RAM for recurrent snapshots on page chains, all slots
  uint32_t page_tokens = 16;             // tokens per page of the prefix cache (docs/memory-semantics.md)
  uint64_t model_fingerprint = 0;        // names cached pages (with the KV types)
  // Every slot may attach pages any slot computed (agentkv/prefix_cache.h). Off: the cache still
  // holds every slot's pages and snapshots, but each slot finds only its own.
  bool share_prefixes = true;
  // Embedding server (--embedding): the context keeps hidden states, not logits; a task evaluates
  // its whole prompt and returns the pooled rows (FinalResult::embedding), generating nothing.
  bool embeddings = false;
  Pooling pooling = Pooling::Last;
  // --context-shift: a generation that reaches n_ctx drops the middle of its sequence (llama.cpp's
  // n_keep / n_discard) and goes on, instead of ending "truncated". Needs a memory that can shift.
  bool context_shift = false;
  EvictPolicy kv_evict = EvictPolicy::Positional;  // which positions a shift drops (agentkv/retention.h)
  // > 0: a generating sequence that reaches this many positions shifts (by policy) before the
  // context is full (--kv-budget; needs context_shift).
  uint32_t kv_budget = 0;
  // A vision projector is loaded: every batch carries rope positions (agentkv/vision.h) and the
  // image rows of the prompts that have images.
  bool multimodal = false;
};

// A slot's saved state (POST /slots/{id}?action=save, /v1/prefill).
struct SlotStateBlob {
  std::vector<uint8_t> blob;
  size_t n_tokens = 0;
};

class Scheduler {
 public:
  // ctx must have n_seq_max >= cfg.n_slots + 1: sequence n_slots holds the prefix cache's pages.
  Scheduler(Context& ctx, const Tokenizer& tok, SchedulerConfig cfg);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void start();
  // Ends the thread; queued and running tasks get an unavailable_error.
  void stop();

  void submit(std::shared_ptr<Task> task);
  // Wakes the thread (after a task was cancelled, so that its slot is freed promptly).
  void wake();

  const SchedulerConfig& config() const { return cfg_; }
  // GET /slots: one object per slot (llama-server's fields plus agentkv's cache facts). Without
  // show_prompts, "prompt" is empty (other clients' text).
  Json slots_json(const CompletionParams& defaults, bool show_prompts = true) const;
  bool has_idle_slot() const;
  MetricsSnapshot metrics() const;
  // GET /props "memory": the spacing of hybrid snapshots inside long prompts, what one costs and
  // their budget.
  Json memory_json() const;
  // A chat prompt's tokens aligned to what the memory holds under the request's cache_salt
  // (RequestMemory::align_prompt): an earlier answer keeps the tokens it was generated as.
  AlignedPrompt align_prompt(const Tokenizer& tok, std::string_view text, const std::vector<Token>& plain,
                             const std::string& cache_salt, std::span<const Token> before = {}) const;

  // Slot actions, run by the scheduler thread between two steps (the caller waits). They throw
  // HttpError (503 when the slot is busy, the server stops, or busy slots hold the memory a
  // restored state needs; 400 for a state that does not fit this model, in which case the slot
  // is unchanged). A restore drops idle slots' caches to make room, as a prompt does.
  SlotStateBlob save_slot(int id);
  // How many leading prompt tokens the memory's cached pages hold under cache_salt (hybrid: up to
  // the latest snapshot); with sharing off, the best slot's. For routers (POST /v1/cache/lookup).
  size_t cached_prefix(std::span<const Token> prompt, const std::string& cache_salt);
  // Pages shared with other instances (docs/deploy.md); null: none. Set before start().
  void set_page_tier(PageTier* tier);
  // The draft model requests with speculative.type draft-simple draft with; null: none. Set
  // before start().
  void set_draft_model(DraftModel* drafter) { drafter_ = drafter; }
  // Installs a sequence state (session_state.h, with tokens) into the slot; returns its tokens.
  size_t restore_slot(int id, std::span<const uint8_t> blob, const std::string& what);
  size_t erase_slot(int id);  // returns the tokens dropped

 private:
  void run();
  bool any_active() const;
  void drop_cancelled();
  void assign_queued();
  void launch(Slot& slot, std::shared_ptr<Task> task, const SlotChoice& choice);
  bool build_batch(Batch& batch);
  // Appends token t of slot s at index i (its cache position): with a projector, with its rope
  // position and, for an image row, the row (the task's PromptImages).
  void add_token(Batch& batch, const Slot& s, Token t, size_t i, bool want_logits) const;
  void after_decode(const Batch& batch, int status, const std::string& error);
  void on_logits(Slot& slot, const float* logits, bool from_cache = false);
  // Speculative decoding: the drafts slot s tries this step (n-gram lookup in its context), at
  // most `room`, with other_rows rows in the batch besides its token; and, after the pass, the choice after each kept draft, the memory settled.
  // When the draft model is to draft for s, `ask` is filled instead (and nothing returned): every
  // slot's asks go to it together (DraftModel::draft), then finish_drafts.
  std::vector<Token> draft_for(Slot& s, size_t room, size_t other_rows, DraftAsk& ask);
  // What of `drafts` the pass takes: up to an image row, what the grammar allows, none when fewer
  // than n_min.
  void finish_drafts(const Slot& s, std::vector<Token>& drafts) const;
  void accept_drafts(Slot& s);
  // Closes slot's speculative pass now (before a snapshot or the end): what a hybrid gave back
  // goes to slot.replay.
  void settle_drafts(Slot& slot);
  // A finished answer's given-back tokens are evaluated (one small batch), so the cache holds it all.
  void absorb_given_back(Slot& slot);
  // --context-shift at n_ctx: false when nothing can be dropped (the generation then ends).
  bool shift_context(Slot& slot);
  // return_progress: a prompt_progress event with the slot's prompt so far.
  void send_progress(Slot& slot);
  void finish(Slot& slot, StopType stop, bool truncated = false);
  void fail(Slot& slot, const HttpError& error);
  void release(Slot& slot);
  void requeue(Slot& slot);
  // The batch found no room: the memory frees what it may; then a slot still reading its prompt
  // waits, or a generating one shifts or ends (scheduling, not caching).
  void on_memory_full();
  Timings timings_of(const Slot& slot, Slot::Clock::time_point now) const;
  void run_job(std::function<void()> fn);  // on the scheduler thread; rethrows its exception here
  void run_jobs();
  Slot& idle_slot(int id);                 // throws HttpError when unknown or busy
  std::vector<uint8_t> save_state(const Slot& slot) const;
  void finish_embedding(Slot& slot);  // embedding servers: the prompt is read; pool and answer
  std::span<const Token> cached(const Slot& slot) const { return memory_->tokens(slot.id); }
  PrefixCache* prefix_cache() const { return memory_->prefix_cache(); }  // stats, tiers, state files
  // AGENTKV_CHECK_MEMORY=1 (tests): the prefix cache's bookkeeping is verified after every step,
  // and a broken invariant aborts the server with its name in the log.
  void verify_memory() const;

  struct Job {
    std::function<void()> fn;
    std::promise<void> done;
  };

  Context& ctx_;
  const Tokenizer& tok_;
  SchedulerConfig cfg_;

  mutable std::mutex mutex_;  // everything below; released while the batch is decoded
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::deque<std::shared_ptr<Job>> jobs_;
  // Every cache decision (agentkv/request_memory.h); its prefix cache is null for models without
  // attention or without a unified KV cache.
  std::unique_ptr<RequestMemory> memory_;
  size_t memory_bytes_ = 0;  // K/V rows and recurrent states all sequences hold (after the last task)
  std::vector<Slot> slots_;
  uint64_t use_counter_ = 0;
  size_t prompt_rotation_ = 0;  // which prompt-reading slot gets the batch first
  MetricsSnapshot metrics_;
  // Built when the first grammar comes, one per set of kept control tokens (at most two: none,
  // and the tool format's markers).
  std::map<std::vector<Token>, std::unique_ptr<grammar::TokenTrie>> token_tries_;
  MatcherCache matchers_;
  DraftModel* drafter_ = nullptr;  // -md (agentkv/draft_model.h)
  PassCost pass_cost_;            // what generation batches cost by rows (how long drafts pay)
  bool no_drafts_next_ = false;  // the last batch found no room with drafts: the next goes without
  bool stopping_ = false;
  bool verify_memory_ = false;  // AGENTKV_CHECK_MEMORY
  std::thread thread_;
};

}  // namespace agentkv::server
