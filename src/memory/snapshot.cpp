#include "memory/snapshot.h"

namespace agentkv::memory {

MemorySnapshot MemorySnapshot::capture(const SequenceMemory& mem, SeqId seq, uint32_t flags) {
  return copy_of(memory_state_view(mem, seq, flags));
}

MemorySnapshot MemorySnapshot::copy_of(const MemoryImage& image) {
  MemorySnapshot snap;
  snap.image_ = image;
  // Each RowChunks gets its own vector; moving the snapshot moves the vectors, not their bytes,
  // so the views stay valid.
  auto own = [&](std::vector<RowChunks>& tensors) {
    for (RowChunks& rows : tensors) own_rows(rows, snap.storage_.emplace_back());
  };
  if (snap.image_.kv) {
    own(snap.image_.kv->k);
    own(snap.image_.kv->v);
    snap.image_.kv->owned.clear();
  }
  if (snap.image_.rec) {
    own(snap.image_.rec->conv);
    own(snap.image_.rec->ssm);
  }
  if (snap.image_.window) {
    own(snap.image_.window->k);
    own(snap.image_.window->v);
    snap.image_.window->owned.clear();
  }
  return snap;
}

void MemorySnapshot::restore(SequenceMemory& mem, SeqId dest) const { restore_memory(mem, image_, dest); }

}  // namespace agentkv::memory
