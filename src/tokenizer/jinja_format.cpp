#include "tokenizer/jinja_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tokenizer/jinja_text.h"

namespace agentkv::jinja {

void check_printed_size(const std::string& out, size_t max_bytes) {
  if (out.size() > max_bytes) throw EvalError("string exceeds the size limit");
}

namespace {

void append_repr(std::string& out, const Value& v, size_t max_bytes, int depth);

// Python str() for scalars and repr-of-items for containers.
void append_str(std::string& out, const Value& v, size_t max_bytes, int depth) {
  if (v.is_string()) {
    out += v.str();
    check_printed_size(out, max_bytes);
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
        check_printed_size(out, max_bytes);
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
        check_printed_size(out, max_bytes);
      }
      out += obj.is_namespace ? "}>" : "}";
      break;
    }
    case K::Callable: out += "<function " + v.callable_data().name + ">"; break;
  }
  check_printed_size(out, max_bytes);
}

}  // namespace

std::string to_output(const Value& v, size_t max_bytes) {
  std::string out;
  append_str(out, v, max_bytes, 0);
  return out;
}

std::string repr(const Value& v, size_t max_bytes) {
  std::string out;
  append_repr(out, v, max_bytes, 0);
  return out;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::Array: return "list";
    case Value::Kind::Object: return v.object_data().is_namespace ? "Namespace" : "dict";
    case Value::Kind::Callable: return "function";
  }
  return "object";
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

}  // namespace agentkv::jinja
