#include "memory/record_queue.h"

namespace agentkv::memory {

RecordQueue::RecordQueue(size_t max_queued_bytes, Store store)
    : max_queued_bytes_(max_queued_bytes), store_(std::move(store)), thread_([this] { run(); }) {}

RecordQueue::~RecordQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool RecordQueue::push(uint64_t hash, std::vector<uint8_t> record) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queued_bytes_ + record.size() > max_queued_bytes_) return false;
    queued_bytes_ += record.size();
    ++queued_[hash];
    queue_.emplace_back(hash, std::move(record));
  }
  cv_.notify_all();
  return true;
}

void RecordQueue::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued is stored
    auto [hash, record] = std::move(queue_.front());
    queue_.pop_front();
    storing_ = true;
    const size_t bytes = record.size();
    lock.unlock();
    store_(hash, record);
    lock.lock();
    queued_bytes_ -= bytes;
    if (--queued_[hash] == 0) queued_.erase(hash);
    storing_ = false;
    cv_.notify_all();
  }
}

bool RecordQueue::queued(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_.count(hash) > 0;
}

size_t RecordQueue::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size() + (storing_ ? 1 : 0);
}

void RecordQueue::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return queue_.empty() && !storing_; });
}

}  // namespace agentkv::memory
