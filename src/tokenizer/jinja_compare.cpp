#include "tokenizer/jinja_compare.h"

namespace agentkv::jinja {

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_double() != 0.0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::Array: return !v.items().empty();
    case Value::Kind::Object: return v.object_data().is_namespace || !v.object_data().entries.empty();
    case Value::Kind::Callable: return true;
  }
  return false;
}

bool values_equal(const Value& a, const Value& b, int depth) {
  if (depth > Limits::kMaxValueNesting) throw EvalError("value nested too deeply to compare");
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.str() == b.str();
    case K::Array: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case K::Object: {
      const ObjectData& x = a.object_data();
      const ObjectData& y = b.object_data();
      if (x.is_namespace || y.is_namespace) return &x == &y;
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, item] : x.entries) {
        const Value* other = y.find(key);
        if (!other || !values_equal(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case K::Callable: return &a.callable_data() == &b.callable_data();
    default: return false;
  }
}

}  // namespace agentkv::jinja
