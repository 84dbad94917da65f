// A GGUF file's metadata: its values (scalars of their exact type, arrays of their element type)
// and the key/value table the reader fills, found by key and read by type (docs/gguf.md, "Typed
// getters"). Apart from the reader (gguf.h), which maps the file and owns its tensor table.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace agentkv::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType t);

inline constexpr int kMaxArrayNesting = 8;  // arrays of arrays deeper than this are refused

// A metadata value. Scalars keep their exact type; arrays keep their element type.
struct Value {
  ValueType type = ValueType::U32;
  ValueType elem_type = ValueType::U32;  // meaningful for ARRAY only
  // Scalar payloads: integers (any width, bool) as int64/uint64, floats as double, strings as string.
  std::variant<int64_t, uint64_t, double, std::string> scalar;
  // Array payloads (exactly one is used, by elem_type): strings, integers, floats, bools-as-ints.
  std::vector<std::string> str_array;
  std::vector<int64_t> int_array;    // signed ints, bools, and unsigned that fit
  std::vector<uint64_t> uint_array;  // U64 arrays
  std::vector<double> float_array;
  // Arrays of arrays (elem_type ARRAY): each element is itself an ARRAY Value. llama.cpp's format
  // allows them; no model key uses them, but they are kept so a file round-trips.
  std::vector<Value> nested;
  size_t array_size() const;  // element count of an ARRAY value (0 for scalars)
};

// "u32", "string", "array[f32]": a value's type as messages and `agentkv gguf-info` print it.
std::string value_type_label(const Value& v);

class Metadata {
 public:
  // source: the file the values came from, named by every error.
  explicit Metadata(std::string source = {}) : source_(std::move(source)) {}

  // Appends key at the end; throws Error ("duplicate metadata key") when it is already there.
  void add(std::string key, Value value);
  // The entries in file order.
  const std::vector<std::pair<std::string, Value>>& entries() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: nullopt when absent; throw Error (naming file and key) when present with the
  // wrong type. Integer getters accept any integer type whose value fits.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;  // accepts integers too
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;
  // require_*: as get_*, but a missing key throws "missing required key".
  uint64_t require_uint(std::string_view key) const;
  double require_float(std::string_view key) const;
  std::string require_string(std::string_view key) const;

  // Drops the parsed copies of the named keys once their consumer has its own (the tokenizer
  // vocabulary and merges are ~25 MB of strings): the keys then read as absent.
  void release(std::initializer_list<std::string_view> keys);

 private:
  std::string source_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace agentkv::gguf
