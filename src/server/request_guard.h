// The server's checks of a request before any handler sees it (docs/security.md): JSON nesting,
// Content-Length, Content-Type, Host (DNS rebinding), Origin (CORS) and the API key. Pure
// functions of strings, so that they are unit-tested and fuzzed without a socket.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::server {

// The most nested arrays/objects a request body may hold. nlohmann's parser is iterative, but
// copying, dumping and converting a value recurse once per level: a bound here keeps every later
// step within the thread's stack. Chat templates accept 256 levels inside one value.
constexpr size_t kMaxJsonDepth = 256;

// Largest nesting depth of [ and { in a JSON text (outside strings), without recursion; stops
// counting once it exceeds `stop_after` (and returns that depth). Malformed text is scanned as is:
// the parser refuses it afterwards.
size_t json_nesting_depth(std::string_view text, size_t stop_after = kMaxJsonDepth);

// Content-Length: only decimal digits (RFC 9110); -5, "1e3", "", " 7x" are not lengths.
std::optional<uint64_t> parse_content_length(std::string_view value);

// "application/json" or "application/<x>+json", any parameters (charset) and letter case.
bool is_json_content_type(std::string_view value);

// Constant-time comparison (the time depends on the length of `expected` only).
bool constant_time_equal(std::string_view given, std::string_view expected);

// The host part of a Host header ("[::1]:8080" -> "::1", "Example.com:80" -> "example.com");
// nullopt when it is not a well-formed host[:port].
std::optional<std::string> host_of(std::string_view host_header);

struct OriginPolicy {
  std::string bind_host;                    // --host
  std::vector<std::string> allowed_hosts;   // --allowed-host (lower case; "*": any Host)
  std::vector<std::string> cors_origins;    // --cors ("*": any origin)
};

// Host header check against DNS rebinding: localhost, 127.0.0.1, ::1, the bind address, any IP
// literal when bound to a wildcard address (0.0.0.0, ::), and --allowed-host names. A request
// without a Host header (HTTP/1.0 tools; browsers always send one) passes.
bool host_allowed(const OriginPolicy& p, std::string_view host_header, bool has_host);

// An Origin header: allowed when it is this server's own origin (http://<Host>) or listed by --cors.
bool origin_allowed(const OriginPolicy& p, std::string_view origin, std::string_view host_header);

}  // namespace agentkv::server
