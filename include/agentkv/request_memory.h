// The memory as a scheduler sees it, one request at a time (vLLM's scheduler ↔ KV-cache manager
// boundary, SGLang's match / cache / evict): the scheduler owns slots, batches and sampling and
// calls
//   begin(seq, prompt, plan)  → how much of the prompt is in memory now, and why not more;
//   prompt_chunk(seq, ...)    → how much of the prompt the next batch may take;
//   advance(seq, tokens)      → the sequence absorbed these tokens (decoded);
//   end(seq)                  → the request is over, its memory stays as cache;
//   make_room(except)         → the batch found no room: free something;
// and never sees a page, a cell or a snapshot. Every cache decision is made here, in src/memory/:
// which prefix wins (the sequence's own tokens, pages any sequence computed, a recurrent snapshot,
// pages from the tiers), where hybrid snapshots go, when pages are published and sent to the tiers,
// what is evicted first (unused pages, then the least recently used idle sequence), and the page
// namespaces (a request's cache_salt; per sequence without sharing).
//
// A sequence (a scheduler's slot: ids 0 .. n_seqs-1) is busy from begin to end; idle ones keep
// their tokens as cache until make_room takes them. Token i of a sequence sits at position i.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/memory.h"
#include "agentkv/prefix_cache.h"

namespace agentkv {

class Tokenizer;

struct RequestMemoryConfig {
  int n_seqs = 1;                 // sequences 0 .. n_seqs-1 serve requests
  bool share_prefixes = true;     // a sequence attaches pages any sequence computed (off: only its own)
  size_t evict_step_cells = 512;  // cached cells make_room frees at a time
  // The prefix cache (Context::open_request_memory makes it; sequence n_seqs holds its pages).
  uint32_t page_tokens = 16;             // tokens per page (docs/memory-semantics.md)
  uint64_t model_fingerprint = 0;        // names cached pages (with the KV types)
  size_t snapshot_bytes = 256u << 20;    // hybrid: RAM for recurrent snapshots, all sequences
};

// What the memory needs of the engine that owns it (a context fills these in).
struct RequestMemoryHooks {
  MemoryInterface* memory = nullptr;                     // the sequences' KV cache / recurrent state
  PrefixCache* cache = nullptr;                          // null: no prefix cache (no unified KV cache)
  bool needs_snapshots = false;  // a sequence resumes only at snapshots (hybrid, sliding-window part): Context::needs_snapshots
  std::function<size_t(MemorySeqId)> cells_free_for;     // KV cells seq could use once its own go
  std::function<void(MemorySeqId, MemoryPos)> fake_prefix;  // zero rows for n positions; throws Error when full
  std::function<void(MemorySeqId, const std::string&)> log;  // a decision worth a log line, about seq
  // seq's recurrent state as it is now, before a speculative pass: returns what settles the pass
  // with n of its tokens accepted — the state after them (true), or, when they cannot be replayed,
  // the state as it was (false). Null: seq has no recurrent state (a short suffix drops in place).
  std::function<std::function<bool(size_t)>(MemorySeqId)> recurrent_pass;
};

// What a request asks of the memory.
struct RequestPlan {
  uint64_t cache_namespace = 0;       // agentkv::cache_namespace(cache_salt)
  bool cache_prompt = true;           // false: nothing is reused, and the sequence's own pages go
  std::vector<size_t> divergences;    // where the caller knows later prompts part (snapshot points)
};

// Length of the longest common prefix of a and b.
size_t common_prefix(std::span<const CacheToken> a, std::span<const CacheToken> b);

enum class ReuseSource {
  None,      // nothing reused: the prompt is evaluated from the start
  Own,       // the sequence's own tokens, kept in place
  Shared,    // pages some sequence computed (or a tier brought), attached
  Snapshot,  // hybrid: the sequence went back to its latest snapshot before the divergence
};
const char* reuse_source_name(ReuseSource s);

struct PromptReuse {
  size_t n_cached = 0;        // tokens the sequence held before
  size_t n_common = 0;        // ... that the prompt starts with
  size_t n_kept = 0;          // prompt tokens in memory now (timings.cache_n); the rest is evaluated
  ReuseSource source = ReuseSource::None;
  bool state_refused = false;     // hybrid: the state could not drop the suffix and no snapshot applied
  bool use_saved_logits = false;  // n_kept == prompt size: sample from saved_logits, evaluate nothing
  CacheToken cached_at_divergence = -1;  // the sequence's token where the prompt parts from it
  TierFetch fetched;              // what the page tiers brought in for this prompt
};

// A prompt's tokens as the memory best reuses them (RequestMemory::align_prompt).
struct AlignedPrompt {
  std::vector<CacheToken> tokens;
  size_t n_from_cache = 0;  // leading tokens taken from a cache (0: the plain tokenization as is)
};

// Counters since start, for /metrics.
struct RequestMemoryCounters {
  uint64_t shared_attaches = 0;       // prompts that attached pages (not their sequence's own)
  uint64_t snapshots_taken = 0;       // hybrid: recurrent snapshots kept on page chains
  uint64_t snapshots_restored = 0;    // ... and a sequence rolled back to
  uint64_t tier_pages_sent = 0;
  uint64_t tier_pages_fetched = 0;
  uint64_t tier_pages_refused = 0;
  uint64_t tier_snapshots_sent = 0;
  uint64_t tier_snapshots_fetched = 0;
  uint64_t sequences_dropped = 0;     // idle sequences' caches make_room took
};

class RequestMemory {
 public:
  RequestMemory(RequestMemoryHooks hooks, RequestMemoryConfig cfg);
  ~RequestMemory();
  RequestMemory(const RequestMemory&) = delete;
  RequestMemory& operator=(const RequestMemory&) = delete;

  // A request starts on seq: the prompt's longest reusable prefix is put in memory (one index
  // match), the rest of the sequence goes.
  PromptReuse begin(MemorySeqId seq, std::span<const CacheToken> prompt, const RequestPlan& plan);
  // A request starts on seq with the prompt's first n_fake positions as zero rows (benchmarks' fake depth):
  // never published, dropped at end(). False when there is no room even after make_room.
  bool begin_fake(MemorySeqId seq, std::span<const CacheToken> prompt, size_t n_fake, std::string& error);
  // Of the prompt's tokens from `done` on, how many the next batch may take (at most budget): a
  // hybrid snapshot point ends a chunk, so that the state there can be kept.
  size_t prompt_chunk(MemorySeqId seq, size_t done, size_t budget) const;
  // seq absorbed `tokens` (a decoded batch's share): snapshots and publishing follow.
  void advance(MemorySeqId seq, std::span<const CacheToken> tokens);
  // The logits after seq's tokens so far (a later prompt equal to them evaluates nothing).
  void keep_logits(MemorySeqId seq, std::span<const float> logits);
  // The state after seq's tokens is kept (hybrid: a snapshot on its page chain), e.g. at the end
  // of a turn's generation or of a restored state.
  void keep_state(MemorySeqId seq);
  // The request is over: its tokens stay as cache (a fake prefix and a shifted suffix go).
  void end(MemorySeqId seq);

  // Speculative decoding (agentkv/speculative.h, docs/speculative.md): the batch about to be
  // decoded evaluates n_evaluated tokens after seq's (its next token and drafts after it). The
  // caller then advances seq by the tokens it accepts, in order, and calls end_drafts; end,
  // keep_state and wipe settle a pass that is still open the same way.
  void begin_drafts(MemorySeqId seq, size_t n_evaluated);
  // The evaluated positions past seq's tokens go. A recurrent state cannot drop a suffix: it goes
  // back to where it was before the pass and absorbs the accepted tokens again from their recorded
  // inputs (no second pass). Only if that cannot be done do seq's tokens go back too, and the
  // accepted tokens given back are returned, to be evaluated again (their logits are known).
  // Empty otherwise, and when no pass is open.
  std::vector<CacheToken> end_drafts(MemorySeqId seq);
  // Drafts from what the memory holds beyond seq: the tokens that followed the latest occurrence
  // of the history's last 4 (or 3) tokens in the other sequences of seq's namespace (other
  // sessions' turns, most recently used first), else in its cached pages (conversations no
  // sequence holds any more: PrefixCache::continuation), at most k. Empty when none holds them.
  std::vector<CacheToken> recall(MemorySeqId seq, std::span<const CacheToken> history, size_t k) const;

  // Frees memory for a batch that found no room: unused cached pages first, least recently used
  // first, then the least recently used idle sequence other than `except`. False: nothing left.
  bool make_room(MemorySeqId except = -1);
  // Frees until seq (idle) could hold n_cells of a state (its own cache goes too when needed).
  // False: busy sequences hold the rest.
  bool make_room_for(MemorySeqId seq, size_t n_cells);
  void wipe(MemorySeqId seq);  // seq leaves memory
  // seq's memory was changed outside (a context shift kept `tokens`, the first `untouched` as a
  // prefill computes them; a restored state holds `tokens` with `logits` after them).
  void shifted(MemorySeqId seq, std::vector<CacheToken> tokens, size_t untouched);
  void restored(MemorySeqId seq, std::vector<CacheToken> tokens, std::vector<float> logits);

  std::span<const CacheToken> tokens(MemorySeqId seq) const;
  std::span<const float> saved_logits(MemorySeqId seq, size_t n) const;  // empty: none after n tokens
  uint64_t cache_namespace_of(MemorySeqId seq) const;
  // The salt seq's pages are named with under a namespace (agentkv::page_salt).
  uint64_t page_salt(MemorySeqId seq, uint64_t cache_namespace) const;
  // seq holds what a prefill of its tokens computes (no fake prefix, no shift): it may be saved.
  bool exact(MemorySeqId seq) const;
  bool fake(MemorySeqId seq) const;
  // A chat prompt's tokens as the memory best reuses them (memory/prompt_align.h): `plain` (its
  // text tokenized as usual) unless the tokens a sequence of the namespace holds — with the sampled, never evaluated
  // token after them, unevaluated[seq] (-1: none) — or a chain of cached pages under the namespace
  // spell a longer prefix of `text` (a re-rendered answer tokenizes otherwise than it was
  // generated): then those tokens up to where plain has a token boundary too, and plain's after.
  // With `before` (a prompt's tokens ahead of `text`: its images' rows, agentkv/vision.h), only
  // sequences that begin with those tokens count, from there on (no page chain is followed).
  AlignedPrompt align_prompt(const Tokenizer& tok, std::string_view text, const std::vector<CacheToken>& plain,
                             uint64_t cache_namespace, std::span<const CacheToken> unevaluated,
                             std::span<const CacheToken> before = {}) const;
  // How many leading prompt tokens cached pages hold under the namespace (hybrid: up to the latest
  // snapshot); without sharing, the best sequence's. For routers.
  size_t cached_prefix(std::span<const CacheToken> prompt, uint64_t cache_namespace) const;

  PrefixCache* prefix_cache() const;  // null: none (stats, tiers, tests)
  RequestMemoryCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentkv
