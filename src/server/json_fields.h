// Strict readers for fields of a JSON request body. An absent or null field gives the default
// (as in llama-server); a field of the wrong type or out of range is refused with an
// invalid_request_error that names the field (llama-server would silently use the default).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace agentkv::server {

using Json = nlohmann::ordered_json;

// Parses a request body; malformed JSON or a non-object is an invalid_request_error.
Json parse_body_object(const std::string& body);

bool has_field(const Json& body, const char* key);  // present and not null
bool read_bool(const Json& body, const char* key, bool def);
// Integers: a JSON integer, or a float with an integral value (1.0); range checked.
int64_t read_int(const Json& body, const char* key, int64_t def, int64_t min = INT32_MIN, int64_t max = INT32_MAX);
double read_number(const Json& body, const char* key, double def);
std::string read_string(const Json& body, const char* key, const std::string& def);
// A string or an array of strings (OpenAI's "stop").
std::vector<std::string> read_string_list(const Json& body, const char* key);
// A JSON object (or the default when absent).
Json read_object(const Json& body, const char* key);

}  // namespace agentkv::server
