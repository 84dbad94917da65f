// Which records a bounded tier holds, how many bytes they take, and in what order they were last
// used: the bookkeeping the disk and warm-RAM tiers share (the records themselves are theirs).
// Not thread-safe: each tier calls it under its own lock.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace agentkv::memory {

class RecordLru {
 public:
  bool contains(uint64_t hash) const { return entries_.count(hash) > 0; }
  size_t size() const { return entries_.size(); }
  uint64_t bytes() const { return bytes_; }

  // Adds (or replaces) a record as the most recently used.
  void insert(uint64_t hash, uint64_t bytes) {
    erase(hash);
    order_.push_back(hash);
    entries_[hash] = Entry{bytes, std::prev(order_.end())};
    bytes_ += bytes;
  }

  // False when the record was not there.
  bool erase(uint64_t hash) {
    const auto it = entries_.find(hash);
    if (it == entries_.end()) return false;
    bytes_ -= it->second.bytes;
    order_.erase(it->second.position);
    entries_.erase(it);
    return true;
  }

  // Used now: the last to be evicted.
  void touch(uint64_t hash) {
    if (auto it = entries_.find(hash); it != entries_.end()) order_.splice(order_.end(), order_, it->second.position);
  }

  // Removes the least recently used records until the rest fit in max_bytes; returns them.
  std::vector<uint64_t> evict_over(uint64_t max_bytes) {
    std::vector<uint64_t> victims;
    while (bytes_ > max_bytes && !order_.empty()) {
      victims.push_back(order_.front());
      erase(order_.front());
    }
    return victims;
  }

 private:
  struct Entry {
    uint64_t bytes = 0;
    std::list<uint64_t>::iterator position;  // in order_ (front: least recently used)
  };
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> order_;
  uint64_t bytes_ = 0;
};

}  // namespace agentkv::memory
