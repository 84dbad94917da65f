// Built-in filters, tests, global functions and str/dict/list methods of the chat-template
// interpreter (the subset Hugging Face chat templates use; docs/chat-template.md lists it).
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace agentkv::jinja {

class Interpreter;

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// Throw EvalError for bad arguments; the names are known (the parser checked them).
Value run_filter(Interpreter& interp, std::string_view name, const Value& input, CallArgs& args);
bool run_test(Interpreter& interp, std::string_view name, const Value& input, CallArgs& args);

// A bound method of a str, dict or list, or an undefined value when there is none.
Value find_method(Interpreter& interp, const Value& object, const std::string& name);
// Python attributes that exist but the sandbox refuses (list.append, dict.update, ...).
bool is_unsafe_method(const Value& object, const std::string& name);

// range, namespace, dict, raise_exception, strftime_now.
std::vector<std::pair<std::string, Value>> builtin_globals();

// Binds call arguments to named parameters the way Python does.
class ArgBinder {
 public:
  ArgBinder(std::string what, CallArgs& args, std::initializer_list<const char*> params,
            bool allow_extra_positional = false);
  // The argument for parameter i, or an undefined value when it was not passed.
  const Value& operator[](size_t i) const { return values_[i]; }
  bool has(size_t i) const { return !values_[i].is_undefined(); }
  const std::vector<Value>& extra_positional() const { return extra_; }
  int64_t int_or(size_t i, int64_t fallback) const;
  bool bool_or(size_t i, bool fallback) const;
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  std::vector<Value> values_;
  std::vector<Value> extra_;
};

}  // namespace agentkv::jinja
