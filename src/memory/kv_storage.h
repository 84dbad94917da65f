// The bytes of a KV cache's rows: zeroed, 64-byte aligned storage in RAM, or a sparse file mapped
// from a folder (a tail beyond RAM, docs/memory-semantics.md §9). KvRows holds one per layer and
// place (hot, tail; K, V).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace agentkv::memory {

class KvStorage {
 public:
  // calloc hands large requests fresh zero pages from the OS, so an untouched cache costs no
  // memset. With a folder: a sparse file there, mapped shared and unlinked at once (the OS writes
  // its pages out and drops them under memory pressure; nothing stays on disk after the process).
  // agentkv::Error when the memory or the file cannot be had.
  explicit KvStorage(size_t bytes, const std::string& dir = "");
  ~KvStorage();
  KvStorage(KvStorage&& o) noexcept;
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;
  KvStorage& operator=(KvStorage&&) = delete;

  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void map_file(const std::string& dir);

  void* raw_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  bool mapped_ = false;
};

}  // namespace agentkv::memory
