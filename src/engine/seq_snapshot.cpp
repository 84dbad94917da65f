#include "engine/seq_snapshot.h"

namespace agentkv {

SeqSnapshot SeqSnapshot::capture(const Context& ctx, MemorySeqId seq, bool recurrent_only) {
  SeqSnapshot s;
  s.snapshot_ = memory::MemorySnapshot::capture(ctx.memory(), seq, recurrent_only ? memory::kStatePartialOnly
                                                                                  : memory::kStateAll);
  return s;
}

void SeqSnapshot::restore(Context& ctx, MemorySeqId dest) const { snapshot_.restore(ctx.memory(), dest); }

}  // namespace agentkv
