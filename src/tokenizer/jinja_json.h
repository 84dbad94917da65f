// Chat-template values to and from JSON: the request's messages and tools come in as JSON, and
// the tojson filter writes values out as Python's json.dumps does.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja_value.h"

namespace agentkv::jinja {

// Converts JSON input (throws agentkv::Error past Limits::kMaxValueNesting).
Value value_from_json(const nlohmann::ordered_json& json, int depth = 0);

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

}  // namespace agentkv::jinja
