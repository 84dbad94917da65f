// An inference context: a model, its sequence memory, a thread pool and scratch space.
// decode() is llama_decode: it splits a batch into micro-batches, places each in memory
// (transactionally) and runs the forward pass, keeping the logits of the requested tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/ggml_type.h"
#include "engine/batch.h"
#include "kernels/threadpool.h"
#include "memory/sequence_memory.h"
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
};

struct DecodeStats {
  int64_t n_tokens = 0;   // tokens evaluated by the forward pass since the last reset
  int64_t n_ubatches = 0;
};

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

  const DecodeStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  void validate(const Batch& batch) const;
  const Model& model_;
  ContextParams params_;
  ThreadPool pool_;
  std::unique_ptr<memory::SequenceMemory> memory_;
  Workspace ws_;
  std::vector<float> logits_;
  std::vector<int> output_index_;
  DecodeStats stats_;
};

}  // namespace agentkv
