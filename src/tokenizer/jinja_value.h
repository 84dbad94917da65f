// Values of the chat-template interpreter: Python/Jinja semantics (undefined distinct from
// none, insertion-ordered dicts, shared immutable strings and lists, mutable namespaces).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"

namespace agentkv::jinja {

// A runtime failure not yet tied to a template position; the interpreter rethrows it as an
// agentkv::Error naming the line and column of the expression being evaluated.
class EvalError : public Error {
 public:
  using Error::Error;
};

// Resource limits: a template comes from an untrusted model file, so every render is bounded.
struct Limits {
  static constexpr size_t kMaxStringBytes = 32u << 20;     // any single string, incl. output
  static constexpr size_t kMaxTotalBytes = 256u << 20;     // all strings built during a render
  static constexpr size_t kMaxTotalItems = 4u << 20;       // all list/dict entries built
  static constexpr uint64_t kMaxSteps = 5'000'000;         // evaluated nodes (+16 per loop iteration)
  static constexpr int kMaxEvalDepth = 256;                // nested evaluation incl. macro calls
  static constexpr int kMaxExprHeight = 200;               // height of one parsed expression
  static constexpr int kMaxBlockNesting = 100;             // nested {% if/for/macro %} blocks
  static constexpr int kMaxValueNesting = 256;             // nested lists/dicts in a value
};

// Counts what a render builds and throws agentkv::Error once a limit is passed.
class Budget {
 public:
  void charge_bytes(size_t n);
  void charge_items(size_t n);
  void step(uint64_t n = 1);
  // Largest string a builder may grow to now.
  size_t max_string_bytes() const;

 private:
  size_t bytes_ = 0;
  size_t items_ = 0;
  uint64_t steps_ = 0;
};

class Value;
class Interpreter;

struct ArrayData {
  std::vector<Value> items;
  int nesting = 1;
  bool is_tuple = false;  // only changes how it prints: (1, 2)
};

// A Python dict (string keys, insertion order) or, with is_namespace, a Jinja namespace().
// Entries are only appended or replaced in place (or all cleared), which keeps the lookup index
// valid.
struct ObjectData {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;
  int nesting = 1;
  const Value* find(std::string_view key) const;
  // Inserts or replaces, keeping the first insertion position (Python dict semantics).
  void set(std::string key, Value value);
  void clear();

 private:
  // Key -> position, built once a dict outgrows a linear scan (client JSON can be large).
  mutable std::unordered_map<std::string, size_t> index_;
  mutable size_t indexed_ = 0;
  const std::pair<std::string, Value>* find_entry(std::string_view key) const;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

struct CallableData {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  explicit Value(bool b);
  explicit Value(int64_t i);
  explicit Value(int i) : Value(static_cast<int64_t>(i)) {}
  explicit Value(double d);
  explicit Value(std::string s);
  explicit Value(const char* s) : Value(std::string(s)) {}
  // Lists and dicts check Limits::kMaxValueNesting and throw agentkv::Error beyond it.
  static Value array(std::vector<Value> items, bool is_tuple = false);
  static Value object(std::vector<std::pair<std::string, Value>> entries);
  // Same, for entries whose keys are known to be distinct (skips the duplicate check).
  static Value object_with_distinct_keys(std::vector<std::pair<std::string, Value>> entries);
  static Value make_namespace();
  static Value callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);
  // Converts JSON input (throws agentkv::Error past the nesting limit).
  static Value from_json(const nlohmann::ordered_json& json, int depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_tuple() const { return kind_ == Kind::Array && array_->is_tuple; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_dict() const { return kind_ == Kind::Object && !object_data().is_namespace; }
  bool is_namespace() const { return kind_ == Kind::Object && object_data().is_namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }   // Int or Bool
  double as_double() const;                 // any number
  const std::string& str() const;           // String (or the hint of an Undefined)
  const std::vector<Value>& items() const { return array_->items; }
  ObjectData& object_data() const { return *object_; }
  const CallableData& callable_data() const { return *callable_; }
  int nesting() const;

  // Python truthiness (undefined and none are false).
  bool truthy() const;
  // Python str(): what {{ value }} prints.
  std::string to_output(size_t max_bytes) const;
  // Python repr().
  std::string repr(size_t max_bytes) const;
  // Python type name for messages ("str", "dict", "NoneType", ...).
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<ArrayData> array_;
  std::shared_ptr<ObjectData> object_;
  std::shared_ptr<const CallableData> callable_;
};

// Python ==, as used by ==, in, and the sameas-free tests (numbers compare across int/float/bool).
bool values_equal(const Value& a, const Value& b, int depth = 0);

// json.dumps(value, ensure_ascii=False, indent=..., separators=..., sort_keys=...) as Hugging
// Face's tojson filter calls it. indent: nullopt for single-line output. Throws agentkv::Error for
// values JSON cannot hold (undefined, callables, namespaces).
struct JsonDumpOptions {
  std::optional<std::string> indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string json_dump(const Value& value, const JsonDumpOptions& options, size_t max_bytes);

// Python float repr (shortest round-trip digits, "1e-05", "3.0", "inf").
std::string python_float_repr(double d);

}  // namespace agentkv::jinja
