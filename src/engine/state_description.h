// What a state blob (docs/state-format.md) holds, in words, for `agentkv state info`: format
// version, model fingerprint, sequence or whole memory, KV layout and cell ranges, recurrent
// cells, tokens, logits and checkpoints.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace agentkv {

struct StateDescription {
  std::string text;          // several lines, each ending in '\n'
  uint64_t fingerprint = 0;  // of the model that saved it (model_fingerprint, engine/session_state.h)
};

// Validates the whole blob (length, checksum, every section) first. `what` names it in errors.
// Throws agentkv::Error.
StateDescription describe_state_blob(std::span<const uint8_t> blob, const std::string& what);

}  // namespace agentkv
