// An inference context: a model, its sequence memory, a thread pool and scratch space.
// decode() is llama_decode: it splits a batch into micro-batches, places each in memory
// (transactionally) and runs the forward pass, keeping the logits of the requested tokens.
// What it is made of (the sequence memory, thread pool, scratch space) is the engine's
// (src/engine/context_impl.h): users see the memory through MemoryInterface.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agentkv/batch.h"
#include "agentkv/ggml_type.h"
#include "agentkv/kv_rotation_mode.h"
#include "agentkv/kv_status.h"
#include "agentkv/memory.h"
#include "agentkv/model.h"
#include "agentkv/prefix_cache.h"
#include "agentkv/request_memory.h"

namespace agentkv {

namespace memory {
class KvCode;
}

struct ContextParams {
  uint32_t n_ctx = 4096;     // KV cells (per stream when not unified)
  uint32_t n_ubatch = 512;   // tokens per forward pass
  uint32_t n_seq_max = 1;
  bool kv_unified = true;
  int n_threads = 2;
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  KvRotationMode kv_rotation = KvRotationMode::Auto;  // agentkv/kv_rotation_mode.h
  uint64_t kv_rotation_seed = 0;                      // 0: llama.cpp's plain Hadamard
  // The calibrated code tqc3 rows are written under (agentkv/kv_code.h: load_kv_code); required
  // when type_k or type_v is tqc3, unused otherwise.
  std::shared_ptr<const memory::KvCode> kv_code;
  // Windowed KV residency (memory/kv_cache.h KvLayout::hot_cells): 0 = every cell's rows hot;
  // otherwise at most this many cells per stream keep type_k / type_v rows and the older ones
  // move to the tail, stored as tail_type_k / tail_type_v. Must be >= n_ubatch.
  uint32_t kv_hot_cells = 0;
  GgmlType tail_type_k = GgmlType::F16;
  GgmlType tail_type_v = GgmlType::F16;
  std::string kv_tail_dir;  // "": the tail in RAM; a folder: in files mapped from it (KvLayout::tail_dir)
  // Retrieval heads (agentkv/retrieval_heads.h; memory/kv_cache.h KvLayout::tail_heads): with a
  // window, the tail keeps the rows of only this fraction of the KV heads — the best scored by the
  // retrieval probe, run once at creation — and every other head attends over the window alone.
  // 1: every head's rows (no probe). kv_tail_heads, when not empty, names the heads instead (a mask
  // per model layer, bit h = KV head h).
  double kv_retrieval_heads = 1.0;
  std::vector<uint64_t> kv_tail_heads;
  // decode() keeps each output token's final hidden state (embeddings(i)) instead of its logits,
  // as llama.cpp's llama_set_embeddings(ctx, true) with pooling left to the caller.
  bool embeddings = false;
  // > 0: the last this-many tokens' attention queries are kept per sequence (what the snapkv
  // eviction policy scores keys with, agentkv/retention.h); 0: none kept.
  uint32_t query_window = 0;
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
  // Gives seq n positions of zero K/V rows (and a zero recurrent state), as if n tokens had been
  // decoded: a depth for benchmarks without computing it (docs/memory-semantics.md).
  void seq_fake_prefix(MemorySeqId seq, MemoryPos n);

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
  PrefixCache* prefix_cache();
  const PrefixCache* prefix_cache() const;

  // Whether the memory has a recurrent part (hybrid models): it cannot drop a suffix.
  bool has_recurrent_state() const;
  KvStatus kv_status() const;
  // Cells of seq whose K/V rows are hot / in the tail (--kv-hot; {0, 0} when not windowed).
  std::pair<uint64_t, uint64_t> seq_residency(MemorySeqId seq) const;
  // Touches every page of the KV rows, so a fake depth (seq_fake_prefix: rows zero) is backed by
  // memory as a computed one is. Nothing without a KV cache.
  void prefault_kv();
  // KV cells seq could use once its own positions were dropped (SIZE_MAX: no KV cache).
  size_t cells_free_for(MemorySeqId seq) const;
  // Bytes of K/V rows and recurrent states every sequence holds now (rows in their stored types).
  size_t memory_bytes() const;
  // Queries recorded for seq (ContextParams::query_window; 0 without a window).
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
