#include "tokenizer/jinja_text.h"

#include <algorithm>

#include "tokenizer/jinja_value.h"

namespace agentkv::jinja::text {

namespace {
// Invalid bytes travel as lone low surrogates (like Python's surrogateescape), so slicing and
// re-encoding a malformed string gives back its original bytes.
constexpr uint32_t kEscapedByteBase = 0xDC00;
}  // namespace

uint32_t next_code_point(std::string_view s, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  int len = 0;
  uint32_t cp = 0;
  uint32_t min_cp = 0;
  if ((b0 & 0xE0) == 0xC0) { len = 2; cp = b0 & 0x1F; min_cp = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; cp = b0 & 0x0F; min_cp = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; cp = b0 & 0x07; min_cp = 0x10000; }
  if (len == 0 || pos + len > s.size()) {
    ++pos;
    return kEscapedByteBase + b0;
  }
  for (int i = 1; i < len; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return kEscapedByteBase + b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++pos;
    return kEscapedByteBase + b0;
  }
  pos += len;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= kEscapedByteBase + 0x80 && cp <= kEscapedByteBase + 0xFF) {
    out.push_back(static_cast<char>(cp - kEscapedByteBase));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  size_t pos = 0;
  while (pos < s.size()) {
    offsets.push_back(pos);
    next_code_point(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t code_point_count(std::string_view s) {
  size_t count = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    next_code_point(s, pos);
    ++count;
  }
  return count;
}

std::optional<std::string_view> code_point_at(std::string_view s, int64_t index) {
  if (index < 0) {
    index += static_cast<int64_t>(code_point_count(s));
    if (index < 0) return std::nullopt;
  }
  size_t pos = 0;
  for (int64_t i = 0; pos < s.size(); ++i) {
    const size_t start = pos;
    next_code_point(s, pos);
    if (i == index) return s.substr(start, pos - start);
  }
  return std::nullopt;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
}

bool is_space(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x80) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string_view strip(std::string_view s, bool left, bool right,
                       const std::optional<std::string_view>& chars) {
  std::vector<uint32_t> set;
  if (chars) {
    size_t pos = 0;
    while (pos < chars->size()) set.push_back(next_code_point(*chars, pos));
  }
  const auto strippable = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_space(cp);
  };
  size_t first = 0;
  if (left) {
    while (first < s.size()) {
      size_t next = first;
      if (!strippable(next_code_point(s, next))) break;
      first = next;
    }
  }
  size_t last = s.size();
  if (right) {
    while (last > first) {
      // Step back to the start of the last code point (at most 4 bytes).
      size_t start = last - 1;
      while (start > first && last - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
      size_t end = start;
      uint32_t cp = next_code_point(s, end);
      if (end != last) {  // not a well-formed sequence ending here: the last byte stands alone
        start = last - 1;
        end = start;
        cp = next_code_point(s, end);
      }
      if (!strippable(cp)) break;
      last = start;
    }
  }
  return s.substr(first, last - first);
}

std::vector<std::string> split(std::string_view s, std::string_view sep, int64_t maxsplit) {
  if (sep.empty()) throw EvalError("str.split(): empty separator");
  std::vector<std::string> parts;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t hit = s.find(sep, start);
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(start, hit - start));
    start = hit + sep.size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, std::string_view sep, int64_t maxsplit) {
  if (sep.empty()) throw EvalError("str.rsplit(): empty separator");
  std::vector<std::string> parts;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos < s.size()) {
    // Skip a whitespace run.
    size_t word_start = pos;
    while (word_start < s.size()) {
      size_t probe = word_start;
      if (!is_space(next_code_point(s, probe))) break;
      word_start = probe;
    }
    if (word_start >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      // Python keeps the remainder as is, trailing whitespace included.
      parts.emplace_back(s.substr(word_start));
      return parts;
    }
    size_t word_end = word_start;
    while (word_end < s.size()) {
      size_t probe = word_end;
      if (is_space(next_code_point(s, probe))) break;
      word_end = probe;
    }
    parts.emplace_back(s.substr(word_start, word_end - word_start));
    pos = word_end;
  }
  return parts;
}

std::string to_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = to_lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::string title(std::string_view s) {
  std::string out(s);
  bool previous_is_letter = false;
  for (char& c : out) {
    const bool lower = c >= 'a' && c <= 'z';
    const bool upper = c >= 'A' && c <= 'Z';
    if (lower && !previous_is_letter) c = static_cast<char>(c - 'a' + 'A');
    if (upper && previous_is_letter) c = static_cast<char>(c - 'A' + 'a');
    previous_is_letter = lower || upper;
  }
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count,
                    size_t max_bytes) {
  std::string out;
  const auto check = [&] {
    if (out.size() > max_bytes) throw EvalError("string exceeds the size limit");
  };
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    const std::vector<size_t> offsets = code_point_offsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += s.substr(offsets[i], offsets[i + 1] - offsets[i]);
      check();
    }
    if (count < 0 || done < count) out += to;
    check();
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, start);
    if (hit == std::string_view::npos) break;
    out += s.substr(start, hit - start);
    out += to;
    check();
    start = hit + from.size();
    ++done;
  }
  out += s.substr(start);
  check();
  return out;
}

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  static const char* kHex = "0123456789abcdef";
  for (char ch : s) {
    const auto c = static_cast<uint8_t>(ch);
    if (ch == quote || ch == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back(quote);
  return out;
}

void append_json_string(std::string& out, std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<uint8_t>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

}  // namespace agentkv::jinja::text
