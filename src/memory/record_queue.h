// Records waiting to be stored by a tier's background thread (the disk tier writes them, the warm
// tier compresses them), so put() never costs the scheduler's thread the store. Bounded in bytes:
// beyond the bound a record is dropped (a tier may lose anything). A record counts as queued until
// its store call returns, so a tier that records it in that call never looks as if it lacked it.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace agentkv::memory {

class RecordQueue {
 public:
  using Store = std::function<void(uint64_t hash, std::vector<uint8_t>& record)>;
  // `store` runs on the queue's thread, one record at a time.
  RecordQueue(size_t max_queued_bytes, Store store);
  // Stores what is queued, then stops.
  ~RecordQueue();
  RecordQueue(const RecordQueue&) = delete;
  RecordQueue& operator=(const RecordQueue&) = delete;

  // False when the record was dropped: the queue is full.
  bool push(uint64_t hash, std::vector<uint8_t> record);
  bool queued(uint64_t hash) const;
  size_t pending() const;  // queued or being stored
  // Waits until every record pushed so far is stored.
  void flush();

 private:
  void run();

  const size_t max_queued_bytes_;
  const Store store_;
  mutable std::mutex mutex_;  // everything below
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, std::vector<uint8_t>>> queue_;
  std::unordered_map<uint64_t, size_t> queued_;  // hash -> times queued, the one being stored included
  size_t queued_bytes_ = 0;
  bool storing_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace agentkv::memory
