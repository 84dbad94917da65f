// The rotation a KV cache's rows are stored under (what, not how: the model rotates).
#pragma once
#include <cstdint>
#include <string>

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

// "no KV rotation" or "KV rotation K block 128, V block 64, seed 0": for errors, logs and
// `agentkv state info`.
inline std::string describe(const KvRotation& r) {
  if (!r.active()) return "no KV rotation";
  return "KV rotation K block " + std::to_string(r.k_block) + ", V block " + std::to_string(r.v_block) + ", seed " +
         std::to_string(r.seed);
}

}  // namespace agentkv::memory
