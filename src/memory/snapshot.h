// An in-memory snapshot of one sequence (or of the whole memory): cell metadata plus copies of the
// rows, kept in host vectors with no serialization (llama.cpp's ON_DEVICE state flag; what
// checkpoints use). Restoring one has exactly the semantics of restoring a state blob
// (memory_state.h): everything is validated first, a snapshot that does not fit changes nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "memory/memory_state.h"

namespace agentkv::memory {

class MemorySnapshot {
 public:
  MemorySnapshot() = default;
  MemorySnapshot(MemorySnapshot&&) noexcept = default;
  MemorySnapshot& operator=(MemorySnapshot&&) noexcept = default;
  // The image points into this object's own vectors, so copies would have to repoint it.
  MemorySnapshot(const MemorySnapshot&) = delete;
  MemorySnapshot& operator=(const MemorySnapshot&) = delete;

  // Copies seq's cells and rows (seq = -1: the whole memory). flags as for state blobs
  // (kStatePartialOnly: recurrent part only). Throws agentkv::Error for a bad seq id or flags.
  static MemorySnapshot capture(const SequenceMemory& mem, SeqId seq, uint32_t flags = kStateAll);
  // Takes a copy of any image (e.g. a checkpoint record read from a blob).
  static MemorySnapshot copy_of(const MemoryImage& image);

  // Validates, then restores into dest (a sequence snapshot, into any sequence) or, with
  // dest = -1, replaces the whole memory (a whole snapshot). Throws agentkv::Error and leaves the
  // memory unchanged when the snapshot does not fit (layout, room).
  void restore(SequenceMemory& mem, SeqId dest) const;

  const MemoryImage& image() const { return image_; }
  bool empty() const { return !image_.kv && !image_.rec && !image_.window; }
  SeqId seq() const { return image_.seq; }
  uint32_t flags() const { return image_.flags; }
  // Bytes held for rows and states (what the snapshot costs, metadata aside).
  size_t row_bytes() const { return image_.row_bytes(); }

 private:
  MemoryImage image_;
  std::vector<std::vector<uint8_t>> storage_;  // one vector per RowChunks of image_
};

}  // namespace agentkv::memory
