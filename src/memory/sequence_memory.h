// The one memory interface of a context: llama.cpp's sequence operations over whatever the model
// needs — an attention KV cache, a recurrent state, or both moved in lockstep (hybrid models).
// Placement of a micro-batch is transactional: prepare() only looks; apply() commits.
// See docs/memory-semantics.md for what every operation does on every memory type.
#pragma once
#include <memory>
#include <optional>

#include "memory/kv_cache.h"
#include "memory/recurrent.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

struct MemoryPlacement {
  Placement kv;               // empty when there is no KV cache
  RecurrentPlacement rec;     // empty when there is no recurrent memory
};

class SequenceMemory {
 public:
  // Either part may be null (dense models have no recurrent part).
  SequenceMemory(std::unique_ptr<KvCache> kv, std::unique_ptr<RecurrentMemory> rec);
  ~SequenceMemory();

  KvCache* kv() { return kv_.get(); }
  RecurrentMemory* rec() { return rec_.get(); }
  const KvCache* kv() const { return kv_.get(); }
  const RecurrentMemory* rec() const { return rec_.get(); }

  std::optional<MemoryPlacement> prepare(const UBatch& ub) const;
  void apply(const UBatch& ub, const MemoryPlacement& placement);

  void clear();
  // Hybrid: the recurrent part decides first; if it refuses, nothing changes and false returns.
  bool seq_rm(SeqId seq, Pos p0, Pos p1);
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1);
  void seq_keep(SeqId seq);
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta);
  void seq_div(SeqId seq, Pos p0, Pos p1, int d);
  // Hybrid: pos_min = max of the parts' minima, pos_max = min of their maxima, so [min, max] is
  // the range every part can vouch for (for a hybrid sequence pos_min == pos_max == last token).
  Pos seq_pos_min(SeqId seq) const;
  Pos seq_pos_max(SeqId seq) const;

 private:
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<RecurrentMemory> rec_;
};

}  // namespace agentkv::memory
