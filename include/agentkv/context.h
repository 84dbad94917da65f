// An inference context: a model, its sequence memory, a thread pool and scratch space.
// decode() is llama_decode: it splits a batch into micro-batches, places each in memory
// (transactionally) and runs the forward pass, keeping the logits of the requested tokens.
// What it is made of (the sequence memory, thread pool, scratch space) is the engine's
// (src/engine/context_impl.h): users see the memory through MemoryInterface. Beside it: the KV
// cache as figures for reports (agentkv/kv_status.h: kv_status, seq_residency) and fake depths
// for timing (agentkv/fake_prefix.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agentkv/batch.h"
#include "agentkv/kv_options.h"
#include "agentkv/memory.h"
#include "agentkv/model.h"
#include "agentkv/prefix_cache.h"
#include "agentkv/request_memory.h"

namespace agentkv {

struct ContextParams {
  uint32_t n_ctx = 4096;     // KV cells (per stream when not kv.unified)
  uint32_t n_ubatch = 512;   // tokens per forward pass
  uint32_t n_seq_max = 1;
  int n_threads = 2;
  KvOptions kv;  // how the KV rows are kept (agentkv/kv_options.h)
  // decode() keeps each output token's final hidden state (embeddings(i)) instead of its logits,
  // as llama.cpp's llama_set_embeddings(ctx, true) with pooling left to the caller.
  bool embeddings = false;
};

struct DecodeStats {
  int64_t n_tokens = 0;   // tokens evaluated by the forward pass since the last reset
  int64_t n_ubatches = 0;
  // Keys attention read: per evaluated token, the KV cells its mask leaves visible (cells of its
  // sequence at positions <= its own), counted once per token (every attention layer reads the
  // same cells). 0 for models without attention.
  int64_t n_keys_attended = 0;
  int64_t last_keys_attended = 0;  // the same for the last token evaluated
  int64_t n_shifted_cells = 0;     // cells whose keys a context shift re-rotated
};

// K/V cells that `bytes` of K/V rows hold for this model (every attention layer's K and V row in
// the params' types): what a RAM budget for cached pages is worth in cells.
uint32_t kv_cells_for_bytes(const Model& model, const ContextParams& params, size_t bytes);

class Context {
 public:
  Context(const Model& model, const ContextParams& params);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Model& model() const;
  const ContextParams& params() const;
  // The sequence operations (llama.cpp's llama_memory_seq_*), on the KV cache, the recurrent
  // state, or both in lockstep.
  MemoryInterface& memory();
  const MemoryInterface& memory() const;

  // Returns 0 on success; 1 when the memory has no room for the batch (nothing was changed by the
  // micro-batch that failed; earlier micro-batches of the same batch stay, as in llama.cpp).
  // Throws agentkv::Error for invalid input (token id out of range, bad positions, bad seq ids).
  int decode(const Batch& batch);

  // Logits of the i-th token of the last batch that asked for them (in batch order).
  const float* logits(int i) const;
  int n_outputs() const;
  // Logits of the last token with output=true (the usual case in generation).
  const float* last_logits() const { return logits(n_outputs() - 1); }
  // Output i's final hidden state, n_embd floats (ContextParams::embeddings only).
  const float* embeddings(int i) const;

  // Context shift: re-rotates the keys of cells moved by seq_add / seq_div since the last forward
  // pass (decode() calls it first; call it yourself before saving state). No-op when nothing is
  // pending.
  void apply_pending_shift();
  bool can_shift() const;

  // The process's prefix cache over this context's memory (agentkv/prefix_cache.h): made once;
  // pages are named by cfg's model fingerprint together with this context's KV types and
  // rotation. Null when the memory cannot have one: no attention layers, or a KV cache of several
  // streams (not unified). Throws agentkv::Error for a holder outside n_seq_max.
  PrefixCache* enable_prefix_cache(const PrefixCacheConfig& cfg);
  // The memory a scheduler serves requests from (agentkv/request_memory.h), for cfg.n_seqs
  // sequences; with the prefix cache when the memory can have one (a unified KV cache and a spare
  // sequence, n_seq_max > n_seqs, to hold cached pages). log: its decisions worth a log line.
  std::unique_ptr<RequestMemory> open_request_memory(const RequestMemoryConfig& cfg,
                                                     std::function<void(MemorySeqId, const std::string&)> log = {});

  // Whether a sequence resumes only where a snapshot of its state is: the memory has a recurrent
  // part (hybrid models) or keeps only the window of sliding-window layers; it cannot drop any suffix.
  bool needs_snapshots() const;
  // KV cells seq could use once its own positions were dropped (SIZE_MAX: no KV cache).
  size_t cells_free_for(MemorySeqId seq) const;
  // Bytes of K/V rows and recurrent states every sequence holds now (rows in their stored types).
  size_t memory_bytes() const;
  // Queries recorded for seq (KvOptions::query_window; 0 without a window).
  uint32_t queries_recorded(MemorySeqId seq) const;

  const DecodeStats& stats() const;
  void reset_stats();

  // The engine's side of the context (src/engine/context_impl.h).
  struct Impl;
  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentkv
