// The metadata of a GGUF file: its values' types and the typed getters over its key/value table.
#include "gguf/gguf_metadata.h"

#include <limits>

#include "agentkv/error.h"

namespace agentkv::gguf {

namespace {

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void wrong_type(const std::string& file, std::string_view key, const Value& v, std::string_view expected) {
  throw Error(file + ": key " + quoted(key) + " has type " + value_type_label(v) + ", expected " + std::string(expected));
}

}  // namespace

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "unknown";
}

size_t Value::array_size() const {
  if (type != ValueType::ARRAY) return 0;
  switch (elem_type) {
    case ValueType::STRING: return str_array.size();
    case ValueType::ARRAY: return nested.size();
    case ValueType::U64: return uint_array.size();
    case ValueType::F32: case ValueType::F64: return float_array.size();
    default: return int_array.size();
  }
}

std::string value_type_label(const Value& v) {
  if (v.type != ValueType::ARRAY) return std::string(value_type_name(v.type));
  return "array[" + std::string(value_type_name(v.elem_type)) + "]";
}

void Metadata::add(std::string key, Value value) {
  if (index_.count(key)) throw Error(source_ + ": duplicate metadata key " + quoted(key));
  index_.emplace(key, kv_.size());
  kv_.emplace_back(std::move(key), std::move(value));
}

const Value* Metadata::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<uint64_t> Metadata::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer_type(v->type)) wrong_type(source_, key, *v, "an unsigned integer");
  if (const auto* s = std::get_if<int64_t>(&v->scalar)) {
    if (*s < 0)
      throw Error(source_ + ": key " + quoted(key) + " is " + std::to_string(*s) + ", expected a non-negative integer");
    return static_cast<uint64_t>(*s);
  }
  return std::get<uint64_t>(v->scalar);
}

std::optional<int64_t> Metadata::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer_type(v->type)) wrong_type(source_, key, *v, "an integer");
  if (const auto* u = std::get_if<uint64_t>(&v->scalar)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(source_ + ": key " + quoted(key) + " is " + std::to_string(*u) + ", too large for a signed integer");
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(v->scalar);
}

std::optional<double> Metadata::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == ValueType::F32 || v->type == ValueType::F64) return std::get<double>(v->scalar);
  if (!is_integer_type(v->type)) wrong_type(source_, key, *v, "a number");
  if (const auto* s = std::get_if<int64_t>(&v->scalar)) return static_cast<double>(*s);
  return static_cast<double>(std::get<uint64_t>(v->scalar));
}

std::optional<bool> Metadata::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::BOOL) wrong_type(source_, key, *v, "bool");
  return std::get<uint64_t>(v->scalar) != 0;
}

std::optional<std::string> Metadata::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::STRING) wrong_type(source_, key, *v, "string");
  return std::get<std::string>(v->scalar);
}

std::optional<std::vector<std::string>> Metadata::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::ARRAY || v->elem_type != ValueType::STRING) wrong_type(source_, key, *v, "array[string]");
  return v->str_array;
}

std::optional<std::vector<int64_t>> Metadata::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::ARRAY || !is_integer_type(v->elem_type))
    wrong_type(source_, key, *v, "an array of integers");
  if (v->elem_type != ValueType::U64) return v->int_array;
  std::vector<int64_t> out;
  out.reserve(v->uint_array.size());
  for (uint64_t u : v->uint_array) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(source_ + ": key " + quoted(key) + " holds " + std::to_string(u) + ", too large for a signed integer");
    out.push_back(static_cast<int64_t>(u));
  }
  return out;
}

std::optional<std::vector<double>> Metadata::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::ARRAY) wrong_type(source_, key, *v, "an array of numbers");
  if (v->elem_type == ValueType::F32 || v->elem_type == ValueType::F64) return v->float_array;
  if (!is_integer_type(v->elem_type)) wrong_type(source_, key, *v, "an array of numbers");
  std::vector<double> out;
  if (v->elem_type == ValueType::U64) {
    out.reserve(v->uint_array.size());
    for (uint64_t u : v->uint_array) out.push_back(static_cast<double>(u));
  } else {
    out.reserve(v->int_array.size());
    for (int64_t s : v->int_array) out.push_back(static_cast<double>(s));
  }
  return out;
}

uint64_t Metadata::require_uint(std::string_view key) const {
  if (auto v = get_uint(key)) return *v;
  throw Error(source_ + ": missing required key " + quoted(key));
}

double Metadata::require_float(std::string_view key) const {
  if (auto v = get_float(key)) return *v;
  throw Error(source_ + ": missing required key " + quoted(key));
}

std::string Metadata::require_string(std::string_view key) const {
  if (auto v = get_string(key)) return *v;
  throw Error(source_ + ": missing required key " + quoted(key));
}

void Metadata::release(std::initializer_list<std::string_view> keys) {
  for (std::string_view key : keys) {
    auto it = index_.find(key);
    if (it == index_.end()) continue;
    const size_t idx = it->second;
    kv_.erase(kv_.begin() + static_cast<std::ptrdiff_t>(idx));
    kv_.shrink_to_fit();
    index_.clear();
    for (size_t i = 0; i < kv_.size(); ++i) index_.emplace(kv_[i].first, i);
  }
}

}  // namespace agentkv::gguf
