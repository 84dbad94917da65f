// Standard base64 (RFC 4648, with padding) for state blobs carried in JSON bodies.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::server {

std::string base64_encode(std::span<const uint8_t> bytes);
// Throws agentkv::Error naming `what` for characters outside the alphabet or a bad length.
// Whitespace is ignored.
std::vector<uint8_t> base64_decode(std::string_view text, const std::string& what);

}  // namespace agentkv::server
