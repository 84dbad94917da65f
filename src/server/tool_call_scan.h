// The small scanner the tool-call parsers share (tool_calls.cpp, tool_format_*.cpp): matching
// expected syntax on a text that may stop anywhere (streaming), and finding where a JSON value
// ends without parsing it, so that a call's argument text can be kept as the model wrote it.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace agentkv::server::scan {

// Result of matching an expected piece of syntax: Incomplete means the text stopped inside it
// (a streaming prefix may still become Ok); Bad means it can never match.
enum class Match { Ok, Incomplete, Bad };

bool is_ws(char c);
size_t skip_ws(std::string_view s, size_t p);
std::string_view trim(std::string_view s);
std::string_view rtrim(std::string_view s);

// Length of the longest suffix of s that is a proper prefix of tag (0 if none): a tag cut by the
// end of a streaming prefix, held back until the next token says what it is.
size_t partial_tag_suffix(std::string_view s, std::string_view tag);

// The literal `lit` at p; on Ok, p moves past it.
Match expect(std::string_view s, size_t& p, std::string_view lit);

// A JSON string starting at p (on the quote); on Ok, end is past the closing quote.
Match scan_json_string(std::string_view s, size_t p, size_t& end);

// A JSON value starting at p: where it ends (structure only; the caller checks validity).
Match scan_json_value(std::string_view s, size_t p, size_t& end);

// The JSON string literal at [p, end) decoded, or false when it is not one.
bool decode_json_string(std::string_view s, size_t p, size_t end, std::string& out);

// `text` as the body of a JSON string (quotes excluded), cut before an incomplete UTF-8
// character at its end: the escaped form of a growing text only grows.
std::string json_string_body_prefix(std::string_view text);

// n random characters of [a-zA-Z0-9].
std::string random_alphanumerics(size_t n);

}  // namespace agentkv::server::scan
