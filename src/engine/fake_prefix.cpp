#include "agentkv/fake_prefix.h"

#include "engine/context_impl.h"

namespace agentkv {

void seq_fake_prefix(Context& ctx, MemorySeqId seq, MemoryPos n) { sequence_memory(ctx).seq_fake_prefix(seq, n); }

void prefault_kv(Context& ctx) {
  if (memory::KvCache* kv = sequence_memory(ctx).kv()) kv->rows().prefault();
}

}  // namespace agentkv
