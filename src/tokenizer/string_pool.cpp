#include "tokenizer/string_pool.h"

#include <functional>

#include "agentkv/error.h"

namespace agentkv::tokenizer {

void StringPool::reserve(size_t n_strings, size_t n_bytes) {
  offsets_.reserve(n_strings + 1);
  bytes_.reserve(n_bytes);
}

uint32_t StringPool::add(std::string_view text) {
  if (bytes_.size() + text.size() > UINT32_MAX) throw Error("string pool exceeds 4 GiB");
  bytes_.append(text);
  offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  return static_cast<uint32_t>(offsets_.size() - 2);
}

void StringPool::shrink_to_fit() {
  bytes_.shrink_to_fit();
  offsets_.shrink_to_fit();
}

size_t StringIndex::hash(std::string_view text) { return std::hash<std::string_view>{}(text); }

void StringIndex::reserve(size_t n_strings) {
  size_t n_slots = 16;
  while (n_slots * 3 < n_strings * 4) n_slots *= 2;
  if (n_slots > slots_.size() && n_used_ == 0) slots_.assign(n_slots, 0);
}

void StringIndex::rehash(const StringPool& pool, size_t n_slots) {
  std::vector<uint32_t> old;
  old.swap(slots_);
  slots_.assign(n_slots, 0);
  const size_t mask = n_slots - 1;
  for (uint32_t s : old) {
    if (s == 0) continue;
    size_t i = hash(pool[s - 1]) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

int32_t StringIndex::insert(const StringPool& pool, uint32_t id) {
  if (slots_.empty() || (n_used_ + 1) * 4 > slots_.size() * 3) rehash(pool, slots_.empty() ? 16 : slots_.size() * 2);
  const std::string_view text = pool[id];
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash(text) & mask;; i = (i + 1) & mask) {
    const uint32_t s = slots_[i];
    if (s == 0) {
      slots_[i] = id + 1;
      ++n_used_;
      return -1;
    }
    if (pool[s - 1] == text) return static_cast<int32_t>(s - 1);
  }
}

int32_t StringIndex::find(const StringPool& pool, std::string_view text) const {
  if (slots_.empty()) return -1;
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash(text) & mask;; i = (i + 1) & mask) {
    const uint32_t s = slots_[i];
    if (s == 0) return -1;
    if (pool[s - 1] == text) return static_cast<int32_t>(s - 1);
  }
}

}  // namespace agentkv::tokenizer
