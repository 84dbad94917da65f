#include "server/base64.h"

#include "agentkv/error.h"

namespace agentkv::server {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int value_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{bytes[i]} << 16;
    if (rest == 2) v |= uint32_t{bytes[i + 1]} << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::vector<uint8_t> base64_decode(std::string_view text, const std::string& what) {
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int n_bits = 0;
  size_t n_chars = 0;
  size_t n_pad = 0;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    ++n_chars;
    if (c == '=') {
      ++n_pad;
      continue;
    }
    const int v = value_of(c);
    if (v < 0 || n_pad > 0) throw Error(what + ": not valid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    n_bits += 6;
    if (n_bits >= 8) {
      n_bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> n_bits) & 0xFF));
    }
  }
  if (n_chars % 4 != 0 || n_pad > 2) throw Error(what + ": not valid base64 (length)");
  return out;
}

}  // namespace agentkv::server
