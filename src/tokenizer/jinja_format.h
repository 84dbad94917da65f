// What Python prints for a chat-template value: str() (what {{ value }} outputs), repr(), the type
// names messages quote, and float repr. Apart from Value (jinja_value.h) because printing is
// Python's rules over its accessors, not part of what a value holds.
#pragma once
#include <cstddef>
#include <string>

#include "tokenizer/jinja_value.h"

namespace agentkv::jinja {

// Python str(): what {{ value }} prints. Throws EvalError once the text passes max_bytes.
std::string to_output(const Value& value, size_t max_bytes);
// Python repr().
std::string repr(const Value& value, size_t max_bytes);
// Python type name for messages ("str", "dict", "NoneType", ...).
std::string type_name(const Value& value);
// Python float repr (shortest round-trip digits, "1e-05", "3.0", "inf").
std::string python_float_repr(double d);
// Throws EvalError when text being printed has passed max_bytes (the render's string limit).
void check_printed_size(const std::string& out, size_t max_bytes);

}  // namespace agentkv::jinja
