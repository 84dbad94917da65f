#include "agentkv/gguf_info.h"

#include <algorithm>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <vector>

#include "gguf/gguf.h"

namespace agentkv {
namespace {

using gguf::Value;
using gguf::ValueType;

constexpr size_t kShownArrayItems = 8;
constexpr size_t kShownStringBytes = 64;

std::string quote(const std::string& s, bool full) {
  std::string out = "\"";
  const size_t shown = full ? s.size() : std::min(s.size(), kShownStringBytes);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (shown < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// Shortest text that reads back to the same number (f32 values at float precision).
std::string number(double v, ValueType t) {
  char buf[64];
  const auto res = t == ValueType::F32 ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                                       : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string format_value(const Value& v, bool full);

std::string format_array(const Value& v, bool full) {
  const size_t n = v.array_size();
  const size_t shown = full ? n : std::min(n, kShownArrayItems);
  std::string out = "[";
  for (size_t i = 0; i < shown; ++i) {
    if (i) out += ", ";
    switch (v.elem_type) {
      case ValueType::STRING: out += quote(v.str_array[i], full); break;
      case ValueType::ARRAY: out += format_array(v.nested[i], full); break;
      case ValueType::U64: out += std::to_string(v.uint_array[i]); break;
      case ValueType::F32: case ValueType::F64: out += number(v.float_array[i], v.elem_type); break;
      case ValueType::BOOL: out += v.int_array[i] ? "true" : "false"; break;
      default: out += std::to_string(v.int_array[i]); break;
    }
  }
  if (shown < n) out += ", ... (" + std::to_string(n) + " items)";
  return out + "]";
}

std::string format_value(const Value& v, bool full) {
  switch (v.type) {
    case ValueType::ARRAY: return format_array(v, full);
    case ValueType::STRING: return quote(std::get<std::string>(v.scalar), full);
    case ValueType::F32: case ValueType::F64: return number(std::get<double>(v.scalar), v.type);
    case ValueType::BOOL: return std::get<uint64_t>(v.scalar) ? "true" : "false";
    default:
      if (const auto* s = std::get_if<int64_t>(&v.scalar)) return std::to_string(*s);
      return std::to_string(std::get<uint64_t>(v.scalar));
  }
}

std::string shape(const gguf::TensorInfo& t) {
  std::string out = "[";
  for (int d = 0; d < t.n_dims; ++d) out += (d ? ", " : "") + std::to_string(t.ne[d]);
  return out + "]";
}

// printf into out.
[[gnu::format(printf, 2, 3)]] void appendf(std::string& out, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(n) + 1);
  std::vsnprintf(out.data() + at, static_cast<size_t>(n) + 1, fmt, again);
  va_end(again);
  out.resize(at + static_cast<size_t>(n));
}

std::string describe(const gguf::Reader& r, bool full) {
  std::string out;
  appendf(out, "file:      %s (%llu bytes)\n", r.path().c_str(), static_cast<unsigned long long>(r.file_size()));
  appendf(out, "version:   %u\n", r.version());
  appendf(out, "alignment: %llu%s\n", static_cast<unsigned long long>(r.alignment()),
          r.metadata().has("general.alignment") ? "" : " (default)");
  appendf(out, "data:      starts at byte %llu\n", static_cast<unsigned long long>(r.data_offset()));

  size_t key_width = 0;
  for (const auto& [key, v] : r.metadata().entries()) key_width = std::max(key_width, key.size());
  appendf(out, "\nmetadata: %zu keys\n", r.metadata().entries().size());
  for (const auto& [key, v] : r.metadata().entries()) {
    std::string type = gguf::value_type_label(v);
    if (v.type == ValueType::ARRAY) type += "(" + std::to_string(v.array_size()) + ")";
    appendf(out, "  %-*s  %-22s %s\n", static_cast<int>(key_width), key.c_str(), type.c_str(),
            format_value(v, full).c_str());
  }

  size_t name_width = 4;
  for (const auto& t : r.tensors()) name_width = std::max(name_width, t.name.size());
  appendf(out, "\ntensors: %zu\n", r.tensors().size());
  appendf(out, "  %-*s  %-7s %-22s %12s %12s\n", static_cast<int>(name_width), "name", "type", "shape", "offset",
          "bytes");
  uint64_t total_bytes = 0;
  int64_t total_elements = 0;
  std::map<std::string, size_t> per_type;
  for (const auto& t : r.tensors()) {
    const std::string type(ggml_type_name(t.type));
    appendf(out, "  %-*s  %-7s %-22s %12llu %12llu\n", static_cast<int>(name_width), t.name.c_str(), type.c_str(),
            shape(t).c_str(), static_cast<unsigned long long>(t.offset),
            static_cast<unsigned long long>(t.nbytes));
    total_bytes += t.nbytes;
    total_elements += t.n_elements();
    ++per_type[type];
  }
  std::string types;
  for (const auto& [name, count] : per_type) types += (types.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  appendf(out, "\ntotal: %zu tensors, %lld elements, %llu bytes (%.2f MiB)%s%s\n", r.tensors().size(),
          static_cast<long long>(total_elements), static_cast<unsigned long long>(total_bytes),
          static_cast<double>(total_bytes) / (1024.0 * 1024.0), types.empty() ? "" : "; types: ",
          types.c_str());
  return out;
}

}  // namespace

std::string describe_gguf(const std::string& path, bool full) { return describe(*gguf::Reader::open(path), full); }

}  // namespace agentkv
