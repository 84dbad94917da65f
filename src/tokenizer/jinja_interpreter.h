// Renders a parsed chat template: scopes as Jinja has them (loop bodies and macros get their
// own, if blocks do not), Python operator semantics, and the limits in jinja_value.h.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_value.h"

namespace agentkv::jinja {

class Interpreter {
 public:
  explicit Interpreter(const SourceMap& map) : map_(map) {}
  ~Interpreter();

  // Renders `body` with `context` as the template's global variables (plus the built-in
  // globals). Throws agentkv::Error with the line and column of the failing expression.
  std::string render(const Body& body, const std::vector<std::pair<std::string, Value>>& context);

  // Services for built-in filters, tests and functions.
  Budget& budget() { return budget_; }
  // Charges evaluation steps in proportion to the size of a string, list or dict an operation
  // walks, so that a loop cannot repeat linear work on a huge value without bound.
  void charge_scan(const Value& value);
  Value call(const Value& callee, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& input, CallArgs& args);
  // Jinja's sandboxed getattr / getitem (methods of str, dict and list included).
  Value get_attribute(const Value& object, const std::string& name);
  Value get_item(const Value& object, const Value& key);
  // A string value built by an operation, charged against the budget.
  Value make_string(std::string s);
  // A list built by an operation, charged against the budget.
  Value make_list(std::vector<Value> items, bool is_tuple = false);
  Value make_namespace();

 private:
  // Variables of one scope. Most hold a few names and a flat list is fastest; the root scope
  // holds the caller's extra context, which may be large, so it gets a hash index past 8 names.
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    std::unordered_map<std::string, size_t> index;
    Value* find(const std::string& name);
    void set(const std::string& name, Value value);
  };
  using Scopes = std::vector<std::shared_ptr<Frame>>;
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& stmt);
  void exec_for(const Stmt& stmt);
  void exec_set(const Stmt& stmt);
  void define_macro(const Stmt& stmt);
  Value macro_value(const Stmt& stmt);
  void exec_call_block(const Stmt& stmt);
  Value call_macro(const Stmt& macro, const std::vector<std::weak_ptr<Frame>>& captured, CallArgs& args);
  std::string render_to_string(const Body& body);
  void emit(const std::string& s);

  Value eval(const Expr& expr);
  Value eval_inner(const Expr& expr);
  Value eval_binary(const std::string& op, const Value& left, const Value& right);
  bool eval_compare(const std::string& op, const Value& left, const Value& right);
  Value eval_filter(const Expr& expr, const Value* input);
  Value eval_slice(const Value& object, const Expr& expr);
  void collect_args(const Expr& expr, size_t first_positional, CallArgs& args);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void bind_targets(const std::vector<std::string>& targets, const Value& value);
  std::vector<Value> iterate(const Value& value);

  std::string position(size_t offset) const;

  const SourceMap& map_;
  Budget budget_;
  Scopes scopes_;
  std::string* out_ = nullptr;
  int depth_ = 0;
  std::vector<Value> namespaces_;  // cleared after rendering to break reference cycles
};

}  // namespace agentkv::jinja
