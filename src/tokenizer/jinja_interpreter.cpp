#include "tokenizer/jinja_interpreter.h"

#include <climits>
#include <cmath>

#include "agentkv/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_compare.h"
#include "tokenizer/jinja_format.h"
#include "tokenizer/jinja_text.h"

namespace agentkv::jinja {

namespace {

// An iteration allocates a scope and the loop object; weigh it like several expressions.
constexpr uint64_t kLoopIterationSteps = 16;

class DepthGuard {
 public:
  explicit DepthGuard(int& depth) : depth_(depth) {
    if (++depth_ > Limits::kMaxEvalDepth) {
      --depth_;
      throw EvalError("template nests too deeply (recursion limit)");
    }
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

[[noreturn]] void fail_undefined(const Value& v, const std::string& action) {
  if (!v.str().empty()) throw EvalError(v.str());
  throw EvalError("undefined value " + action);
}

std::string describe_type(const Value& v) { return "'" + type_name(v) + "'"; }

int64_t checked(bool overflow, int64_t value) {
  if (overflow) throw EvalError("integer overflow (this interpreter uses 64-bit integers)");
  return value;
}

Value int_power(int64_t base, int64_t exponent) {
  int64_t result = 1;
  while (exponent > 0) {
    if ((exponent & 1) && __builtin_mul_overflow(result, base, &result)) checked(true, 0);
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) checked(true, 0);
  }
  return Value(result);
}

// Python's slice.indices(length).
struct SliceRange {
  int64_t start, stop, step;
};

SliceRange slice_indices(const Value& start_v, const Value& stop_v, const Value& step_v, int64_t length) {
  const auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      throw EvalError(std::string("slice ") + what + " must be an integer or none, not " + describe_type(v));
    return v.as_int();
  };
  const int64_t step = as_index(step_v, "step").value_or(1);
  if (step == 0) throw EvalError("slice step cannot be zero");
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? length - 1 : length;
  const auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v;
    if (i < 0) {
      i += length;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  return {clamp(as_index(start_v, "start"), step < 0 ? upper : lower),
          clamp(as_index(stop_v, "stop"), step < 0 ? lower : upper), step};
}

}  // namespace

Interpreter::~Interpreter() = default;

Value* Interpreter::Frame::find(const std::string& name) {
  if (!index.empty()) {
    const auto it = index.find(name);
    return it == index.end() ? nullptr : &vars[it->second].second;
  }
  for (auto& [key, value] : vars)
    if (key == name) return &value;
  return nullptr;
}

void Interpreter::Frame::set(const std::string& name, Value value) {
  if (Value* existing = find(name)) {
    *existing = std::move(value);
    return;
  }
  vars.emplace_back(name, std::move(value));
  constexpr size_t kLinearScanLimit = 8;
  if (!index.empty()) {
    index.emplace(name, vars.size() - 1);
  } else if (vars.size() > kLinearScanLimit) {
    for (size_t i = 0; i < vars.size(); ++i) index.emplace(vars[i].first, i);
  }
}

std::string Interpreter::position(size_t offset) const {
  const auto [line, column] = map_.line_column(offset);
  return "chat template error at line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
}

std::string Interpreter::render(const Body& body, const std::vector<std::pair<std::string, Value>>& context) {
  auto root = std::make_shared<Frame>();
  for (auto& [name, value] : builtin_globals()) root->set(name, std::move(value));
  for (const auto& [name, value] : context) root->set(name, value);
  scopes_ = {root};
  std::string out;
  out_ = &out;
  // Namespaces are the only mutable values, so clearing them breaks any reference cycle a
  // template built; it runs on errors too.
  struct Cleanup {
    Interpreter& self;
    ~Cleanup() {
      for (Value& ns : self.namespaces_) ns.object_data().clear();
      self.namespaces_.clear();
      self.scopes_.clear();
      self.out_ = nullptr;
    }
  } cleanup{*this};
  exec_body(body);
  return out;
}

void Interpreter::charge_scan(const Value& value) {
  size_t units = 0;
  // Weights measured on the operations they guard: decoding UTF-8 costs about one step per
  // 32 bytes, comparing or copying a list item about one step.
  if (value.is_string()) units = value.str().size() / 32;
  else if (value.is_array()) units = value.items().size();
  else if (value.is_object()) units = value.object_data().entries.size();
  if (units > 0) budget_.step(units);
}

// ---- statements -----------------------------------------------------------------------------

void Interpreter::emit(const std::string& s) {
  budget_.charge_bytes(s.size());
  if (out_->size() + s.size() > Limits::kMaxStringBytes)
    throw EvalError("rendered output exceeds the size limit");
  out_->append(s);
}

std::string Interpreter::render_to_string(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = exec(*stmt);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt) {
  try {
    DepthGuard guard(depth_);
    budget_.step();
    switch (stmt.kind) {
      case StmtKind::Text: emit(stmt.text); break;
      case StmtKind::Output: emit(to_output(eval(*stmt.expr), budget_.max_string_bytes())); break;
      case StmtKind::If:
        for (const auto& [condition, branch] : stmt.branches)
          if (truthy(eval(*condition))) return exec_body(branch);
        return exec_body(stmt.else_body);
      case StmtKind::For: exec_for(stmt); break;
      case StmtKind::Set: exec_set(stmt); break;
      case StmtKind::SetBlock: {
        Value value = make_string(render_to_string(stmt.body));
        if (stmt.expr) value = eval_filter(*stmt.expr, &value);
        assign(stmt.targets[0], std::move(value));
        break;
      }
      case StmtKind::Macro: define_macro(stmt); break;
      case StmtKind::CallBlock: exec_call_block(stmt); break;
      case StmtKind::FilterBlock: {
        const Value input = make_string(render_to_string(stmt.body));
        emit(to_output(eval_filter(*stmt.expr, &input), budget_.max_string_bytes()));
        break;
      }
      case StmtKind::With: {
        std::vector<std::pair<std::string, Value>> values;
        for (const auto& [name, expr] : stmt.params) values.emplace_back(name, eval(*expr));
        scopes_.push_back(std::make_shared<Frame>());
        for (auto& [name, value] : values) assign(name, std::move(value));
        const Flow flow = exec_body(stmt.body);
        scopes_.pop_back();
        return flow;
      }
      case StmtKind::Scope: return exec_body(stmt.body);
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
  } catch (const EvalError& e) {
    throw Error(position(stmt.offset) + e.what());
  }
  return Flow::Normal;
}

std::vector<Value> Interpreter::iterate(const Value& value) {
  charge_scan(value);
  switch (value.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::Array: return value.items();
    case Value::Kind::String: {
      std::vector<Value> chars;
      const std::string& s = value.str();
      budget_.charge_items(s.size());
      size_t pos = 0;
      while (pos < s.size()) {
        const size_t start = pos;
        text::next_code_point(s, pos);
        chars.emplace_back(s.substr(start, pos - start));
      }
      return chars;
    }
    case Value::Kind::Object:
      if (value.is_dict()) {
        std::vector<Value> keys;
        for (const auto& [key, item] : value.object_data().entries) keys.emplace_back(key);
        return keys;
      }
      break;
    default: break;
  }
  throw EvalError(describe_type(value) + " object is not iterable");
}

void Interpreter::bind_targets(const std::vector<std::string>& targets, const Value& value) {
  if (targets.size() == 1) {
    assign(targets[0], value);
    return;
  }
  std::vector<Value> parts;
  if (value.is_array() || value.is_string() || value.is_dict()) parts = iterate(value);
  else throw EvalError("cannot unpack non-iterable " + describe_type(value) + " object");
  if (parts.size() != targets.size())
    throw EvalError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                    std::to_string(targets.size()) + " names");
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], parts[i]);
}

void Interpreter::exec_for(const Stmt& stmt) {
  std::vector<Value> items = iterate(eval(*stmt.expr));
  if (stmt.condition) {
    // "for x in y if cond": the filter sees the loop variables but not `loop`.
    std::vector<Value> kept;
    for (Value& item : items) {
      scopes_.push_back(std::make_shared<Frame>());
      bind_targets(stmt.targets, item);
      const bool keep = truthy(eval(*stmt.condition));
      scopes_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const size_t n = items.size();
  if (n == 0) {
    scopes_.push_back(std::make_shared<Frame>());
    exec_body(stmt.else_body);
    scopes_.pop_back();
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    budget_.step(kLoopIterationSteps);
    scopes_.push_back(std::make_shared<Frame>());
    bind_targets(stmt.targets, items[i]);
    if (!stmt.uses_loop) {
      const Flow flow = exec_body(stmt.body);
      scopes_.pop_back();
      if (flow == Flow::Break) break;
      continue;
    }
    const auto index = static_cast<int64_t>(i);
    const auto length = static_cast<int64_t>(n);
    std::vector<std::pair<std::string, Value>> loop = {
        {"index", Value(index + 1)},        {"index0", Value(index)},
        {"revindex", Value(length - index)}, {"revindex0", Value(length - index - 1)},
        {"first", Value(i == 0)},            {"last", Value(i + 1 == n)},
        {"length", Value(length)},           {"depth", Value(int64_t{1})},
        {"depth0", Value(int64_t{0})},
    };
    if (i > 0) loop.emplace_back("previtem", items[i - 1]);
    if (i + 1 < n) loop.emplace_back("nextitem", items[i + 1]);
    loop.emplace_back("cycle", Value::callable("loop.cycle", [index](Interpreter&, CallArgs& args) {
                        if (args.positional.empty()) throw EvalError("loop.cycle() needs at least one value");
                        return args.positional[static_cast<size_t>(index) % args.positional.size()];
                      }));
    assign("loop", Value::object_with_distinct_keys(std::move(loop)));
    const Flow flow = exec_body(stmt.body);
    scopes_.pop_back();
    if (flow == Flow::Break) break;
  }
}

void Interpreter::exec_set(const Stmt& stmt) {
  Value value = eval(*stmt.expr);
  if (!stmt.attribute.empty()) {
    const Value target = lookup(stmt.targets[0]);
    if (!target.is_object() || !target.object_data().is_namespace)
      throw EvalError("cannot assign attribute on non-namespace object '" + stmt.targets[0] + "'");
    target.object_data().set(stmt.attribute, std::move(value));
    return;
  }
  bind_targets(stmt.targets, value);
}

Value Interpreter::macro_value(const Stmt& stmt) {
  // Weak references: a macro stored in its own frame must not keep that frame alive.
  std::vector<std::weak_ptr<Frame>> captured(scopes_.begin(), scopes_.end());
  const Stmt* macro = &stmt;
  return Value::callable(stmt.name, [macro, captured](Interpreter& self, CallArgs& args) {
    return self.call_macro(*macro, captured, args);
  });
}

void Interpreter::define_macro(const Stmt& stmt) { assign(stmt.name, macro_value(stmt)); }

void Interpreter::exec_call_block(const Stmt& stmt) {
  // {% call m(args) %}body{% endcall %}: m receives the body as `caller`.
  const Expr& call_expr = *stmt.expr;
  const Value callee = eval(*call_expr.children[0]);
  CallArgs args;
  collect_args(call_expr, 1, args);
  args.named.emplace_back("caller", macro_value(stmt));
  emit(to_output(call(callee, args), budget_.max_string_bytes()));
}

Value Interpreter::call_macro(const Stmt& macro, const std::vector<std::weak_ptr<Frame>>& captured,
                              CallArgs& args) {
  DepthGuard guard(depth_);
  Scopes saved = std::move(scopes_);
  struct Restore {
    Interpreter& self;
    Scopes& saved;
    ~Restore() { self.scopes_ = std::move(saved); }
  } restore{*this, saved};
  scopes_.clear();
  for (const auto& weak : captured)
    if (auto frame = weak.lock()) scopes_.push_back(std::move(frame));
  scopes_.push_back(std::make_shared<Frame>());

  const size_t n_params = macro.params.size();
  std::vector<bool> given(n_params, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n_params) {
      assign(macro.params[i].first, args.positional[i]);
      given[i] = true;
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  std::vector<std::pair<std::string, Value>> kwargs;
  for (auto& [name, value] : args.named) {
    size_t i = 0;
    while (i < n_params && macro.params[i].first != name) ++i;
    if (i == n_params) {
      if (name == "caller") assign(name, value);
      else kwargs.emplace_back(name, value);
      continue;
    }
    if (given[i]) throw EvalError("macro '" + macro.name + "' got multiple values for argument '" + name + "'");
    assign(name, value);
    given[i] = true;
  }
  for (size_t i = 0; i < n_params; ++i) {
    if (given[i]) continue;
    const auto& [name, default_expr] = macro.params[i];
    assign(name, default_expr ? eval(*default_expr)
                              : Value::undefined("parameter '" + name + "' was not provided"));
  }
  assign("varargs", make_list(std::move(varargs), /*is_tuple=*/true));
  assign("kwargs", Value::object(std::move(kwargs)));
  std::string rendered = render_to_string(macro.body);
  return Value(std::move(rendered));  // already charged when emitted
}

// ---- expressions ----------------------------------------------------------------------------

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
    if (const Value* found = (*it)->find(name)) return *found;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value value) { scopes_.back()->set(name, std::move(value)); }

Value Interpreter::make_string(std::string s) {
  budget_.charge_bytes(s.size());
  return Value(std::move(s));
}

Value Interpreter::make_list(std::vector<Value> items, bool is_tuple) {
  budget_.charge_items(items.size());
  return Value::array(std::move(items), is_tuple);
}

Value Interpreter::make_namespace() {
  Value ns = Value::object({});
  ns.object_data().is_namespace = true;
  namespaces_.push_back(ns);
  return ns;
}

Value Interpreter::eval(const Expr& expr) {
  try {
    DepthGuard guard(depth_);
    budget_.step();
    return eval_inner(expr);
  } catch (const EvalError& e) {
    throw Error(position(expr.offset) + e.what());
  }
}

void Interpreter::collect_args(const Expr& expr, size_t first_positional, CallArgs& args) {
  for (size_t i = first_positional; i < expr.children.size(); ++i) args.positional.push_back(eval(*expr.children[i]));
  for (const auto& [name, value] : expr.kwargs) args.named.emplace_back(name, eval(*value));
}

Value Interpreter::eval_inner(const Expr& expr) {
  const auto& c = expr.children;
  switch (expr.kind) {
    case ExprKind::Literal: return expr.literal;
    case ExprKind::Name: return lookup(expr.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(c.size());
      for (const auto& item : c) items.push_back(eval(*item));
      return make_list(std::move(items), expr.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      std::vector<std::pair<std::string, Value>> entries;
      for (size_t i = 0; i + 1 < c.size(); i += 2) {
        Value key = eval(*c[i]);
        if (!key.is_string()) throw EvalError("dict keys must be strings, got " + describe_type(key));
        entries.emplace_back(key.str(), eval(*c[i + 1]));
      }
      budget_.charge_items(entries.size());
      return Value::object(std::move(entries));
    }
    case ExprKind::GetAttr: return get_attribute(eval(*c[0]), expr.name);
    case ExprKind::GetItem: {
      const Value object = eval(*c[0]);
      return get_item(object, eval(*c[1]));
    }
    case ExprKind::Slice: return eval_slice(eval(*c[0]), expr);
    case ExprKind::Call: {
      const Value callee = eval(*c[0]);
      CallArgs args;
      collect_args(expr, 1, args);
      return call(callee, args);
    }
    case ExprKind::Filter: return eval_filter(expr, nullptr);
    case ExprKind::Test: {
      const Value input = eval(*c[0]);
      CallArgs args;
      collect_args(expr, 1, args);
      const bool result = apply_test(expr.name, input, args);
      return Value(expr.negated ? !result : result);
    }
    case ExprKind::Not: return Value(!truthy(eval(*c[0])));
    case ExprKind::Negate: {
      const Value v = eval(*c[0]);
      if (v.is_float()) return Value(-v.as_double());
      if (v.is_int() || v.is_bool()) {
        if (v.as_int() == INT64_MIN) throw EvalError("integer overflow");
        return Value(-v.as_int());
      }
      if (v.is_undefined()) fail_undefined(v, "cannot be negated");
      throw EvalError("bad operand type for unary -: " + describe_type(v));
    }
    case ExprKind::Plus: {
      const Value v = eval(*c[0]);
      if (v.is_float() || v.is_int()) return v;
      if (v.is_bool()) return Value(v.as_int());
      if (v.is_undefined()) fail_undefined(v, "cannot be used with unary +");
      throw EvalError("bad operand type for unary +: " + describe_type(v));
    }
    case ExprKind::Binary: {
      const Value left = eval(*c[0]);
      const Value right = eval(*c[1]);
      if (expr.name == "~") {
        std::string s = to_output(left, budget_.max_string_bytes());
        s += to_output(right, budget_.max_string_bytes());
        return make_string(std::move(s));
      }
      return eval_binary(expr.name, left, right);
    }
    case ExprKind::And: {
      Value left = eval(*c[0]);
      if (!truthy(left)) return left;
      return eval(*c[1]);
    }
    case ExprKind::Or: {
      Value left = eval(*c[0]);
      if (truthy(left)) return left;
      return eval(*c[1]);
    }
    case ExprKind::Compare: {
      Value left = eval(*c[0]);
      for (size_t i = 0; i < expr.ops.size(); ++i) {
        Value right = eval(*c[i + 1]);
        if (!eval_compare(expr.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::Conditional:
      if (truthy(eval(*c[1]))) return eval(*c[0]);
      return c[2] ? eval(*c[2]) : Value::undefined("the conditional expression has no else branch");
  }
  return Value::undefined();
}

Value Interpreter::eval_filter(const Expr& expr, const Value* input) {
  try {
    Value operand;
    const Expr* inner = expr.children[0].get();
    if (inner == nullptr) operand = *input;
    else if (input != nullptr && inner->kind == ExprKind::Filter) operand = eval_filter(*inner, input);
    else operand = eval(*inner);
    CallArgs args;
    collect_args(expr, 1, args);
    return apply_filter(expr.name, operand, args);
  } catch (const EvalError& e) {
    throw Error(position(expr.offset) + e.what());
  }
}

Value Interpreter::eval_slice(const Value& object, const Expr& expr) {
  const auto part = [&](size_t i) { return expr.children[i] ? eval(*expr.children[i]) : Value::none(); };
  const Value start = part(1), stop = part(2), step = part(3);
  charge_scan(object);
  if (object.is_undefined()) fail_undefined(object, "cannot be sliced");
  const auto take = [&](int64_t length, const auto& push) {
    const SliceRange r = slice_indices(start, stop, step, length);
    for (int64_t i = r.start; r.step > 0 ? i < r.stop : i > r.stop; i += r.step) push(static_cast<size_t>(i));
  };
  if (object.is_array()) {
    std::vector<Value> out;
    const auto& items = object.items();
    take(static_cast<int64_t>(items.size()), [&](size_t i) { out.push_back(items[i]); });
    return make_list(std::move(out), object.is_tuple());
  }
  if (object.is_string()) {
    const std::string& s = object.str();
    std::string out;
    if (text::is_ascii(s)) {
      take(static_cast<int64_t>(s.size()), [&](size_t i) { out.push_back(s[i]); });
    } else {
      const std::vector<size_t> offsets = text::code_point_offsets(s);
      take(static_cast<int64_t>(offsets.size() - 1),
           [&](size_t i) { out.append(s, offsets[i], offsets[i + 1] - offsets[i]); });
    }
    return make_string(std::move(out));
  }
  // Jinja compiles slices to plain Python subscripts, so unlike x[i] they raise.
  throw EvalError(describe_type(object) + " object is not subscriptable");
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.kind() == Value::Kind::Callable) return callee.callable_data().fn(*this, args);
  if (callee.is_undefined()) fail_undefined(callee, "is not callable");
  throw EvalError(describe_type(callee) + " object is not callable");
}

Value Interpreter::apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  return run_filter(*this, name, input, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& input, CallArgs& args) {
  return run_test(*this, name, input, args);
}

Value Interpreter::get_attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::Undefined: fail_undefined(object, "has no attribute '" + name + "'");
    case Value::Kind::Object: {
      if (object.is_dict()) {
        Value method = find_method(*this, object, name);
        if (!method.is_undefined()) return method;
        if (is_unsafe_method(object, name))
          return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe");
      }
      if (const Value* found = object.object_data().find(name)) return *found;
      return Value::undefined("'" + type_name(object) + " object' has no attribute '" + name + "'");
    }
    case Value::Kind::String:
    case Value::Kind::Array: {
      Value method = find_method(*this, object, name);
      if (!method.is_undefined()) return method;
      return Value::undefined("'" + type_name(object) + " object' has no attribute '" + name + "'");
    }
    default: return Value::undefined("'" + type_name(object) + " object' has no attribute '" + name + "'");
  }
}

Value Interpreter::get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object, "cannot be subscripted");
  const bool int_key = key.is_int() || key.is_bool();
  if (object.is_array() && int_key) {
    const auto& items = object.items();
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value::undefined("list index out of range");
    return items[static_cast<size_t>(i)];
  }
  if (object.is_string() && int_key) {
    charge_scan(object);
    const auto piece = text::code_point_at(object.str(), key.as_int());
    if (!piece) return Value::undefined("string index out of range");
    return make_string(std::string(*piece));
  }
  if (object.is_object() && key.is_string()) {
    if (const Value* found = object.object_data().find(key.str())) return *found;
  }
  // Jinja falls back to attribute lookup for string keys.
  if (key.is_string()) return get_attribute(object, key.str());
  return Value::undefined("no item " + repr(key, 256) + " in " + describe_type(object) + " object");
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a, "cannot be used with '" + op + "'");
  if (b.is_undefined()) fail_undefined(b, "cannot be used with '" + op + "'");
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = numbers && !a.is_float() && !b.is_float();
  const auto unsupported = [&]() -> Value {
    throw EvalError("unsupported operand types for " + op + ": " + describe_type(a) + " and " + describe_type(b));
  };
  const auto repeat = [&](const Value& seq, int64_t times) -> Value {
    if (times <= 0) return seq.is_string() ? Value(std::string()) : make_list({});
    if (seq.is_string()) {
      const std::string& s = seq.str();
      if (!s.empty() && static_cast<uint64_t>(times) > budget_.max_string_bytes() / s.size())
        throw EvalError("string repetition exceeds the size limit");
      std::string out;
      out.reserve(s.size() * static_cast<size_t>(times));
      for (int64_t i = 0; i < times; ++i) out += s;
      return make_string(std::move(out));
    }
    const auto& items = seq.items();
    if (!items.empty() && static_cast<uint64_t>(times) > Limits::kMaxTotalItems / items.size())
      throw EvalError("list repetition exceeds the size limit");
    std::vector<Value> out;
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
    return make_list(std::move(out));
  };
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return Value(checked(overflow, r));
    }
    if (numbers) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > budget_.max_string_bytes())
        throw EvalError("string concatenation exceeds the size limit");
      return make_string(a.str() + b.str());
    }
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return make_list(std::move(out), a.is_tuple());
    }
    return unsupported();
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return Value(checked(overflow, r));
    }
    if (numbers) return Value(a.as_double() - b.as_double());
    return unsupported();
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return Value(checked(overflow, r));
    }
    if (numbers) return Value(a.as_double() * b.as_double());
    const bool a_count = a.is_int() || a.is_bool();
    const bool b_count = b.is_int() || b.is_bool();
    if ((a.is_string() || a.is_array()) && b_count) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_array()) && a_count) return repeat(b, a.as_int());
    return unsupported();
  }
  if (!numbers) {
    if (op == "%" && a.is_string()) throw EvalError("printf-style string formatting with % is not supported");
    return unsupported();
  }
  if (op == "/") {
    if (b.as_double() == 0) throw EvalError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) throw EvalError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) {
        if (op == "%") return Value(int64_t{0});
        throw EvalError("integer overflow");
      }
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward negative infinity
        --q;
        r += y;
      }
      return Value(op == "//" ? q : r);
    }
    const double x = a.as_double(), y = b.as_double();
    if (y == 0) throw EvalError("float division or modulo by zero");
    if (op == "//") return Value(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) return int_power(a.as_int(), b.as_int());
    if (a.as_double() == 0 && b.as_double() < 0) throw EvalError("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  return unsupported();
}

namespace {

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string())
        throw EvalError("'in <string>' requires string as left operand, not " + describe_type(item));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::Array:
      for (const Value& element : container.items())
        if (values_equal(element, item)) return true;
      return false;
    case Value::Kind::Object:
      if (container.is_dict()) return item.is_string() && container.object_data().find(item.str()) != nullptr;
      break;
    default: break;
  }
  throw EvalError("argument of type " + describe_type(container) + " is not iterable");
}

// Python ordering: returns <0, 0, >0; throws for types that do not order.
int order(const Value& a, const Value& b, const std::string& op, int depth = 0) {
  if (depth > Limits::kMaxValueNesting) throw EvalError("value nested too deeply to compare");
  if (a.is_undefined()) fail_undefined(a, "cannot be compared");
  if (b.is_undefined()) fail_undefined(b, "cannot be compared");
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_array() && b.is_array()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i], depth + 1)) continue;
      return order(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw EvalError("'" + op + "' not supported between instances of " + describe_type(a) + " and " +
                  describe_type(b));
}

}  // namespace

bool Interpreter::eval_compare(const std::string& op, const Value& a, const Value& b) {
  charge_scan(a);
  charge_scan(b);
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  const int c = order(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

}  // namespace agentkv::jinja
