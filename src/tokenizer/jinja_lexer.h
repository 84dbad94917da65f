// Splits a Jinja template into text and tag tokens, applying the whitespace rules Hugging Face
// renders chat templates with (trim_blocks and lstrip_blocks on, "-"/"+" modifiers, newlines
// normalised to "\n", one trailing newline dropped).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentkv::jinja {

enum class TokenKind {
  Text,        // literal template text (after whitespace control)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // decoded value in text
  Integer,
  Float,
  Operator,    // text holds the operator: "+", "//", "(", ...
  End,         // end of template
};

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  size_t offset = 0;  // into the normalised source
};

// Maps offsets of the normalised source to 1-based line and column (columns count bytes).
class SourceMap {
 public:
  explicit SourceMap(std::string_view source);
  std::pair<int, int> line_column(size_t offset) const;

 private:
  std::vector<size_t> line_starts_;
};

struct LexedTemplate {
  std::string source;  // normalised source the offsets refer to
  std::vector<Token> tokens;
};

// Throws agentkv::Error ("chat template syntax error at line L, column C: ...") on unterminated
// tags, strings or comments and on unbalanced brackets.
LexedTemplate tokenize(std::string_view source);

}  // namespace agentkv::jinja
