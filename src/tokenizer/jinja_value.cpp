#include "tokenizer/jinja_value.h"

#include <algorithm>

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

Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::Callable;
  v.callable_ = std::make_shared<const CallableData>(CallableData{std::move(name), std::move(fn)});
  return v;
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

}  // namespace agentkv::jinja
