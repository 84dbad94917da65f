#include "engine/seq_snapshot_impl.h"

#include "engine/context_impl.h"

namespace agentkv {

SeqSnapshot::SeqSnapshot() : impl_(std::make_unique<Impl>()) {}
SeqSnapshot::~SeqSnapshot() = default;
SeqSnapshot::SeqSnapshot(SeqSnapshot&&) noexcept = default;
SeqSnapshot& SeqSnapshot::operator=(SeqSnapshot&&) noexcept = default;

SeqSnapshot SeqSnapshot::capture(const Context& ctx, MemorySeqId seq, bool recurrent_only) {
  SeqSnapshot s;
  s.impl_->snapshot = memory::MemorySnapshot::capture(sequence_memory(ctx), seq,
                                                      recurrent_only ? memory::kStatePartialOnly : memory::kStateAll);
  return s;
}

void SeqSnapshot::restore(Context& ctx, MemorySeqId dest) const { impl_->snapshot.restore(sequence_memory(ctx), dest); }

}  // namespace agentkv
