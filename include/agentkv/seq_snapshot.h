// A copy of one sequence, or of a context's whole memory, to go back to: benchmarks start every
// run from one (a hybrid model's recurrent state cannot drop a suffix), `agentkv prefill` saves
// the recurrent state at the end of the prompt as a state blob's checkpoint, and a loaded state
// hands its checkpoints back as snapshots (agentkv/session_state.h).
#pragma once
#include <memory>

#include "agentkv/context.h"
#include "agentkv/memory.h"

namespace agentkv {

class SeqSnapshot {
 public:
  SeqSnapshot();
  ~SeqSnapshot();
  SeqSnapshot(SeqSnapshot&&) noexcept;
  SeqSnapshot& operator=(SeqSnapshot&&) noexcept;

  // Copies seq's cells and rows (seq = -1: the whole memory); recurrent_only: the parts that
  // cannot be re-read from cached pages only (the recurrent state, the sliding-window part's
  // window). Throws agentkv::Error for a bad seq id.
  static SeqSnapshot capture(const Context& ctx, MemorySeqId seq, bool recurrent_only = false);
  // Into dest (a sequence snapshot, into any sequence) or, with dest = -1, replacing the whole
  // memory. Throws agentkv::Error and leaves the memory unchanged when it does not fit.
  void restore(Context& ctx, MemorySeqId dest) const;

  // The memory's snapshot inside (src/engine/seq_snapshot_impl.h).
  struct Impl;
  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentkv
