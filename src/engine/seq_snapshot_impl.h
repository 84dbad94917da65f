// What a SeqSnapshot (agentkv/seq_snapshot.h) holds: the memory's own snapshot, for the engine's
// state code (checkpoints in and out of state blobs).
#pragma once
#include "agentkv/seq_snapshot.h"
#include "memory/snapshot.h"

namespace agentkv {

struct SeqSnapshot::Impl {
  memory::MemorySnapshot snapshot;
};

}  // namespace agentkv
