#include "server/json_fields.h"

#include <cmath>

#include "server/request_guard.h"
#include "server/server_error.h"

namespace agentkv::server {

namespace {
HttpError wrong_type(const char* key, const char* expected) {
  return invalid_request(std::string("field '") + key + "' must be " + expected);
}
}  // namespace

Json parse_body_object(const std::string& body) {
  // Before parsing: every later step (copies, dumps, template values) recurses once per level.
  if (json_nesting_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    throw invalid_request("JSON nested too deeply: more than " + std::to_string(kMaxJsonDepth) + " levels");
  Json parsed;
  try {
    parsed = Json::parse(body);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw invalid_request(std::string("invalid JSON in request body: ") + e.what());
  }
  if (!parsed.is_object()) throw invalid_request("request body must be a JSON object");
  return parsed;
}

bool has_field(const Json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

bool read_bool(const Json& body, const char* key, bool def) {
  if (!has_field(body, key)) return def;
  const Json& v = body.at(key);
  if (!v.is_boolean()) throw wrong_type(key, "a boolean");
  return v.get<bool>();
}

int64_t read_int(const Json& body, const char* key, int64_t def, int64_t min, int64_t max) {
  if (!has_field(body, key)) return def;
  const Json& v = body.at(key);
  int64_t value = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) throw wrong_type(key, "in range");
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) throw wrong_type(key, "an integer");
    value = static_cast<int64_t>(d);
  } else {
    throw wrong_type(key, "an integer");
  }
  if (value < min || value > max)
    throw invalid_request(std::string("field '") + key + "' must be in [" + std::to_string(min) + ", " +
                          std::to_string(max) + "], got " + std::to_string(value));
  return value;
}

double read_number(const Json& body, const char* key, double def) {
  if (!has_field(body, key)) return def;
  const Json& v = body.at(key);
  if (!v.is_number()) throw wrong_type(key, "a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw wrong_type(key, "a finite number");
  return d;
}

std::string read_string(const Json& body, const char* key, const std::string& def) {
  if (!has_field(body, key)) return def;
  const Json& v = body.at(key);
  if (!v.is_string()) throw wrong_type(key, "a string");
  return v.get<std::string>();
}

std::vector<std::string> read_string_list(const Json& body, const char* key) {
  std::vector<std::string> out;
  if (!has_field(body, key)) return out;
  const Json& v = body.at(key);
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return out;
  }
  if (!v.is_array()) throw wrong_type(key, "a string or an array of strings");
  for (const Json& item : v) {
    if (!item.is_string()) throw wrong_type(key, "a string or an array of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

Json read_object(const Json& body, const char* key) {
  if (!has_field(body, key)) return Json::object();
  const Json& v = body.at(key);
  if (!v.is_object()) throw wrong_type(key, "an object");
  return v;
}

}  // namespace agentkv::server
