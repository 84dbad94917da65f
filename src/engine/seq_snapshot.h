// A copy of one sequence, or of a context's whole memory, to go back to: benchmarks start every
// run from one (a hybrid model's recurrent state cannot drop a suffix), and `agentkv prefill`
// saves the recurrent state at the end of the prompt as a state blob's checkpoint.
#pragma once
#include "agentkv/memory.h"
#include "engine/context.h"
#include "memory/snapshot.h"

namespace agentkv {

class SeqSnapshot {
 public:
  SeqSnapshot() = default;

  // Copies seq's cells and rows (seq = -1: the whole memory); recurrent_only: the recurrent part
  // only. Throws agentkv::Error for a bad seq id.
  static SeqSnapshot capture(const Context& ctx, MemorySeqId seq, bool recurrent_only = false);
  // Into dest (a sequence snapshot, into any sequence) or, with dest = -1, replacing the whole
  // memory. Throws agentkv::Error and leaves the memory unchanged when it does not fit.
  void restore(Context& ctx, MemorySeqId dest) const;

  // As a checkpoint at pos for SaveOptions::checkpoints; valid while this snapshot lives.
  memory::CheckpointImage checkpoint_at(MemoryPos pos) const { return {pos, snapshot_.image()}; }

 private:
  memory::MemorySnapshot snapshot_;
};

}  // namespace agentkv
