// An inference context: a model, its sequence memory, a thread pool and scratch space.
// decode() is llama_decode: it splits a batch into micro-batches, places each in memory
// (transactionally) and runs the forward pass, keeping the logits of the requested tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/prefix_cache.h"
#include "core/ggml_type.h"
#include "engine/batch.h"
#include "engine/kv_status.h"
#include "kernels/threadpool.h"
#include "memory/sequence_memory.h"
#include "model/kv_rotation.h"
#include "model/model.h"

namespace agentkv {

struct ContextParams {
  uint32_t n_ctx = 4096;     // KV cells (per stream when not unified)
  uint32_t n_ubatch = 512;   // tokens per forward pass
  uint32_t n_seq_max = 1;
  bool kv_unified = true;
  int n_threads = 2;
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  KvRotationMode kv_rotation = KvRotationMode::Auto;  // model/kv_rotation.h
  uint64_t kv_rotation_seed = 0;                      // 0: llama.cpp's plain Hadamard
  // Windowed KV residency (memory/kv_cache.h KvLayout::hot_cells): 0 = every cell's rows hot;
  // otherwise at most this many cells per stream keep type_k / type_v rows and the older ones
  // move to the tail, stored as tail_type_k / tail_type_v. Must be >= n_ubatch.
  uint32_t kv_hot_cells = 0;
  GgmlType tail_type_k = GgmlType::F16;
  GgmlType tail_type_v = GgmlType::F16;
  std::string kv_tail_dir;  // "": the tail in RAM; a folder: in files mapped from it (KvLayout::tail_dir)
  // decode() keeps each output token's final hidden state (embeddings(i)) instead of its logits,
  // as llama.cpp's llama_set_embeddings(ctx, true) with pooling left to the caller.
  bool embeddings = false;
  // > 0: the last this-many tokens' attention queries are kept per sequence (what the snapkv
  // eviction policy scores keys with, engine/retention.h); 0: none kept.
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

  const Model& model() const { return model_; }
  const ContextParams& params() const { return params_; }
  memory::SequenceMemory& memory() { return *memory_; }
  const memory::SequenceMemory& memory() const { return *memory_; }
  ThreadPool& pool() { return pool_; }

  // Returns 0 on success; 1 when the memory has no room for the batch (nothing was changed by the
  // micro-batch that failed; earlier micro-batches of the same batch stay, as in llama.cpp).
  // Throws agentkv::Error for invalid input (token id out of range, bad positions, bad seq ids).
  int decode(const Batch& batch);

  // Logits of the i-th token of the last batch that asked for them (in batch order).
  const float* logits(int i) const;
  int n_outputs() const { return static_cast<int>(output_index_.size()); }
  // Logits of the last token with output=true (the usual case in generation).
  const float* last_logits() const { return logits(n_outputs() - 1); }
  // Output i's final hidden state, n_embd floats (ContextParams::embeddings only).
  const float* embeddings(int i) const;

  // Context shift: re-rotates the keys of cells moved by seq_add / seq_div since the last forward
  // pass (decode() calls it first; call it yourself before saving state). No-op when nothing is
  // pending.
  void apply_pending_shift();
  bool can_shift() const { return memory_->can_shift(); }
  // memory().seq_fake_prefix(seq, n): see SequenceMemory.
  void seq_fake_prefix(memory::SeqId seq, memory::Pos n) { memory_->seq_fake_prefix(seq, n); }

  // The process's prefix cache over this context's memory (agentkv/prefix_cache.h): made once;
  // pages are named by cfg's model fingerprint together with this context's KV types and
  // rotation. Null when the memory cannot have one: no attention layers, or a KV cache of several
  // streams (not unified). Throws agentkv::Error for a holder outside n_seq_max.
  PrefixCache* enable_prefix_cache(const PrefixCacheConfig& cfg);
  PrefixCache* prefix_cache() { return prefix_cache_.get(); }
  const PrefixCache* prefix_cache() const { return prefix_cache_.get(); }

  // Whether the memory has a recurrent part (hybrid models): it cannot drop a suffix.
  bool has_recurrent_state() const { return memory_->rec() != nullptr; }
  KvStatus kv_status() const;
  // Cells of seq whose K/V rows are hot / in the tail (--kv-hot; {0, 0} when not windowed).
  std::pair<uint64_t, uint64_t> seq_residency(memory::SeqId seq) const;
  // Touches every page of the KV rows, so a fake depth (seq_fake_prefix: rows zero) is backed by
  // memory as a computed one is. Nothing without a KV cache.
  void prefault_kv() {
    if (memory::KvCache* kv = memory_->kv()) kv->prefault();
  }
  // KV cells seq could use once its own positions were dropped (SIZE_MAX: no KV cache).
  size_t cells_free_for(memory::SeqId seq) const;
  // Bytes of K/V rows and recurrent states every sequence holds now (rows in their stored types).
  size_t memory_bytes() const;

  // The recorded queries (ContextParams::query_window), or null.
  const memory::QueryWindow* queries() const { return queries_.get(); }
  memory::QueryWindow* queries() { return queries_.get(); }

  const DecodeStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  void validate(const Batch& batch) const;
  void count_keys_attended(const memory::UBatch& ub);
  const Model& model_;
  ContextParams params_;
  ThreadPool pool_;
  std::unique_ptr<memory::SequenceMemory> memory_;
  std::unique_ptr<memory::QueryWindow> queries_;
  std::unique_ptr<PrefixCache> prefix_cache_;
  std::vector<memory::AttentionGroup> attention_;  // the view of the micro-batch being decoded
  Workspace ws_;
  std::vector<float> logits_;
  std::vector<float> embeddings_;
  std::vector<int> output_index_;
  DecodeStats stats_;
  uint64_t next_ubatch_id_ = 0;
};

}  // namespace agentkv
