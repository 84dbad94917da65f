#include "memory/disk_page_tier.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <system_error>

#include <unistd.h>

#include "agentkv/error.h"

namespace agentkv::memory {
namespace fs = std::filesystem;
namespace {

constexpr const char* kRecordSuffix = ".page";
constexpr const char* kTempSuffix = ".tmp";

// "<16 hex digits>.page" -> the hash; nullopt for any other name.
std::optional<uint64_t> hash_of_name(const std::string& name) {
  if (name.size() != 16 + std::char_traits<char>::length(kRecordSuffix) || !name.ends_with(kRecordSuffix))
    return std::nullopt;
  uint64_t h = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = name[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    h = h << 4 | static_cast<uint64_t>(d);
  }
  return h;
}

std::string hex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, hash);
  return buf;
}

bool write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  return static_cast<bool>(out);
}

std::optional<std::vector<uint8_t>> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  const std::streamoff size = in.tellg();
  if (size < 0) return std::nullopt;
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (!in) return std::nullopt;
  return bytes;
}

}  // namespace

DiskPageTier::DiskPageTier(DiskTierConfig cfg)
    : cfg_(std::move(cfg)),
      queue_(cfg_.max_queued_bytes, [this](uint64_t hash, std::vector<uint8_t>& record) { write(hash, record); }) {
  std::error_code ec;
  fs::create_directories(cfg_.dir, ec);
  if (ec || !fs::is_directory(cfg_.dir))
    throw Error("--cache-dir: cannot create the folder '" + cfg_.dir.string() + "': " + ec.message());
  std::lock_guard<std::mutex> lock(mutex_);
  index_folder();
}

DiskPageTier::~DiskPageTier() = default;

fs::path DiskPageTier::record_path(uint64_t hash) const { return cfg_.dir / (hex(hash) + kRecordSuffix); }

void DiskPageTier::index_folder() {
  // Oldest first, so the least recently written records are the first evicted, as in the last run.
  std::vector<std::pair<fs::file_time_type, std::pair<uint64_t, uint64_t>>> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(cfg_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(kTempSuffix)) {  // a write the last run did not finish
      std::error_code rm;
      if (fs::remove(e.path(), rm)) ++stats_.leftovers_removed;
      continue;
    }
    const auto hash = hash_of_name(name);
    std::error_code st;
    if (!hash || !e.is_regular_file(st)) continue;
    const uint64_t bytes = e.file_size(st);
    if (st) continue;
    found.push_back({e.last_write_time(st), {*hash, bytes}});
  }
  if (ec) throw Error("--cache-dir: cannot read the folder '" + cfg_.dir.string() + "': " + ec.message());
  // Written in the same clock tick: the hash decides, so the order is a function of the folder.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.first < b.second.first;
  });
  for (const auto& f : found) files_.insert(f.second.first, f.second.second);
  stats_.pages_found_at_start = files_.size();
  evict_over_budget();
}

void DiskPageTier::evict_over_budget() {
  for (uint64_t victim : files_.evict_over(cfg_.max_bytes)) {
    std::error_code ec;
    fs::remove(record_path(victim), ec);
    ++stats_.pages_evicted;
  }
}

void DiskPageTier::put(uint64_t hash, std::vector<uint8_t> record) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (files_.contains(hash)) return;
  }
  if (queue_.queued(hash)) return;
  if (!queue_.push(hash, std::move(record))) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.writes_dropped;
  }
}

void DiskPageTier::write(uint64_t hash, const std::vector<uint8_t>& record) {
  // Written beside its final name, then renamed: a reader sees the whole record or none.
  static const std::string temp_tag = "." + std::to_string(::getpid()) + kTempSuffix;
  const fs::path final_path = record_path(hash);
  const fs::path temp_path = cfg_.dir / (hex(hash) + temp_tag);
  bool ok = write_file(temp_path, record);
  std::error_code ec;
  if (ok) fs::rename(temp_path, final_path, ec);
  if (!ok || ec) fs::remove(temp_path, ec);
  std::lock_guard<std::mutex> lock(mutex_);
  if (ok && !ec) {
    files_.insert(hash, record.size());
    ++stats_.pages_written;
    evict_over_budget();
  } else {
    ++stats_.write_errors;
  }
}

std::vector<std::optional<std::vector<uint8_t>>> DiskPageTier::get(std::span<const uint64_t> hashes) {
  std::vector<std::optional<std::vector<uint8_t>>> out(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!files_.contains(hashes[i])) {
        ++stats_.misses;
        continue;
      }
      files_.touch(hashes[i]);  // used: the last to be evicted
    }
    const auto t0 = std::chrono::steady_clock::now();
    out[i] = read_file(record_path(hashes[i]));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.load_seconds += seconds;
    if (out[i]) {
      ++stats_.pages_read;
      stats_.bytes_read += out[i]->size();
    } else {  // deleted or unreadable behind our back: forget it, it will be written again
      ++stats_.read_errors;
      files_.erase(hashes[i]);
    }
  }
  return out;
}

bool DiskPageTier::holds(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (files_.contains(hash)) return true;
  return queue_.queued(hash);
}

void DiskPageTier::forget(uint64_t hash) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!files_.contains(hash)) return;
  files_.erase(hash);
  std::error_code ec;
  fs::remove(record_path(hash), ec);
  ++stats_.pages_forgotten;
}

DiskTierStats DiskPageTier::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  DiskTierStats s = stats_;
  s.writes_pending = queue_.pending();
  s.pages_on_disk = files_.size();
  s.bytes_on_disk = files_.bytes();
  return s;
}

void DiskPageTier::flush() { queue_.flush(); }

}  // namespace agentkv::memory
