// UTF-8 string helpers with Python str semantics (indices count code points, whitespace is
// Unicode whitespace) for the chat-template interpreter.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::jinja::text {

// Decodes one code point at `pos`, advancing it; an invalid byte decodes as itself (U+0080..FF
// range is not implied: it is returned as 0xDC00 + byte, never throws).
uint32_t next_code_point(std::string_view s, size_t& pos);
void append_utf8(std::string& out, uint32_t cp);

// Byte offsets of every code point start, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);
// The code point at a Python index (negative counts from the end), without allocating.
std::optional<std::string_view> code_point_at(std::string_view s, int64_t index);
bool is_ascii(std::string_view s);

// Python str.isspace() for one code point.
bool is_space(uint32_t cp);

// str.strip / lstrip / rstrip: without chars, Unicode whitespace; with chars, any code point of it.
std::string_view strip(std::string_view s, bool left, bool right,
                       const std::optional<std::string_view>& chars = std::nullopt);

// str.split(sep, maxsplit) and str.split() (whitespace runs) / str.rsplit.
std::vector<std::string> split(std::string_view s, std::string_view sep, int64_t maxsplit);
std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, std::string_view sep, int64_t maxsplit);

// ASCII-only case mapping (documented limitation).
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
std::string capitalize(std::string_view s);
std::string title(std::string_view s);

// str.replace(old, new, count) where count < 0 means all; empty old inserts between code points.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count,
                    size_t max_bytes);

// Python repr() of a str (quotes chosen as Python does).
std::string repr(std::string_view s);
// A JSON string literal as Python json.dumps(ensure_ascii=False) writes it.
void append_json_string(std::string& out, std::string_view s);

}  // namespace agentkv::jinja::text
