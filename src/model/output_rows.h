// The last layer of a decoder only carries on with the rows whose logits are wanted.
#pragma once
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>

namespace agentkv {

// Moves the listed rows (ascending token indices) to the front of every buffer (`width` floats per
// row) and returns how many rows remain.
inline int64_t keep_output_rows(std::span<const int> rows, int64_t width, std::initializer_list<float*> buffers) {
  const int64_t n = static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = rows[i];
    if (src == i) continue;
    for (float* buf : buffers) std::memcpy(buf + i * width, buf + src * width, static_cast<size_t>(width) * sizeof(float));
  }
  return n;
}

}  // namespace agentkv
