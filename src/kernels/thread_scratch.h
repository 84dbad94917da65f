// Per-thread scratch reused across calls (the pool's threads are persistent): grows to the
// largest request, never shrinks. One buffer per (element type, tag); a kernel whose element
// type is shared with other code (float, bytes) passes a tag of its own so that nested or
// interleaved users never hand each other the same memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace agentkv {

template <class T, class Tag = T>
T* thread_scratch(size_t count) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

// `bytes` bytes starting on a 64-byte boundary (zmm loads that never split a cache line).
template <class Tag>
uint8_t* thread_scratch_lines(size_t bytes) {
  struct alignas(64) Line {
    uint8_t bytes[64];
  };
  return thread_scratch<Line, Tag>((bytes + 63) / 64)->bytes;
}

}  // namespace agentkv
