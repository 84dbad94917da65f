// Parses lexed template tokens into statements and expressions with Jinja's grammar and
// operator precedence (filters and tests bind tighter than arithmetic).
#pragma once
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace agentkv::jinja {

// Throws agentkv::Error ("chat template syntax error at line L, column C: ...") on syntax it
// does not support.
Body parse(const LexedTemplate& lexed, const SourceMap& map);

}  // namespace agentkv::jinja
