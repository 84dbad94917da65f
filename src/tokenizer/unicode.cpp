#include "tokenizer/unicode.h"

#include <array>

#include "tokenizer/unicode_data.h"

namespace agentkv::unicode {

namespace {

// One byte per code point (1.1 MB), built once from the range table.
const std::vector<uint8_t>& flag_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(kMaxCodepoint + 1, 0);
    for (size_t i = 0; i < kCodepointRangeCount; ++i) {
      const uint32_t first = kCodepointRanges[i].first;
      const uint32_t end = i + 1 < kCodepointRangeCount ? kCodepointRanges[i + 1].first : kMaxCodepoint + 1;
      for (uint32_t cp = first; cp < end; ++cp) t[cp] = kCodepointRanges[i].flags;
    }
    return t;
  }();
  return table;
}

struct ByteMapping {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::vector<int16_t> from_cp;  // indexed by code point < 512
};

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order.
const ByteMapping& byte_mapping() {
  static const ByteMapping mapping = [] {
    ByteMapping m;
    m.from_cp.assign(512, -1);
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? uint32_t(b) : next++;
      m.to_cp[b] = cp;
      append_utf8(cp, m.to_utf8[b]);
      m.from_cp[cp] = int16_t(b);
    }
    return m;
  }();
  return mapping;
}

}  // namespace

uint8_t codepoint_flags(uint32_t cp) {
  if (cp > kMaxCodepoint) return uint8_t(Category::Undefined);
  return flag_table()[cp];
}

void decode_utf8(std::string_view text, std::vector<uint32_t>& out) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if (b < 0xC0) {  // stray continuation byte
      out.push_back(kReplacementChar);
      i += 1;
    } else if (b < 0xE0) {
      if (cont(i + 1)) {
        out.push_back((uint32_t(b & 0x1F) << 6) | (s[i + 1] & 0x3F));
        i += 2;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else if (b < 0xF0) {
      if (cont(i + 1) && cont(i + 2)) {
        out.push_back((uint32_t(b & 0x0F) << 12) | (uint32_t(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F));
        i += 3;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else if (b < 0xF8) {
      if (cont(i + 1) && cont(i + 2) && cont(i + 3)) {
        out.push_back((uint32_t(b & 0x07) << 18) | (uint32_t(s[i + 1] & 0x3F) << 12) |
                      (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F));
        i += 4;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else {
      out.push_back(kReplacementChar);
      i += 1;
    }
  }
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp > kMaxCodepoint) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool round_trips(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (b >= 0xC2 && b < 0xE0) {
      len = 2;
      cp = b & 0x1F;
    } else if (b >= 0xE0 && b < 0xF0) {
      len = 3;
      cp = b & 0x0F;
    } else if (b >= 0xF0 && b < 0xF5) {
      len = 4;
      cp = b & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Reject overlong 3/4-byte forms and values above U+10FFFF (append_utf8 would rewrite them).
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > kMaxCodepoint))) return false;
    i += len;
  }
  return true;
}

uint32_t byte_to_codepoint(uint8_t byte) { return byte_mapping().to_cp[byte]; }

const std::string& byte_to_utf8(uint8_t byte) { return byte_mapping().to_utf8[byte]; }

int codepoint_to_byte(uint32_t cp) {
  const auto& m = byte_mapping();
  return cp < m.from_cp.size() ? m.from_cp[cp] : -1;
}

}  // namespace agentkv::unicode
