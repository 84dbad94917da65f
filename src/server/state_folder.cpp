#include "server/state_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "agentkv/error.h"
#include "agentkv/session_state.h"
#include "server/server_error.h"

namespace agentkv::server {

namespace {

constexpr const char* kTempPrefix = ".agentkv-tmp-";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Whether an open file starts with the agentkv state magic.
bool starts_with_state_magic(int fd) {
  uint8_t magic[4];
  size_t got = 0;
  while (got < sizeof magic) {
    const ssize_t n = ::pread(fd, magic + got, sizeof magic - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return starts_like_state(magic);
}

HttpError io_error(const std::string& what, const std::string& name, int err) {
  return HttpError(ErrorType::Server, "cannot " + what + " state file '" + name + "': " + std::strerror(err));
}

std::string temp_name() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%016llx%04llx", kTempPrefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
  return buf;
}

}  // namespace

StateFolder::StateFolder(const std::string& path) {
  dir_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_ < 0) throw Error("cannot open the slot save folder " + path + ": " + std::strerror(errno));
  stale_removed_ = remove_stale();
}

StateFolder::~StateFolder() {
  if (dir_ >= 0) ::close(dir_);
}

void StateFolder::check_name(const std::string& name) {
  const bool bad = name.empty() || name.size() > 255 || name.front() == '.' ||
                   name.find_first_of(std::string("/\\\0", 3)) != std::string::npos;
  if (bad)
    throw invalid_request("invalid filename '" + name.substr(0, 255) +
                          "': a plain file name without path components, not starting with '.', is required");
  if (ends_with(name, ".tmp")) throw invalid_request("invalid filename '" + name + "': names ending in .tmp are reserved");
}

size_t StateFolder::remove_stale() {
  const int fd = ::dup(dir_);
  if (fd < 0) return 0;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return 0;
  }
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kTempPrefix, 0) == 0) {
      stale.push_back(name);
    } else if (ends_with(name, ".tmp")) {
      // Earlier versions saved through "<name>.tmp": such a file holding a state is a leftover.
      struct stat st {};
      if (::fstatat(dir_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      Fd f(::openat(dir_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (f.get() >= 0 && starts_with_state_magic(f.get())) stale.push_back(name);
    }
  }
  ::closedir(d);
  size_t removed = 0;
  for (const std::string& name : stale)
    if (::unlinkat(dir_, name.c_str(), 0) == 0) ++removed;
  return removed;
}

void StateFolder::write(const std::string& name, std::span<const uint8_t> blob) const {
  check_name(name);
  // Only an agentkv state may be replaced: not a file of another kind, a symlink, a folder.
  struct stat st {};
  if (::fstatat(dir_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    bool is_state = false;
    if (S_ISREG(st.st_mode)) {
      Fd f(::openat(dir_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      is_state = f.get() >= 0 && (st.st_size == 0 ? false : starts_with_state_magic(f.get()));
    }
    if (!is_state)
      throw invalid_request("file '" + name + "' exists in the slot save path and is not an agentkv state: "
                            "it is not replaced");
  } else if (errno != ENOENT) {
    throw io_error("check", name, errno);
  }

  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = temp_name();
    fd = ::openat(dir_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) throw io_error("create", name, errno);
  }
  if (fd < 0) throw io_error("create", name, EEXIST);
  Fd file(fd);
  auto fail = [&](const char* what, int err) {
    ::unlinkat(dir_, tmp.c_str(), 0);
    return io_error(what, name, err);
  };
  size_t done = 0;
  while (done < blob.size()) {
    const ssize_t n = ::write(file.get(), blob.data() + done, blob.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw fail("write", n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  if (::fsync(file.get()) != 0) throw fail("write", errno);
  if (::close(file.release()) != 0) throw fail("write", errno);
  // rename replaces the directory entry: a symlink placed under the name meanwhile is replaced,
  // never followed.
  if (::renameat(dir_, tmp.c_str(), dir_, name.c_str()) != 0) throw fail("write", errno);
}

std::vector<uint8_t> StateFolder::read(const std::string& name) const {
  check_name(name);
  const std::string what = "state file '" + name + "'";
  Fd f(::openat(dir_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (f.get() < 0) {
    if (errno == ENOENT) throw invalid_request(what + " not found in the slot save path");
    if (errno == ELOOP || errno == ENXIO) throw invalid_request(what + " is not a regular file");
    throw io_error("open", name, errno);
  }
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) throw io_error("open", name, errno);
  if (!S_ISREG(st.st_mode)) throw invalid_request(what + " is not a regular file");
  if (!starts_with_state_magic(f.get())) throw invalid_request(what + " is not an agentkv state");
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(f.get(), bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error("read", name, errno);
    if (n == 0) break;  // shrank meanwhile: the decoder reports a truncated state
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace agentkv::server
