#include "tokenizer/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "agentkv/error.h"
#include "tokenizer/jinja_format.h"
#include "tokenizer/jinja_text.h"

namespace agentkv::jinja {

Value value_from_json(const nlohmann::ordered_json& json, int depth) {
  if (depth > Limits::kMaxValueNesting) throw Error("chat template input: JSON nested too deeply");
  using T = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value(json.get<bool>());
    case T::number_integer: return Value(json.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case T::number_float: return Value(json.get<double>());
    case T::string: return Value(json.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(value_from_json(item, depth + 1));
      return Value::array(std::move(items));
    }
    case T::object: {
      std::vector<std::pair<std::string, Value>> entries;
      entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, value_from_json(item, depth + 1));
      return Value::object_with_distinct_keys(std::move(entries));  // JSON object keys are unique
    }
    case T::binary: throw Error("chat template input: binary JSON values are not supported");
    case T::discarded: return Value::undefined();
  }
  return Value::undefined();
}

namespace {

void append_json(std::string& out, const Value& v, const JsonDumpOptions& options, size_t max_bytes,
                 int depth) {
  if (depth > Limits::kMaxValueNesting) throw EvalError("tojson: value nested too deeply");
  const auto newline_indent = [&](int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) {
      out += *options.indent;
      check_printed_size(out, max_bytes);
    }
  };
  using K = Value::Kind;
  switch (v.kind()) {
    case K::None: out += "null"; break;
    case K::Bool: out += v.as_bool() ? "true" : "false"; break;
    case K::Int: out += std::to_string(v.as_int()); break;
    case K::Float: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(d);
      break;
    }
    case K::String: text::append_json_string(out, v.str()); break;
    case K::Array: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += options.item_separator;
        if (options.indent) newline_indent(depth + 1);
        append_json(out, items[i], options, max_bytes, depth + 1);
        check_printed_size(out, max_bytes);
      }
      if (options.indent) newline_indent(depth);
      out += ']';
      break;
    }
    case K::Object: {
      const ObjectData& obj = v.object_data();
      if (obj.is_namespace) throw EvalError("tojson: Object of type Namespace is not JSON serializable");
      if (obj.entries.empty()) {
        out += "{}";
        break;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : obj.entries) entries.push_back(&entry);
      if (options.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* x, const auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += options.item_separator;
        if (options.indent) newline_indent(depth + 1);
        text::append_json_string(out, entries[i]->first);
        out += options.key_separator;
        append_json(out, entries[i]->second, options, max_bytes, depth + 1);
        check_printed_size(out, max_bytes);
      }
      if (options.indent) newline_indent(depth);
      out += '}';
      break;
    }
    case K::Undefined:
      throw EvalError("tojson: Object of type Undefined is not JSON serializable");
    case K::Callable:
      throw EvalError("tojson: Object of type function is not JSON serializable");
  }
  check_printed_size(out, max_bytes);
}

}  // namespace

std::string json_dump(const Value& value, const JsonDumpOptions& options, size_t max_bytes) {
  std::string out;
  append_json(out, value, options, max_bytes, 0);
  return out;
}

}  // namespace agentkv::jinja
