#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "tokenizer/jinja_compare.h"
#include "tokenizer/jinja_format.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_json.h"
#include "tokenizer/jinja_text.h"

namespace agentkv::jinja {

// ---- argument binding -----------------------------------------------------------------------

ArgBinder::ArgBinder(std::string what, CallArgs& args, std::initializer_list<const char*> params,
                     bool allow_extra_positional)
    : what_(std::move(what)), values_(params.size()) {
  const std::vector<const char*> names(params);
  std::vector<bool> given(names.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < names.size()) {
      values_[i] = args.positional[i];
      given[i] = true;
    } else if (allow_extra_positional) {
      extra_.push_back(args.positional[i]);
    } else {
      throw EvalError(what_ + ": takes at most " + std::to_string(names.size()) + " arguments");
    }
  }
  for (auto& entry : args.named) {
    const auto& name = entry.first;  // a named reference: lambdas cannot capture bindings in clang 14
    auto& value = entry.second;
    const auto it = std::find_if(names.begin(), names.end(), [&](const char* n) { return name == n; });
    if (it == names.end()) throw EvalError(what_ + ": unexpected keyword argument '" + name + "'");
    const auto i = static_cast<size_t>(it - names.begin());
    if (given[i]) throw EvalError(what_ + ": got multiple values for argument '" + name + "'");
    values_[i] = value;
    given[i] = true;
  }
}

int64_t ArgBinder::int_or(size_t i, int64_t fallback) const {
  if (!has(i) || values_[i].is_none()) return fallback;
  if (!values_[i].is_int() && !values_[i].is_bool())
    throw EvalError(what_ + ": expected an integer argument, got '" + type_name(values_[i]) + "'");
  return values_[i].as_int();
}

bool ArgBinder::bool_or(size_t i, bool fallback) const { return has(i) ? truthy(values_[i]) : fallback; }

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

std::string str_of(Interpreter& in, const Value& v) { return to_output(v, in.budget().max_string_bytes()); }

const std::string& require_string(const Value& v, const std::string& what) {
  if (!v.is_string()) throw EvalError(what + ": expected a string, got '" + type_name(v) + "'");
  return v.str();
}

// Elements a filter iterates: list items, dict keys, string characters; undefined is empty.
std::vector<Value> elements(const Value& v, const std::string& what) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::Array: return v.items();
    case Value::Kind::String: {
      std::vector<Value> out;
      const std::string& s = v.str();
      size_t pos = 0;
      while (pos < s.size()) {
        const size_t start = pos;
        text::next_code_point(s, pos);
        out.emplace_back(s.substr(start, pos - start));
      }
      return out;
    }
    case Value::Kind::Object:
      if (v.is_dict()) {
        std::vector<Value> keys;
        for (const auto& [key, item] : v.object_data().entries) keys.emplace_back(key);
        return keys;
      }
      break;
    default: break;
  }
  throw EvalError(what + ": '" + type_name(v) + "' object is not iterable");
}

// Follows a dotted attribute path ("a.b" or "0") the way Jinja's attribute filters do.
Value attribute_path(Interpreter& in, Value v, const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_undefined()) return v;
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = numeric && part.size() < 18 ? in.get_item(v, Value(static_cast<int64_t>(std::stoll(part))))
                                    : in.get_item(v, Value(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

int compare_for_sort(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) {
    const std::string x = text::to_lower(a.str()), y = text::to_lower(b.str());
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str() ? -1 : (a.str() > b.str() ? 1 : 0);
  if (values_equal(a, b)) return 0;
  throw EvalError("sort: cannot order '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Value length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return Value(int64_t{0});
    case Value::Kind::String: return Value(static_cast<int64_t>(text::code_point_count(v.str())));
    case Value::Kind::Array: return Value(static_cast<int64_t>(v.items().size()));
    case Value::Kind::Object:
      if (v.is_dict()) return Value(static_cast<int64_t>(v.object_data().entries.size()));
      break;
    default: break;
  }
  throw EvalError("object of type '" + type_name(v) + "' has no len()");
}

std::optional<double> parse_float(std::string_view s) {
  s = text::strip(s, true, true);
  std::string cleaned(s);
  cleaned.erase(std::remove(cleaned.begin(), cleaned.end(), '_'), cleaned.end());
  if (cleaned.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  return d;
}

// ---- filters --------------------------------------------------------------------------------

Value f_abs(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'abs'", args, {});
  if (in.is_float()) return Value(std::fabs(in.as_double()));
  if (in.is_int() || in.is_bool()) {
    if (in.as_int() == INT64_MIN) throw EvalError("integer overflow");
    return Value(in.as_int() < 0 ? -in.as_int() : in.as_int());
  }
  throw EvalError("filter 'abs': bad operand type '" + type_name(in) + "'");
}

Value f_attr(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'attr'", args, {"name"});
  const std::string& name = require_string(a[0], a.what());
  // Python getattr only: dict keys are not attributes.
  if (in.is_dict()) return find_method(interp, in, name);
  return interp.get_attribute(in, name);
}

Value f_capitalize(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'capitalize'", args, {});
  return interp.make_string(text::capitalize(str_of(interp, in)));
}

Value f_length(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'length'", args, {});
  return length_of(in);
}

Value f_default(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'default'", args, {"default_value", "boolean"});
  const bool use_default = in.is_undefined() || (a.bool_or(1, false) && !truthy(in));
  if (!use_default) return in;
  return a.has(0) ? a[0] : Value(std::string());
}

Value f_escape(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'escape'", args, {});
  std::string out;
  for (char c : str_of(interp, in)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return interp.make_string(std::move(out));
}

Value f_first(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'first'", args, {});
  if (in.is_array()) return in.items().empty() ? Value::undefined("no first item, sequence was empty") : in.items().front();
  std::vector<Value> items = elements(in, a.what());
  if (items.empty()) return Value::undefined("no first item, sequence was empty");
  return items.front();
}

Value f_last(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'last'", args, {});
  if (in.is_array()) return in.items().empty() ? Value::undefined("no last item, sequence was empty") : in.items().back();
  std::vector<Value> items = elements(in, a.what());
  if (items.empty()) return Value::undefined("no last item, sequence was empty");
  return items.back();
}

Value f_float(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'float'", args, {"default"});
  const Value fallback = a.has(0) ? a[0] : Value(0.0);
  if (in.is_undefined()) throw EvalError(in.str().empty() ? "filter 'float': undefined value" : in.str());
  if (in.is_number()) return Value(in.as_double());
  if (in.is_string()) {
    if (auto d = parse_float(in.str())) return Value(*d);
  }
  return fallback;
}

Value f_int(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'int'", args, {"default", "base"});
  const Value fallback = a.has(0) ? a[0] : Value(int64_t{0});
  if (in.is_undefined()) throw EvalError(in.str().empty() ? "filter 'int': undefined value" : in.str());
  if (in.is_int() || in.is_bool()) return Value(in.as_int());
  if (in.is_float()) {
    const double d = in.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(d));
  }
  if (in.is_string()) {
    std::string s(text::strip(in.str(), true, true));
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    const int base = static_cast<int>(a.int_or(1, 10));
    if (base < 2 || base > 36) throw EvalError("filter 'int': base must be between 2 and 36");
    if (!s.empty()) {
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, base);
      if (errno == 0 && end == s.c_str() + s.size()) return Value(static_cast<int64_t>(v));
    }
    if (base == 10) {
      if (auto d = parse_float(s); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
        return Value(static_cast<int64_t>(*d));
    }
  }
  return fallback;
}

Value f_items(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'items'", args, {});
  if (in.is_undefined()) return interp.make_list({});
  if (!in.is_dict()) throw EvalError("filter 'items': can only get item pairs from a mapping");
  std::vector<Value> pairs;
  for (const auto& [key, value] : in.object_data().entries)
    pairs.push_back(interp.make_list({Value(key), value}, /*is_tuple=*/true));
  return interp.make_list(std::move(pairs));
}

Value f_join(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'join'", args, {"d", "attribute"});
  const std::string separator = a.has(0) ? str_of(interp, a[0]) : std::string();
  std::string out;
  bool first = true;
  const size_t max_bytes = interp.budget().max_string_bytes();
  for (const Value& item : elements(in, a.what())) {
    if (!first) out += separator;
    first = false;
    out += str_of(interp, a.has(1) ? attribute_path(interp, item, str_of(interp, a[1])) : item);
    if (out.size() > max_bytes) throw EvalError("filter 'join': result exceeds the size limit");
  }
  return interp.make_string(std::move(out));
}

Value f_list(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'list'", args, {});
  return interp.make_list(elements(in, a.what()));
}

Value f_lower(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'lower'", args, {});
  return interp.make_string(text::to_lower(str_of(interp, in)));
}

Value f_upper(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'upper'", args, {});
  return interp.make_string(text::to_upper(str_of(interp, in)));
}

Value f_title(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'title'", args, {});
  return interp.make_string(text::title(str_of(interp, in)));
}

Value f_map(Interpreter& interp, const Value& in, CallArgs& args) {
  std::vector<Value> out;
  const auto attribute = std::find_if(args.named.begin(), args.named.end(),
                                      [](const auto& kv) { return kv.first == "attribute"; });
  if (attribute != args.named.end()) {
    ArgBinder a("filter 'map'", args, {"attribute", "default"});
    const std::string path = str_of(interp, a[0]);
    for (const Value& item : elements(in, a.what())) {
      Value v = attribute_path(interp, item, path);
      if (v.is_undefined() && a.has(1)) v = a[1];
      out.push_back(std::move(v));
    }
    return interp.make_list(std::move(out));
  }
  if (args.positional.empty()) throw EvalError("filter 'map': needs a filter name or attribute=");
  const std::string filter = require_string(args.positional[0], "filter 'map'");
  if (!is_known_filter(filter)) throw EvalError("filter 'map': no filter named '" + filter + "'");
  for (const Value& item : elements(in, "filter 'map'")) {
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.named = args.named;
    out.push_back(interp.apply_filter(filter, item, rest));
  }
  return interp.make_list(std::move(out));
}

Value extreme(Interpreter& interp, const Value& in, CallArgs& args, bool want_max) {
  ArgBinder a(want_max ? "filter 'max'" : "filter 'min'", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a.bool_or(0, false);
  Value best;
  Value best_key;
  for (const Value& item : elements(in, a.what())) {
    const Value key = a.has(1) ? attribute_path(interp, item, str_of(interp, a[1])) : item;
    if (best.is_undefined()) {
      best = item;
      best_key = key;
      continue;
    }
    const int c = compare_for_sort(key, best_key, case_sensitive);
    if (want_max ? c > 0 : c < 0) {  // ties keep the first, as Python's max/min do
      best = item;
      best_key = key;
    }
  }
  return best.is_undefined() ? Value::undefined("no item, sequence was empty") : best;
}
Value f_max(Interpreter& interp, const Value& in, CallArgs& args) { return extreme(interp, in, args, true); }
Value f_min(Interpreter& interp, const Value& in, CallArgs& args) { return extreme(interp, in, args, false); }

// select / reject / selectattr / rejectattr.
Value select_items(Interpreter& interp, const Value& in, CallArgs& args, bool by_attribute, bool keep_matches,
                   const char* what) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw EvalError(std::string(what) + ": needs an attribute name");
    attribute = str_of(interp, args.positional[next++]);
  }
  std::string test;
  if (next < args.positional.size()) {
    test = require_string(args.positional[next++], what);
    if (!is_known_test(test)) throw EvalError(std::string(what) + ": no test named '" + test + "'");
  }
  std::vector<Value> out;
  for (const Value& item : elements(in, what)) {
    const Value subject = by_attribute ? attribute_path(interp, item, attribute) : item;
    bool match;
    if (test.empty()) {
      match = truthy(subject);
    } else {
      CallArgs test_args;
      test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
      test_args.named = args.named;
      match = interp.apply_test(test, subject, test_args);
    }
    if (match == keep_matches) out.push_back(item);
  }
  return interp.make_list(std::move(out));
}
Value f_select(Interpreter& i, const Value& in, CallArgs& a) { return select_items(i, in, a, false, true, "filter 'select'"); }
Value f_reject(Interpreter& i, const Value& in, CallArgs& a) { return select_items(i, in, a, false, false, "filter 'reject'"); }
Value f_selectattr(Interpreter& i, const Value& in, CallArgs& a) { return select_items(i, in, a, true, true, "filter 'selectattr'"); }
Value f_rejectattr(Interpreter& i, const Value& in, CallArgs& a) { return select_items(i, in, a, true, false, "filter 'rejectattr'"); }

Value f_replace(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'replace'", args, {"old", "new", "count"});
  const int64_t count = a.int_or(2, -1);
  return interp.make_string(text::replace(str_of(interp, in), str_of(interp, a[0]), str_of(interp, a[1]), count,
                                          interp.budget().max_string_bytes()));
}

Value f_reverse(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'reverse'", args, {});
  std::vector<Value> items = elements(in, a.what());
  std::reverse(items.begin(), items.end());
  if (in.is_string()) {
    std::string out;
    for (const Value& c : items) out += c.str();
    return interp.make_string(std::move(out));
  }
  return interp.make_list(std::move(items));
}

Value f_round(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'round'", args, {"precision", "method"});
  if (!in.is_number()) throw EvalError("filter 'round': expected a number");
  const int64_t precision = a.int_or(0, 0);
  const std::string method = a.has(1) ? require_string(a[1], a.what()) : "common";
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = in.as_double() * scale;
  double r;
  if (method == "common") r = std::nearbyint(x);  // Python round(): half to even
  else if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else throw EvalError("filter 'round': method must be 'common', 'ceil' or 'floor'");
  return Value(r / scale);
}

Value f_safe(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'safe'", args, {});
  // Markup(value): always a string. Autoescaping is off, so nothing else changes.
  if (in.is_string()) return in;
  return interp.make_string(str_of(interp, in));
}

Value f_sort(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'sort'", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = a.bool_or(0, false);
  const bool case_sensitive = a.bool_or(1, false);
  std::vector<Value> items = elements(in, a.what());
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = a.has(2) ? attribute_path(interp, item, str_of(interp, a[2])) : item;
    keyed.emplace_back(std::move(key), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    const int c = compare_for_sort(x.first, y.first, case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return interp.make_list(std::move(out));
}

Value f_string(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'string'", args, {});
  if (in.is_string()) return in;
  return interp.make_string(str_of(interp, in));
}

Value f_sum(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'sum'", args, {"attribute", "start"});
  Value total = a.has(1) ? a[1] : Value(int64_t{0});
  for (const Value& item : elements(in, a.what())) {
    const Value v = a.has(0) ? attribute_path(interp, item, str_of(interp, a[0])) : item;
    if (!v.is_number() || !total.is_number()) throw EvalError("filter 'sum': items must be numbers");
    if (v.is_float() || total.is_float()) {
      total = Value(total.as_double() + v.as_double());
    } else {
      int64_t r;
      if (__builtin_add_overflow(total.as_int(), v.as_int(), &r)) throw EvalError("integer overflow");
      total = Value(r);
    }
  }
  return total;
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), not Jinja's HTML-safe one.
Value f_tojson(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'tojson'", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (a.bool_or(0, false)) throw EvalError("filter 'tojson': ensure_ascii=True is not supported");
  JsonDumpOptions options;
  if (a.has(1) && !a[1].is_none()) {
    if (a[1].is_string()) {
      options.indent = a[1].str();
    } else {
      const int64_t width = a.int_or(1, 0);
      if (width > 1024) throw EvalError("filter 'tojson': indent too large");
      options.indent = std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
    }
    options.item_separator = ",";
  }
  if (a.has(2) && !a[2].is_none()) {
    if (!a[2].is_array() || a[2].items().size() != 2 || !a[2].items()[0].is_string() || !a[2].items()[1].is_string())
      throw EvalError("filter 'tojson': separators must be a pair of strings");
    options.item_separator = a[2].items()[0].str();
    options.key_separator = a[2].items()[1].str();
  }
  options.sort_keys = a.bool_or(3, false);
  return interp.make_string(json_dump(in, options, interp.budget().max_string_bytes()));
}

Value f_trim(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'trim'", args, {"chars"});
  const std::string s = str_of(interp, in);
  std::optional<std::string_view> chars;
  std::string chars_storage;
  if (a.has(0) && !a[0].is_none()) {
    chars_storage = str_of(interp, a[0]);
    chars = chars_storage;
  }
  return interp.make_string(std::string(text::strip(s, true, true, chars)));
}

Value f_unique(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'unique'", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a.bool_or(0, false);
  std::vector<Value> out;
  std::vector<Value> seen;
  for (const Value& item : elements(in, a.what())) {
    Value key = a.has(1) ? attribute_path(interp, item, str_of(interp, a[1])) : item;
    if (!case_sensitive && key.is_string()) key = Value(text::to_lower(key.str()));
    interp.budget().step(1 + seen.size() / 8);  // quadratic in the worst case: pay for it
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return interp.make_list(std::move(out));
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

Value f_indent(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'indent'", args, {"width", "first", "blank"});
  std::string indentation;
  if (a.has(0) && a[0].is_string()) {
    indentation = a[0].str();
  } else {
    const int64_t width = a.int_or(0, 4);
    if (width > 1024) throw EvalError("filter 'indent': width too large");
    indentation = std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  }
  const bool first = a.bool_or(1, false);
  const bool blank = a.bool_or(2, false);
  const std::vector<std::string> lines = split_lines(str_of(interp, in) + "\n");
  std::string out;
  const size_t max_bytes = interp.budget().max_string_bytes();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += indentation;
    }
    out += lines[i];
    if (out.size() > max_bytes) throw EvalError("filter 'indent': result exceeds the size limit");
  }
  if (first) out = indentation + out;
  return interp.make_string(std::move(out));
}

Value f_dictsort(Interpreter& interp, const Value& in, CallArgs& args) {
  ArgBinder a("filter 'dictsort'", args, {"case_sensitive", "by", "reverse"});
  if (!in.is_dict()) throw EvalError("filter 'dictsort': expected a mapping");
  const bool case_sensitive = a.bool_or(0, false);
  const std::string by = a.has(1) ? require_string(a[1], a.what()) : "key";
  if (by != "key" && by != "value") throw EvalError("filter 'dictsort': by must be 'key' or 'value'");
  const bool reverse = a.bool_or(2, false);
  std::vector<std::pair<std::string, Value>> entries = in.object_data().entries;
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
    const int c = by == "key" ? compare_for_sort(Value(x.first), Value(y.first), case_sensitive)
                              : compare_for_sort(x.second, y.second, case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (auto& [key, value] : entries) out.push_back(interp.make_list({Value(key), value}, /*is_tuple=*/true));
  return interp.make_list(std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},           {"attr", f_attr},           {"capitalize", f_capitalize},
      {"count", f_length},      {"length", f_length},       {"default", f_default},
      {"d", f_default},         {"dictsort", f_dictsort},   {"escape", f_escape},
      {"e", f_escape},          {"first", f_first},         {"last", f_last},
      {"float", f_float},       {"int", f_int},             {"items", f_items},
      {"join", f_join},         {"list", f_list},           {"lower", f_lower},
      {"upper", f_upper},       {"title", f_title},         {"map", f_map},
      {"max", f_max},           {"min", f_min},             {"select", f_select},
      {"reject", f_reject},     {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse},     {"round", f_round},
      {"safe", f_safe},         {"sort", f_sort},           {"string", f_string},
      {"sum", f_sum},           {"tojson", f_tojson},       {"trim", f_trim},
      {"unique", f_unique},     {"indent", f_indent},
  };
  return table;
}

// ---- tests ----------------------------------------------------------------------------------

bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict(); }
// Jinja asks Python: undefined values iterate (as empty) and have a length, so they pass both.
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_array() || v.is_dict();
}
bool t_sequence(Interpreter& i, const Value& v, CallArgs& a) { return t_iterable(i, v, a); }
// Python's callable(): an undefined value has __call__ (which raises), so it counts.
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Value::Kind::Callable || v.is_undefined(); }
bool t_lower(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && text::to_lower(v.str()) == v.str(); }
bool t_upper(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && text::to_upper(v.str()) == v.str(); }

int64_t int_operand(const Value& v, const char* what) {
  if (!v.is_int() && !v.is_bool()) throw EvalError(std::string("test '") + what + "': expected an integer");
  return v.as_int();
}
// value % 2 with Python's sign rule, for ints and floats.
double python_mod2(const Value& v, const char* what) {
  if (!v.is_number()) throw EvalError(std::string("test '") + what + "': expected a number");
  if (!v.is_float()) {
    const int64_t r = v.as_int() % 2;
    return static_cast<double>(r < 0 ? r + 2 : r);
  }
  const double r = std::fmod(v.as_double(), 2.0);
  return r < 0 ? r + 2.0 : r;
}
bool t_odd(Interpreter&, const Value& v, CallArgs&) { return python_mod2(v, "odd") == 1.0; }
bool t_even(Interpreter&, const Value& v, CallArgs&) { return python_mod2(v, "even") == 0.0; }
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("test 'divisibleby'", args, {"num"});
  const int64_t d = int_operand(a[0], "divisibleby");
  if (d == 0) throw EvalError("test 'divisibleby': division by zero");
  if (d == -1) return true;
  return int_operand(v, "divisibleby") % d == 0;
}

bool compare_test(Interpreter& interp, const Value& v, CallArgs& args, const char* op) {
  ArgBinder a(std::string("test '") + op + "'", args, {"other"});
  // Reuse the interpreter's operator semantics through a tiny expression-free path.
  const std::string o = op;
  if (o == "==") return values_equal(v, a[0]);
  if (o == "!=") return !values_equal(v, a[0]);
  const int c = compare_for_sort(v, a[0], true);
  if (o == "<") return c < 0;
  if (o == "<=") return c <= 0;
  if (o == ">") return c > 0;
  return c >= 0;
}
bool t_eq(Interpreter& i, const Value& v, CallArgs& a) { return compare_test(i, v, a, "=="); }
bool t_ne(Interpreter& i, const Value& v, CallArgs& a) { return compare_test(i, v, a, "!="); }
bool t_lt(Interpreter& i, const Value& v, CallArgs& a) { return compare_test(i, v, a, "<"); }
bool t_le(Interpreter& i, const Value& v, CallArgs& a) { return compare_test(i, v, a, "<="); }
bool t_gt(Interpreter& i, const Value& v, CallArgs& a) { return compare_test(i, v, a, ">"); }
bool t_ge(Interpreter& i, const Value& v, CallArgs& a) { return compare_test(i, v, a, ">="); }

bool t_in(Interpreter& interp, const Value& v, CallArgs& args) {
  ArgBinder a("test 'in'", args, {"seq"});
  const Value& seq = a[0];
  interp.charge_scan(seq);
  if (seq.is_string()) return v.is_string() && seq.str().find(v.str()) != std::string::npos;
  if (seq.is_array())
    return std::any_of(seq.items().begin(), seq.items().end(), [&](const Value& x) { return values_equal(x, v); });
  if (seq.is_dict()) return v.is_string() && seq.object_data().find(v.str()) != nullptr;
  if (seq.is_undefined()) return false;
  throw EvalError("test 'in': argument of type '" + type_name(seq) + "' is not iterable");
}

bool t_sameas(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("test 'sameas'", args, {"other"});
  const Value& o = a[0];
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::Bool:
    case Value::Kind::Int: return v.as_int() == o.as_int();
    case Value::Kind::Float: return v.as_double() == o.as_double();
    case Value::Kind::String: return &v.str() == &o.str();
    case Value::Kind::Array: return &v.items() == &o.items();
    case Value::Kind::Object: return &v.object_data() == &o.object_data();
    case Value::Kind::Callable: return &v.callable_data() == &o.callable_data();
  }
  return false;
}

bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean},   {"true", t_true},           {"false", t_false},
      {"integer", t_integer},   {"float", t_float},         {"number", t_number},
      {"string", t_string},     {"mapping", t_mapping},     {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"lower", t_lower},
      {"upper", t_upper},       {"odd", t_odd},             {"even", t_even},
      {"divisibleby", t_divisibleby}, {"eq", t_eq},         {"equalto", t_eq},
      {"==", t_eq},             {"ne", t_ne},               {"!=", t_ne},
      {"lt", t_lt},             {"lessthan", t_lt},         {"<", t_lt},
      {"le", t_le},             {"<=", t_le},               {"gt", t_gt},
      {"greaterthan", t_gt},    {">", t_gt},                {"ge", t_ge},
      {">=", t_ge},             {"in", t_in},               {"sameas", t_sameas},
      {"escaped", t_escaped},
  };
  return table;
}

// ---- methods --------------------------------------------------------------------------------

// Code-point index of a byte offset.
int64_t code_point_index(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(text::code_point_count(std::string_view(s).substr(0, byte_offset)));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix, const std::string& what) {
  const auto one = [&](const Value& v) {
    const std::string& a = require_string(v, what);
    return prefix ? std::string_view(s).starts_with(a) : std::string_view(s).ends_with(a);
  };
  if (affix.is_array()) return std::any_of(affix.items().begin(), affix.items().end(), one);
  return one(affix);
}

std::optional<std::string_view> optional_chars(const Value& v, const std::string& what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  return require_string(v, what);
}

Value string_method(Interpreter& interp, const std::string& s, const std::string& name, CallArgs& args) {
  const std::string what = "str." + name + "()";
  if (name == "startswith" || name == "endswith") {
    ArgBinder a(what, args, {"affix"});
    return Value(affix_match(s, a[0], name == "startswith", what));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgBinder a(what, args, {"chars"});
    return interp.make_string(std::string(text::strip(s, name != "rstrip", name != "lstrip", optional_chars(a[0], what))));
  }
  if (name == "split" || name == "rsplit") {
    ArgBinder a(what, args, {"sep", "maxsplit"});
    const int64_t maxsplit = a.int_or(1, -1);
    std::vector<std::string> parts;
    if (!a.has(0) || a[0].is_none()) {
      parts = text::split_whitespace(s, name == "split" ? maxsplit : -1);
    } else {
      const std::string& sep = require_string(a[0], what);
      parts = name == "split" ? text::split(s, sep, maxsplit) : text::rsplit(s, sep, maxsplit);
    }
    std::vector<Value> out;
    for (auto& p : parts) out.push_back(interp.make_string(std::move(p)));
    return interp.make_list(std::move(out));
  }
  if (name == "replace") {
    ArgBinder a(what, args, {"old", "new", "count"});
    return interp.make_string(text::replace(s, require_string(a[0], what), require_string(a[1], what),
                                            a.int_or(2, -1), interp.budget().max_string_bytes()));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    ArgBinder a(what, args, {});
    if (name == "upper") return interp.make_string(text::to_upper(s));
    if (name == "lower") return interp.make_string(text::to_lower(s));
    if (name == "title") return interp.make_string(text::title(s));
    return interp.make_string(text::capitalize(s));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    ArgBinder a(what, args, {"sub"});
    const std::string& sub = require_string(a[0], what);
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(text::code_point_count(s) + 1));
      int64_t n = 0;
      for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
      return Value(n);
    }
    const size_t hit = name == "find" ? s.find(sub) : s.rfind(sub);
    return Value(hit == std::string::npos ? int64_t{-1} : code_point_index(s, hit));
  }
  if (name == "join") {
    ArgBinder a(what, args, {"iterable"});
    std::string out;
    bool first = true;
    for (const Value& item : elements(a[0], what)) {
      if (!first) out += s;
      first = false;
      out += require_string(item, what);
      if (out.size() > interp.budget().max_string_bytes()) throw EvalError(what + ": result exceeds the size limit");
    }
    return interp.make_string(std::move(out));
  }
  if (name == "splitlines") {
    ArgBinder a(what, args, {});
    std::vector<Value> out;
    for (auto& line : split_lines(s)) out.push_back(interp.make_string(std::move(line)));
    return interp.make_list(std::move(out));
  }
  // is*(): ASCII classification.
  ArgBinder a(what, args, {});
  if (s.empty()) return Value(false);
  const auto all = [&](auto pred) { return Value(std::all_of(s.begin(), s.end(), pred)); };
  if (name == "isdigit") return all([](char c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha") return all([](char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; });
  if (name == "isalnum")
    return all([](char c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); });
  if (name == "isspace") return Value(text::strip(s, true, false).empty());
  if (name == "islower") return Value(text::to_lower(s) == s && text::to_upper(s) != s);
  if (name == "isupper") return Value(text::to_upper(s) == s && text::to_lower(s) != s);
  throw EvalError("unknown method " + what);
}

bool is_string_method(const std::string& name) {
  static const char* kNames[] = {"startswith", "endswith", "strip",   "lstrip",  "rstrip",     "split",
                                 "rsplit",     "replace",  "upper",   "lower",   "title",      "capitalize",
                                 "find",       "rfind",    "count",   "join",    "splitlines", "isdigit",
                                 "isalpha",    "isalnum",  "isspace", "islower", "isupper"};
  return std::any_of(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; });
}

Value dict_method(Interpreter& interp, const Value& dict, const std::string& name, CallArgs& args) {
  const std::string what = "dict." + name + "()";
  const ObjectData& obj = dict.object_data();
  if (name == "get") {
    ArgBinder a(what, args, {"key", "default"});
    if (a[0].is_string())
      if (const Value* found = obj.find(a[0].str())) return *found;
    return a.has(1) ? a[1] : Value::none();
  }
  ArgBinder a(what, args, {});
  std::vector<Value> out;
  for (const auto& [key, value] : obj.entries) {
    if (name == "keys") out.emplace_back(key);
    else if (name == "values") out.push_back(value);
    else out.push_back(interp.make_list({Value(key), value}, /*is_tuple=*/true));
  }
  return interp.make_list(std::move(out));
}

Value list_method(const Value& list, const std::string& name, CallArgs& args) {
  const std::string what = "list." + name + "()";
  ArgBinder a(what, args, {"value"});
  const auto& items = list.items();
  if (name == "count")
    return Value(static_cast<int64_t>(
        std::count_if(items.begin(), items.end(), [&](const Value& x) { return values_equal(x, a[0]); })));
  for (size_t i = 0; i < items.size(); ++i)
    if (values_equal(items[i], a[0])) return Value(static_cast<int64_t>(i));
  throw EvalError(what + ": value is not in list");
}

// ---- globals --------------------------------------------------------------------------------

Value g_range(Interpreter& interp, CallArgs& args) {
  ArgBinder a("range()", args, {"start", "stop", "step"});
  int64_t start = 0, stop = 0, step = 1;
  if (a.has(1)) {
    start = a.int_or(0, 0);
    stop = a.int_or(1, 0);
    step = a.int_or(2, 1);
  } else {
    stop = a.int_or(0, 0);
  }
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  const long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count_ld = span <= 0 ? 0 : std::ceil(span / std::fabs(static_cast<long double>(step)));
  if (count_ld > static_cast<long double>(Limits::kMaxTotalItems)) throw EvalError("range() too large");
  const auto count = static_cast<size_t>(count_ld);
  interp.budget().charge_items(count);
  std::vector<Value> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) out.emplace_back(start + static_cast<int64_t>(i) * step);
  return Value::array(std::move(out));
}

void fill_mapping(ObjectData& target, CallArgs& args, const char* what) {
  if (args.positional.size() > 1) throw EvalError(std::string(what) + ": takes at most one positional argument");
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (!source.is_dict()) throw EvalError(std::string(what) + ": positional argument must be a mapping");
    for (const auto& [key, value] : source.object_data().entries) target.set(key, value);
  }
  for (auto& [key, value] : args.named) target.set(key, value);
}

Value g_namespace(Interpreter& interp, CallArgs& args) {
  Value ns = interp.make_namespace();
  fill_mapping(ns.object_data(), args, "namespace()");
  return ns;
}

Value g_dict(Interpreter& interp, CallArgs& args) {
  Value d = Value::object({});
  fill_mapping(d.object_data(), args, "dict()");
  interp.budget().charge_items(d.object_data().entries.size());
  return d;
}

Value g_raise_exception(Interpreter& interp, CallArgs& args) {
  ArgBinder a("raise_exception()", args, {"message"});
  throw EvalError(str_of(interp, a[0]));
}

Value g_strftime_now(Interpreter& interp, CallArgs& args) {
  ArgBinder a("strftime_now()", args, {"format"});
  const std::string& format = require_string(a[0], a.what());
  if (format.size() > 256) throw EvalError("strftime_now(): format too long");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[1024];
  const size_t n = format.empty() ? 0 : std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
  return interp.make_string(std::string(buffer, n));
}

}  // namespace

bool is_known_filter(std::string_view name) { return filters().count(name) != 0; }
bool is_known_test(std::string_view name) { return tests().count(name) != 0; }

Value run_filter(Interpreter& interp, std::string_view name, const Value& input, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) throw EvalError("no filter named '" + std::string(name) + "'");
  interp.charge_scan(input);
  return it->second(interp, input, args);
}

bool run_test(Interpreter& interp, std::string_view name, const Value& input, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw EvalError("no test named '" + std::string(name) + "'");
  static const std::string_view kWithArguments[] = {"divisibleby", "eq", "equalto", "==", "ne", "!=", "lt",
                                                   "lessthan", "<", "le", "<=", "gt", "greaterthan", ">",
                                                   "ge", ">=", "in", "sameas"};
  const bool takes_arguments =
      std::find(std::begin(kWithArguments), std::end(kWithArguments), name) != std::end(kWithArguments);
  if (!takes_arguments && (!args.positional.empty() || !args.named.empty()))
    throw EvalError("test '" + std::string(name) + "' takes no arguments");
  return it->second(interp, input, args);
}

bool is_unsafe_method(const Value& object, const std::string& name) {
  static const char* kDict[] = {"clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"};
  static const char* kList[] = {"append", "clear", "copy", "extend", "insert", "pop", "remove", "reverse", "sort"};
  const auto in = [&](const auto& names) {
    return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
  };
  if (object.is_dict()) return in(kDict);
  if (object.is_array()) return in(kList);
  return false;
}

Value find_method(Interpreter& interp, const Value& object, const std::string& name) {
  if (object.is_string() && is_string_method(name)) {
    return Value::callable("str." + name, [object, name](Interpreter& in, CallArgs& args) {
      in.charge_scan(object);
      return string_method(in, object.str(), name, args);
    });
  }
  if (object.is_dict() && (name == "get" || name == "items" || name == "keys" || name == "values")) {
    return Value::callable("dict." + name, [object, name](Interpreter& in, CallArgs& args) {
      in.charge_scan(object);
      return dict_method(in, object, name, args);
    });
  }
  if (object.is_array() && (name == "count" || name == "index")) {
    return Value::callable("list." + name, [object, name](Interpreter& in, CallArgs& args) {
      in.charge_scan(object);
      return list_method(object, name, args);
    });
  }
  (void)interp;
  return Value::undefined();
}

std::vector<std::pair<std::string, Value>> builtin_globals() {
  return {
      {"range", Value::callable("range", g_range)},
      {"namespace", Value::callable("namespace", g_namespace)},
      {"dict", Value::callable("dict", g_dict)},
      {"raise_exception", Value::callable("raise_exception", g_raise_exception)},
      {"strftime_now", Value::callable("strftime_now", g_strftime_now)},
  };
}

}  // namespace agentkv::jinja
