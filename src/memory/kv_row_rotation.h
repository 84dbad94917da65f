// The rotation a KV cache's rows are stored under (what, not how: the model rotates).
#pragma once
#include <cstdint>

namespace agentkv::memory {

// How the K and V rows are stored: rotated by a block Walsh-Hadamard transform with optional
// random signs (kernels/hadamard.h), or not. The model rotates; the memory records it so that a
// state or a page made under another rotation is never read as this cache's (docs/state-format.md).
struct KvRotation {
  uint32_t k_block = 0;  // 0: K rows not rotated
  uint32_t v_block = 0;  // 0: V rows not rotated
  uint64_t seed = 0;     // signs' seed; 0: all +1 (llama.cpp's rotation)
  bool active() const { return k_block > 0 || v_block > 0; }
  bool operator==(const KvRotation&) const = default;
};

}  // namespace agentkv::memory
