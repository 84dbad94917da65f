// Human-readable description of a decoded state blob (`agentkv state info`): format version,
// model fingerprint, what was saved (sequence or whole memory, flags), the KV layout with its cell
// ranges, positions and types, the recurrent cells, tokens, logits and checkpoints.
#pragma once
#include <cstddef>
#include <string>

#include "memory/memory_state.h"

namespace agentkv::memory {

std::string describe_state(const StateContents& contents, size_t blob_bytes);

}  // namespace agentkv::memory
