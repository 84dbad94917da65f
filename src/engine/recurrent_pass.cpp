#include "engine/recurrent_pass.h"

#include "engine/context_impl.h"

namespace agentkv {

SeqSnapshot begin_recurrent_pass(Context& ctx, MemorySeqId seq) {
  SeqSnapshot before = SeqSnapshot::capture(ctx, seq, /*recurrent_only=*/true);
  ctx.impl().tapes.arm(seq);
  return before;
}

bool end_recurrent_pass(Context& ctx, MemorySeqId seq, const SeqSnapshot& before, size_t accepted) {
  Context::Impl& impl = ctx.impl();
  const memory::RecurrentTape* tape = impl.tapes.find(seq);
  const auto n = static_cast<int64_t>(accepted);
  const int64_t recorded = tape ? tape->recorded(impl.model.config().layer_recurrent) : -1;
  bool settled = recorded == n;  // the state absorbed exactly the accepted tokens
  if (!settled) {
    before.restore(ctx, seq);
    memory::RecurrentMemory* rec = impl.memory->rec();
    settled = n == 0 || (rec && recorded > n);
    if (n > 0 && settled) {
      const uint32_t cell = rec->seq_own_cell(seq, rec->seq_pos_max(seq) + static_cast<MemoryPos>(n));
      impl.model.replay_recurrent(*rec, cell, *tape, n, impl.pool);
    }
  }
  impl.tapes.disarm(seq);
  return settled;
}

}  // namespace agentkv
