#include "server/tool_call_scan.h"

#include <algorithm>
#include <cctype>
#include <random>

#include "server/json_fields.h"

namespace agentkv::server::scan {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_ws(std::string_view s, size_t p) {
  while (p < s.size() && is_ws(s[p])) ++p;
  return p;
}

std::string_view trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && is_ws(s[a])) ++a;
  while (b > a && is_ws(s[b - 1])) --b;
  return s.substr(a, b - a);
}

std::string_view rtrim(std::string_view s) {
  size_t b = s.size();
  while (b > 0 && is_ws(s[b - 1])) --b;
  return s.substr(0, b);
}

size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t len = std::min(tag.size() - 1, s.size()); len > 0; --len)
    if (s.substr(s.size() - len) == tag.substr(0, len)) return len;
  return 0;
}

Match expect(std::string_view s, size_t& p, std::string_view lit) {
  const size_t n = std::min(lit.size(), s.size() - std::min(p, s.size()));
  if (s.substr(std::min(p, s.size()), n) != lit.substr(0, n)) return Match::Bad;
  if (n < lit.size()) return Match::Incomplete;
  p += lit.size();
  return Match::Ok;
}

Match scan_json_string(std::string_view s, size_t p, size_t& end) {
  if (p >= s.size()) return Match::Incomplete;
  if (s[p] != '"') return Match::Bad;
  for (size_t i = p + 1; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
      continue;
    }
    if (s[i] == '"') {
      end = i + 1;
      return Match::Ok;
    }
  }
  return Match::Incomplete;
}

Match scan_json_value(std::string_view s, size_t p, size_t& end) {
  if (p >= s.size()) return Match::Incomplete;
  const char c = s[p];
  if (c == '"') return scan_json_string(s, p, end);
  if (c == '{' || c == '[') {
    int depth = 0;
    for (size_t i = p; i < s.size(); ++i) {
      const char d = s[i];
      if (d == '"') {
        size_t e = 0;
        const Match m = scan_json_string(s, i, e);
        if (m != Match::Ok) return m;
        i = e - 1;
      } else if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) {
          end = i + 1;
          return Match::Ok;
        }
      }
    }
    return Match::Incomplete;
  }
  size_t i = p;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == '+' || s[i] == '.')) ++i;
  if (i == p) return Match::Bad;
  if (i == s.size()) return Match::Incomplete;
  end = i;
  return Match::Ok;
}

bool decode_json_string(std::string_view s, size_t p, size_t end, std::string& out) {
  try {
    const Json j = Json::parse(s.substr(p, end - p));
    if (!j.is_string()) return false;
    out = j.get<std::string>();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::string json_string_body_prefix(std::string_view text) {
  // Where the last character starts; cut it when its lead byte promises more bytes than follow.
  size_t cut = text.size();
  for (size_t back = 1; back <= std::min<size_t>(4, text.size()); ++back) {
    const auto b = static_cast<unsigned char>(text[text.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t want = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    if (want > back) cut = text.size() - back;
    break;
  }
  const std::string dumped = Json(std::string(text.substr(0, cut))).dump(-1, ' ', false, Json::error_handler_t::replace);
  return dumped.substr(1, dumped.size() - 2);
}

std::string random_alphanumerics(size_t n) {
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string out;
  for (size_t i = 0; i < n; ++i) out += kAlphabet[pick(rng)];
  return out;
}

}  // namespace agentkv::server::scan
