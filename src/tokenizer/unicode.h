// Unicode helpers for the byte-level BPE tokenizer: code point classes, UTF-8 decoding that treats
// invalid input exactly like llama.cpp, and GPT-2's byte <-> code point mapping.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::unicode {

// General categories collapsed to the classes pre-tokenizer regexes ask about (\p{L}, \p{N}, ...).
enum class Category : uint8_t {
  Undefined = 0,  // Cn (unassigned)
  Number = 1,     // Nd Nl No
  Letter = 2,     // Lu Ll Lt Lm Lo
  Separator = 3,  // Zs Zl Zp
  Mark = 4,       // Mn Mc Me
  Punctuation = 5,
  Symbol = 6,
  Control = 7,  // Cc Cf Co Cs
};
inline constexpr uint8_t kWhitespaceBit = 0x80;
inline constexpr uint8_t kCategoryMask = 0x0f;
inline constexpr uint32_t kReplacementChar = 0xFFFD;
inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Flags of a code point (Category | kWhitespaceBit); code points above U+10FFFF are Undefined.
uint8_t codepoint_flags(uint32_t cp);
inline Category category(uint32_t cp) { return Category(codepoint_flags(cp) & kCategoryMask); }
inline bool is_whitespace(uint32_t cp) { return codepoint_flags(cp) & kWhitespaceBit; }

// Decodes UTF-8 the way llama.cpp's unicode_cpts_from_utf8 does: a byte that does not start a
// complete sequence becomes U+FFFD and decoding resumes at the next byte. Overlong forms and
// surrogates are decoded as written; 4-byte forms may exceed U+10FFFF.
void decode_utf8(std::string_view text, std::vector<uint32_t>& out);
// Appends the UTF-8 form of `cp`; values above U+10FFFF are written as U+FFFD.
void append_utf8(uint32_t cp, std::string& out);
// True when `text` is well-formed UTF-8 that decode_utf8 + append_utf8 reproduce byte for byte.
bool round_trips(std::string_view text);

// GPT-2 byte-level encoding: every byte maps to one printable code point ('Ġ' for the space).
uint32_t byte_to_codepoint(uint8_t byte);
const std::string& byte_to_utf8(uint8_t byte);  // UTF-8 of byte_to_codepoint(byte)
int codepoint_to_byte(uint32_t cp);            // the byte, or -1 if cp is not in the mapping

}  // namespace agentkv::unicode
