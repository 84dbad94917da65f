// A JSON Schema `pattern` (an ECMA-262 regular expression, found anywhere in the string unless
// anchored with ^ / $) as GBNF over the JSON text of the string. Supported: literals, `.`, classes
// (ranges, negation, \d \w \s and their negations), groups (capturing, `(?:`, named), alternation,
// `* + ? {m} {m,} {m,n}` (lazy forms alike), escapes (\n \t \r \f \v \0 \xHH \uHHHH, escaped
// punctuation), ^ at the start and $ at the end of a top-level alternative. Refused with
// agentkv::Error (a 400 naming the construct): lookaround, backreferences, \b / \B, anchors
// elsewhere, and anything unbalanced. The grammar writes a value's special characters as JSON
// escapes (\" \\ \n \t \r); other control characters are left out (a subset of the pattern's
// strings, never a string outside it).
#pragma once
#include <string>
#include <string_view>

namespace agentkv::grammar {

// The GBNF expression of the JSON string token (quotes included, no trailing space) whose value
// the pattern finds. Uses the primitive rule `char` (json_primitive_rules) for unanchored ends.
std::string pattern_string_gbnf(std::string_view pattern);

}  // namespace agentkv::grammar
