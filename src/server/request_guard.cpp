#include "server/request_guard.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace agentkv::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

bool is_wildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::" || host == "*"; }

bool listed(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), "*") != list.end() ||
         std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

size_t json_nesting_depth(std::string_view text, size_t stop_after) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stop_after) return deepest;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::optional<uint64_t> parse_content_length(std::string_view value) {
  value = trim(value);
  if (value.empty() || value.size() > 19) return std::nullopt;
  uint64_t n = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

bool is_json_content_type(std::string_view value) {
  const size_t semi = value.find(';');
  const std::string type = lower(trim(value.substr(0, semi)));
  if (type == "application/json") return true;
  const std::string prefix = "application/", suffix = "+json";
  return type.size() > prefix.size() + suffix.size() && type.compare(0, prefix.size(), prefix) == 0 &&
         type.compare(type.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         type.find_first_of(" \t/", prefix.size()) == std::string::npos;
}

bool constant_time_equal(std::string_view given, std::string_view expected) {
  volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = static_cast<unsigned char>(diff | (g ^ static_cast<unsigned char>(expected[i])));
  }
  return diff == 0;
}

std::optional<std::string> host_of(std::string_view h) {
  h = trim(h);
  if (h.empty()) return std::nullopt;
  std::string_view host, port;
  if (h.front() == '[') {
    const size_t close = h.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = h.substr(1, close - 1);
    std::string_view rest = h.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
    }
    unsigned char buf[16];
    if (inet_pton(AF_INET6, std::string(host).c_str(), buf) != 1) return std::nullopt;
  } else {
    const size_t colon = h.find(':');
    host = h.substr(0, colon);
    if (colon != std::string_view::npos) port = h.substr(colon + 1);
    if (host.empty()) return std::nullopt;
    for (char c : host)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) return std::nullopt;
  }
  if (port.size() > 5) return std::nullopt;
  for (char c : port)
    if (c < '0' || c > '9') return std::nullopt;
  return lower(host);
}

bool host_allowed(const OriginPolicy& p, std::string_view host_header, bool has_host) {
  if (!has_host) return true;
  const std::optional<std::string> host = host_of(host_header);
  if (!host) return false;
  if (*host == "localhost" || *host == "127.0.0.1" || *host == "::1") return true;
  std::string bind = lower(p.bind_host);
  if (bind.size() > 2 && bind.front() == '[' && bind.back() == ']') bind = bind.substr(1, bind.size() - 2);
  if (*host == bind) return true;
  // DNS rebinding needs a name the attacker controls; an address literal cannot be rebound.
  if (is_wildcard(bind) && is_ip_literal(*host)) return true;
  return listed(p.allowed_hosts, *host);
}

bool origin_allowed(const OriginPolicy& p, std::string_view origin, std::string_view host_header) {
  const std::string o = lower(trim(origin));
  if (listed(p.cors_origins, o)) return true;
  const std::string h = lower(trim(host_header));
  return !h.empty() && (o == "http://" + h || o == "https://" + h);
}

}  // namespace agentkv::server
