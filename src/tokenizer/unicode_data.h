// The generated Unicode table (unicode_data.cpp, written by gen_unicode_data.py from ICU).
#pragma once
#include <cstddef>
#include <cstdint>

namespace agentkv::unicode {

// Code points [first, next range's first) share `flags`: a Category value (unicode.h) in the low
// bits, kWhitespaceBit for the White_Space property. The last range runs to U+10FFFF.
struct CodepointRange {
  uint32_t first;
  uint8_t flags;
};

extern const CodepointRange kCodepointRanges[];
extern const size_t kCodepointRangeCount;
extern const char kUnicodeVersion[];

}  // namespace agentkv::unicode
