#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "agentkv/error.h"
#include "tokenizer/jinja_text.h"

namespace agentkv::jinja {

// ---- Budget -------------------------------------------------------------------------------

void Budget::charge_bytes(size_t n) {
  bytes_ += n;
  if (n > Limits::kMaxStringBytes || bytes_ > Limits::kMaxTotalBytes)
    throw EvalError("render exceeds the memory limit (strings too large)");
}

void Budget::charge_items(size_t n) {
  items_ += n;
  if (items_ > Limits::kMaxTotalItems)
    throw EvalError("render exceeds the memory limit (too many list items)");
}

void Budget::step(uint64_t n) {
  steps_ += n;
  if (steps_ > Limits::kMaxSteps)
    throw EvalError("render exceeds the evaluation step limit");
}

size_t Budget::max_string_bytes() const {
  const size_t left = bytes_ >= Limits::kMaxTotalBytes ? 0 : Limits::kMaxTotalBytes - bytes_;
  return std::min(left, Limits::kMaxStringBytes);
}

// ---- ObjectData ---------------------------------------------------------------------------

const std::pair<std::string, Value>* ObjectData::find_entry(std::string_view key) const {
  constexpr size_t kLinearScanLimit = 8;
  if (entries.size() <= kLinearScanLimit) {
    for (const auto& entry : entries)
      if (entry.first == key) return &entry;
    return nullptr;
  }
  for (; indexed_ < entries.size(); ++indexed_) index_.emplace(entries[indexed_].first, indexed_);
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries[it->second];
}

const Value* ObjectData::find(std::string_view key) const {
  const auto* entry = find_entry(key);
  return entry ? &entry->second : nullptr;
}

void ObjectData::set(std::string key, Value value) {
  const int child_nesting = value.nesting() + 1;
  if (child_nesting > Limits::kMaxValueNesting)
    throw EvalError("value nested too deeply");
  nesting = std::max(nesting, child_nesting);
  if (const auto* entry = find_entry(key)) {
    entries[static_cast<size_t>(entry - entries.data())].second = std::move(value);
    return;
  }
  entries.emplace_back(std::move(key), std::move(value));
}

void ObjectData::clear() {
  entries.clear();
  index_.clear();
  indexed_ = 0;
}

// ---- Value --------------------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.string_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value::Value(bool b) : kind_(Kind::Bool), bool_(b), int_(b ? 1 : 0) {}
Value::Value(int64_t i) : kind_(Kind::Int), int_(i) {}
Value::Value(double d) : kind_(Kind::Float), float_(d) {}
Value::Value(std::string s)
    : kind_(Kind::String), string_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::array(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::Array;
  v.array_ = std::make_shared<ArrayData>();
  int nesting = 1;
  for (const Value& item : items) nesting = std::max(nesting, item.nesting() + 1);
  if (nesting > Limits::kMaxValueNesting) throw EvalError("value nested too deeply");
  v.array_->items = std::move(items);
  v.array_->nesting = nesting;
  v.array_->is_tuple = is_tuple;
  return v;
}

Value Value::object(std::vector<std::pair<std::string, Value>> entries) {
  Value v;
  v.kind_ = Kind::Object;
  v.object_ = std::make_shared<ObjectData>();
  for (auto& [k, item] : entries) v.object_->set(std::move(k), std::move(item));
  return v;
}

Value Value::object_with_distinct_keys(std::vector<std::pair<std::string, Value>> entries) {
  Value v;
  v.kind_ = Kind::Object;
  v.object_ = std::make_shared<ObjectData>();
  int nesting = 1;
  for (const auto& entry : entries) nesting = std::max(nesting, entry.second.nesting() + 1);
  if (nesting > Limits::kMaxValueNesting) throw EvalError("value nested too deeply");
  v.object_->entries = std::move(entries);
  v.object_->nesting = nesting;
  return v;
}

Value Value::make_namespace() {
  Value v = object({});
  v.object_->is_namespace = true;
  return v;
}

Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::Callable;
  v.callable_ = std::make_shared<const CallableData>(CallableData{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json, int depth) {
  if (depth > Limits::kMaxValueNesting) throw Error("chat template input: JSON nested too deeply");
  using T = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case T::null: return none();
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
      for (const auto& item : json) items.push_back(from_json(item, depth + 1));
      return array(std::move(items));
    }
    case T::object: {
      std::vector<std::pair<std::string, Value>> entries;
      entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, from_json(item, depth + 1));
      return object_with_distinct_keys(std::move(entries));  // JSON object keys are unique
    }
    case T::binary: throw Error("chat template input: binary JSON values are not supported");
    case T::discarded: return undefined();
  }
  return undefined();
}

double Value::as_double() const {
  if (kind_ == Kind::Float) return float_;
  return static_cast<double>(int_);
}

const std::string& Value::str() const {
  static const std::string kEmpty;
  return string_ ? *string_ : kEmpty;
}

int Value::nesting() const {
  if (kind_ == Kind::Array) return array_->nesting;
  if (kind_ == Kind::Object) return object_->nesting;
  return 0;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return bool_;
    case Kind::Int: return int_ != 0;
    case Kind::Float: return float_ != 0.0;
    case Kind::String: return !string_->empty();
    case Kind::Array: return !array_->items.empty();
    case Kind::Object: return object_->is_namespace || !object_->entries.empty();
    case Kind::Callable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Array: return "list";
    case Kind::Object: return object_->is_namespace ? "Namespace" : "dict";
    case Kind::Callable: return "function";
  }
  return "object";
}

namespace {

void check_size(const std::string& out, size_t max_bytes) {
  if (out.size() > max_bytes) throw EvalError("string exceeds the size limit");
}

void append_repr(std::string& out, const Value& v, size_t max_bytes, int depth);

// Python str() for scalars and repr-of-items for containers.
void append_str(std::string& out, const Value& v, size_t max_bytes, int depth) {
  if (v.is_string()) {
    out += v.str();
    check_size(out, max_bytes);
    return;
  }
  append_repr(out, v, max_bytes, depth);
}

void append_repr(std::string& out, const Value& v, size_t max_bytes, int depth) {
  if (depth > Limits::kMaxValueNesting) throw EvalError("value nested too deeply to print");
  using K = Value::Kind;
  switch (v.kind()) {
    case K::Undefined:
      if (depth > 0) out += "Undefined";  // repr() inside a container; str() of it is ""
      break;
    case K::None: out += "None"; break;
    case K::Bool: out += v.as_bool() ? "True" : "False"; break;
    case K::Int: out += std::to_string(v.as_int()); break;
    case K::Float: out += python_float_repr(v.as_double()); break;
    case K::String: out += text::repr(v.str()); break;
    case K::Array: {
      out += v.is_tuple() ? '(' : '[';
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, item, max_bytes, depth + 1);
        check_size(out, max_bytes);
      }
      if (v.is_tuple() && v.items().size() == 1) out += ',';
      out += v.is_tuple() ? ')' : ']';
      break;
    }
    case K::Object: {
      const ObjectData& obj = v.object_data();
      out += obj.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, item] : obj.entries) {
        if (!first) out += ", ";
        first = false;
        out += text::repr(key);
        out += ": ";
        append_repr(out, item, max_bytes, depth + 1);
        check_size(out, max_bytes);
      }
      out += obj.is_namespace ? "}>" : "}";
      break;
    }
    case K::Callable: out += "<function " + v.callable_data().name + ">"; break;
  }
  check_size(out, max_bytes);
}

}  // namespace

std::string Value::to_output(size_t max_bytes) const {
  std::string out;
  append_str(out, *this, max_bytes, 0);
  return out;
}

std::string Value::repr(size_t max_bytes) const {
  std::string out;
  append_repr(out, *this, max_bytes, 0);
  return out;
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

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form: "-d.ddde+XX".
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  if (exponent >= -4 && exponent < 16) {
    std::string out;
    if (exponent >= 0) {
      const size_t int_len = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_len) {
        out = digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
    return sign + out;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) mantissa += "." + digits.substr(1);
  const int abs_exp = exponent < 0 ? -exponent : exponent;
  std::string exp_digits = std::to_string(abs_exp);
  if (exp_digits.size() < 2) exp_digits = "0" + exp_digits;
  return sign + mantissa + "e" + (exponent < 0 ? "-" : "+") + exp_digits;
}

namespace {

void append_json(std::string& out, const Value& v, const JsonDumpOptions& options, size_t max_bytes,
                 int depth) {
  if (depth > Limits::kMaxValueNesting) throw EvalError("tojson: value nested too deeply");
  const auto newline_indent = [&](int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) {
      out += *options.indent;
      check_size(out, max_bytes);
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
        check_size(out, max_bytes);
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
        check_size(out, max_bytes);
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
  check_size(out, max_bytes);
}

}  // namespace

std::string json_dump(const Value& value, const JsonDumpOptions& options, size_t max_bytes) {
  std::string out;
  append_json(out, value, options, max_bytes, 0);
  return out;
}

}  // namespace agentkv::jinja
