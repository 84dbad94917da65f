#include "engine/state_description.h"

#include "memory/memory_state.h"
#include "memory/state_info.h"

namespace agentkv {

StateDescription describe_state_blob(std::span<const uint8_t> blob, const std::string& what) {
  const memory::StateContents contents = memory::decode_state(blob, what);
  return {memory::describe_state(contents, blob.size()), contents.fingerprint};
}

}  // namespace agentkv
