// Python's truth test and == over chat-template values: what {% if %}, `and` / `or`, `in`, the
// comparison operators and tests such as `equalto` decide with.
#pragma once
#include "tokenizer/jinja_value.h"

namespace agentkv::jinja {

// Python truthiness (undefined and none are false; a namespace is always true).
bool truthy(const Value& value);
// Python ==, as used by ==, in, and the sameas-free tests (numbers compare across int/float/bool).
bool values_equal(const Value& a, const Value& b, int depth = 0);

}  // namespace agentkv::jinja
