#include "memory/kv_storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "agentkv/error.h"

namespace agentkv::memory {
namespace {
constexpr size_t kStorageAlign = 64;  // cache line / AVX-512 vector
}  // namespace

KvStorage::KvStorage(size_t bytes, const std::string& dir) : bytes_(bytes) {
  if (!dir.empty()) {
    map_file(dir);
    return;
  }
  raw_ = std::calloc(bytes + kStorageAlign, 1);
  if (!raw_) throw Error("kv cache: cannot allocate " + std::to_string(bytes) + " bytes");
  const auto addr = reinterpret_cast<uintptr_t>(raw_);
  data_ = reinterpret_cast<uint8_t*>((addr + kStorageAlign - 1) & ~(kStorageAlign - 1));
}

KvStorage::~KvStorage() {
  if (mapped_) munmap(data_, std::max<size_t>(bytes_, 1));
  std::free(raw_);
}

KvStorage::KvStorage(KvStorage&& o) noexcept
    : raw_(std::exchange(o.raw_, nullptr)), data_(o.data_), bytes_(o.bytes_), mapped_(std::exchange(o.mapped_, false)) {}

void KvStorage::map_file(const std::string& dir) {
  std::string path = dir + "/agentkv-kv-tail-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) throw Error("kv cache: cannot create a tail file in " + dir + ": " + std::strerror(errno));
  unlink(path.c_str());
  const size_t n = std::max<size_t>(bytes_, 1);
  if (ftruncate(fd, static_cast<off_t>(n)) != 0) {
    const int e = errno;
    close(fd);
    throw Error("kv cache: cannot size a tail file of " + std::to_string(n) + " bytes in " + dir + ": " + std::strerror(e));
  }
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) throw Error("kv cache: cannot map a tail file in " + dir + ": " + std::strerror(errno));
  data_ = static_cast<uint8_t*>(p);
  mapped_ = true;
}

}  // namespace agentkv::memory
