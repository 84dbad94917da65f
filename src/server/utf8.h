// UTF-8 validity, for token pieces that may hold only part of a character.
#pragma once
#include <string_view>

namespace agentkv::server {

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace agentkv::server
