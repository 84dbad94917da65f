// Fixed-width little-endian fields of the tier records (page_record.cpp, snapshot_record.cpp):
// appended to a byte vector and read back from a checked offset. x86-64 and every target agentkv
// builds for are little-endian, so a field is its in-memory bytes.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

namespace agentkv::memory::record_bytes {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace agentkv::memory::record_bytes
