// Compact storage for the vocabulary's many short strings: one byte buffer plus an offset table
// (about 5 bytes of overhead per string instead of a 32-byte std::string and a heap block), and an
// open-addressing index that finds a string's id without keeping a second copy of its text.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::tokenizer {

// Strings numbered 0, 1, 2, ... in the order they were added.
class StringPool {
 public:
  StringPool() : offsets_{0} {}
  void reserve(size_t n_strings, size_t n_bytes);
  // Appends `text` and returns its id. Throws agentkv::Error past 4 GiB of text.
  uint32_t add(std::string_view text);
  std::string_view operator[](size_t id) const {
    return {bytes_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]};
  }
  size_t size() const { return offsets_.size() - 1; }
  void shrink_to_fit();
  size_t memory_bytes() const { return bytes_.capacity() + offsets_.capacity() * sizeof(uint32_t); }

 private:
  std::string bytes_;
  std::vector<uint32_t> offsets_;  // string i is bytes_[offsets_[i], offsets_[i + 1])
};

// Finds the id of a string of one StringPool. Only ids are stored (4 bytes a slot, at most 3/4
// full); texts are compared in the pool, so the index is always used together with that pool.
class StringIndex {
 public:
  void reserve(size_t n_strings);
  // Indexes pool[id]. Returns -1, or the id already indexed for the same text (then nothing is
  // added: the first of equal strings wins).
  int32_t insert(const StringPool& pool, uint32_t id);
  int32_t find(const StringPool& pool, std::string_view text) const;  // -1 when absent
  size_t memory_bytes() const { return slots_.capacity() * sizeof(uint32_t); }

 private:
  static size_t hash(std::string_view text);
  void rehash(const StringPool& pool, size_t n_slots);

  std::vector<uint32_t> slots_;  // id + 1; 0 = empty; size is a power of two
  size_t n_used_ = 0;
};

}  // namespace agentkv::tokenizer
