// What a Context (agentkv/context.h) is made of, for the engine's own code and its tests: the
// model as its architecture runs it, the sequence memory, the thread pool, scratch space. Only
// src/engine/ and tests include this; the server and the command see agentkv/context.h.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "agentkv/context.h"
#include "kernels/threadpool.h"
#include "memory/query_window.h"
#include "memory/sequence_memory.h"
#include "model/model.h"

namespace agentkv {

struct Context::Impl {
  Impl(const Model& model, const ContextParams& params);

  void validate(const Batch& batch) const;
  void count_keys_attended(const memory::UBatch& ub);

  const ArchModel& model;  // as its architecture runs it (every Model is one)
  ContextParams params;
  ThreadPool pool;
  std::unique_ptr<memory::SequenceMemory> memory;
  std::unique_ptr<memory::QueryWindow> queries;
  std::unique_ptr<PrefixCache> prefix_cache;
  std::vector<memory::AttentionGroup> attention;  // the view of the micro-batch being decoded
  memory::RecurrentTapes tapes;  // the recurrent inputs of sequences in a speculative pass
  Workspace ws;
  std::vector<float> logits;
  std::vector<float> embeddings;
  std::vector<int> output_index;
  DecodeStats stats;
  uint64_t next_ubatch_id = 0;
};

// Shorthands for the engine's code that works below the public surface.
inline memory::SequenceMemory& sequence_memory(Context& ctx) { return *ctx.impl().memory; }
inline const memory::SequenceMemory& sequence_memory(const Context& ctx) { return *ctx.impl().memory; }
inline ThreadPool& thread_pool(Context& ctx) { return ctx.impl().pool; }
// The recorded queries (KvOptions::query_window), or null.
inline memory::QueryWindow* recorded_queries(Context& ctx) { return ctx.impl().queries.get(); }
inline const memory::QueryWindow* recorded_queries(const Context& ctx) { return ctx.impl().queries.get(); }

}  // namespace agentkv
