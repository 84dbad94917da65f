// Little-endian byte writer and bounds-checked reader for state blobs (docs/state-format.md).
// The reader never reads past its span: every read names the field it wanted, so a truncated or
// corrupt blob becomes an agentkv::Error like "state: KV rows of layer 3: need 4096 bytes at
// offset 120, 17 left", never a crash.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentkv::memory {

static_assert(std::endian::native == std::endian::little,
              "state blobs are little-endian and written with memcpy");

class StateWriter {
 public:
  explicit StateWriter(std::vector<uint8_t>& out) : out_(out) {}

  void u32(uint32_t v) { put(&v, sizeof v); }
  void i32(int32_t v) { put(&v, sizeof v); }
  void u64(uint64_t v) { put(&v, sizeof v); }
  void bytes(std::span<const uint8_t> b) { put(b.data(), b.size()); }
  void floats(std::span<const float> f) { put(f.data(), f.size_bytes()); }

  // Reserve a field to fill in once what follows is written (lengths, counts).
  size_t placeholder_u32() {
    const size_t at = out_.size();
    u32(0);
    return at;
  }
  size_t placeholder_u64() {
    const size_t at = out_.size();
    u64(0);
    return at;
  }
  void patch_u32(size_t at, uint32_t v);
  void patch_u64(size_t at, uint64_t v);
  size_t size() const { return out_.size(); }
  std::vector<uint8_t>& buffer() { return out_; }

 private:
  void put(const void* p, size_t n);
  std::vector<uint8_t>& out_;
};

class StateReader {
 public:
  // `what` prefixes error messages ("state", "state file x.akv").
  StateReader(std::span<const uint8_t> bytes, std::string what, size_t base_offset = 0)
      : bytes_(bytes), what_(std::move(what)), base_(base_offset) {}

  uint32_t u32(std::string_view field);
  int32_t i32(std::string_view field);
  uint64_t u64(std::string_view field);
  // count elements of elem_size bytes (overflow-checked), as a view into the blob.
  std::span<const uint8_t> bytes(uint64_t count, uint64_t elem_size, std::string_view field);
  // A reader over the next n bytes (a section payload); this reader moves past them.
  StateReader sub(uint64_t n, std::string_view field);

  size_t remaining() const { return bytes_.size() - pos_; }
  size_t offset() const { return base_ + pos_; }  // from the start of the blob
  // Throws unless every byte was consumed ("trailing bytes in <field>").
  void expect_end(std::string_view field) const;
  [[noreturn]] void fail(const std::string& message) const;
  const std::string& what() const { return what_; }

 private:
  const uint8_t* take(uint64_t n, std::string_view field);
  std::span<const uint8_t> bytes_;
  std::string what_;
  size_t base_ = 0;
  size_t pos_ = 0;
};

// 16 hex digits: how checksums, fingerprints and code ids read in messages.
std::string hex64(uint64_t v);

}  // namespace agentkv::memory
