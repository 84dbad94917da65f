// The slot save folder (--slot-save-path): state files written and read by name for
// POST /slots/{id}?action=save|restore|adopt and /v1/prefill (docs/security.md).
//   - A name is one path component that does not start with '.' and does not end in ".tmp".
//   - A save writes a temporary file of its own (created O_EXCL | O_NOFOLLOW, mode 0600: a
//     pre-placed file or symlink is never followed or reused), syncs it and renames it over the
//     name, so concurrent saves to one name never share a file and a crash never leaves half a
//     state under the name. It refuses to replace anything but an agentkv state file.
//   - A read opens the name with O_NOFOLLOW and reads regular files only.
//   - Errors name the file as the client gave it: never the folder's path, the file's size or
//     its bytes.
//   - Temporary files left by a killed save are removed when the folder is opened.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace agentkv::server {

class StateFolder {
 public:
  // Opens the folder; throws agentkv::Error if it is not a directory that can be opened.
  explicit StateFolder(const std::string& path);
  ~StateFolder();
  StateFolder(const StateFolder&) = delete;
  StateFolder& operator=(const StateFolder&) = delete;

  // Throws HttpError (400) for a name that is not allowed.
  static void check_name(const std::string& name);
  // Throws HttpError: 400 for a name or a file that must not be replaced, 500 for an I/O error.
  void write(const std::string& name, std::span<const uint8_t> blob) const;
  // Throws HttpError (400) when the file does not exist, is no regular file or no agentkv state.
  std::vector<uint8_t> read(const std::string& name) const;

  size_t stale_removed() const { return stale_removed_; }  // temporary files removed at opening

 private:
  size_t remove_stale();
  int dir_ = -1;
  size_t stale_removed_ = 0;
};

}  // namespace agentkv::server
