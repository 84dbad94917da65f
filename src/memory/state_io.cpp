#include "memory/state_io.h"

#include <cstdio>

#include <cstring>

#include "agentkv/error.h"

namespace agentkv::memory {

void StateWriter::put(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out_.insert(out_.end(), b, b + n);
}

void StateWriter::patch_u32(size_t at, uint32_t v) { std::memcpy(out_.data() + at, &v, sizeof v); }

void StateWriter::patch_u64(size_t at, uint64_t v) { std::memcpy(out_.data() + at, &v, sizeof v); }

void StateReader::fail(const std::string& message) const { throw Error(what_ + ": " + message); }

const uint8_t* StateReader::take(uint64_t n, std::string_view field) {
  if (n > remaining())
    fail(std::string(field) + ": need " + std::to_string(n) + " bytes at offset " +
         std::to_string(offset()) + ", only " + std::to_string(remaining()) +
         " left (truncated or corrupt)");
  const uint8_t* p = bytes_.data() + pos_;
  pos_ += static_cast<size_t>(n);
  return p;
}

uint32_t StateReader::u32(std::string_view field) {
  uint32_t v;
  std::memcpy(&v, take(sizeof v, field), sizeof v);
  return v;
}

int32_t StateReader::i32(std::string_view field) {
  int32_t v;
  std::memcpy(&v, take(sizeof v, field), sizeof v);
  return v;
}

uint64_t StateReader::u64(std::string_view field) {
  uint64_t v;
  std::memcpy(&v, take(sizeof v, field), sizeof v);
  return v;
}

std::span<const uint8_t> StateReader::bytes(uint64_t count, uint64_t elem_size,
                                            std::string_view field) {
  uint64_t n = 0;
  if (__builtin_mul_overflow(count, elem_size, &n))
    fail(std::string(field) + ": size " + std::to_string(count) + " x " +
         std::to_string(elem_size) + " overflows (corrupt)");
  const uint8_t* p = take(n, field);
  return {p, static_cast<size_t>(n)};
}

StateReader StateReader::sub(uint64_t n, std::string_view field) {
  const size_t start = offset();
  const uint8_t* p = take(n, field);
  return StateReader({p, static_cast<size_t>(n)}, what_, start);
}

void StateReader::expect_end(std::string_view field) const {
  if (remaining() != 0)
    fail(std::string(field) + ": " + std::to_string(remaining()) + " unexpected bytes at offset " +
         std::to_string(offset()) + " (corrupt)");
}

std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace agentkv::memory
