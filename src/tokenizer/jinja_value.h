// Values of the chat-template interpreter: Python/Jinja semantics (undefined distinct from
// none, insertion-ordered dicts, shared immutable strings and lists, mutable namespaces). What
// Python does with them lives beside: printing (jinja_format.h), truth and == (jinja_compare.h),
// JSON in and out (jinja_json.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

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
  static Value callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);

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

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }   // Int or Bool
  double as_double() const;                 // any number
  const std::string& str() const;           // String (or the hint of an Undefined)
  const std::vector<Value>& items() const { return array_->items; }
  ObjectData& object_data() const { return *object_; }  // Object; a namespace when is_namespace
  const CallableData& callable_data() const { return *callable_; }

 private:
  friend struct ObjectData;
  // Depth of nested lists and dicts (0 for a scalar), kept so that building one checks
  // Limits::kMaxValueNesting without walking it.
  int nesting() const;

  Kind kind_ = Kind::Undefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<ArrayData> array_;
  std::shared_ptr<ObjectData> object_;
  std::shared_ptr<const CallableData> callable_;
};

}  // namespace agentkv::jinja
