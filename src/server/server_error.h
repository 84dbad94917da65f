// Errors the HTTP server answers with, shaped as llama-server shapes them:
// {"error": {"code": <http status>, "message": "...", "type": "invalid_request_error"}}.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace agentkv::server {

enum class ErrorType {
  InvalidRequest,     // 400 invalid_request_error
  Authentication,     // 401 authentication_error
  Permission,         // 403 permission_error
  NotFound,           // 404 not_found_error
  PayloadTooLarge,    // 413 invalid_request_error (httplib refuses the body before any handler runs)
  Server,             // 500 server_error
  NotSupported,       // 501 not_supported_error
  Unavailable,        // 503 unavailable_error
  ExceedContextSize,  // 400 exceed_context_size_error
};

int http_status(ErrorType type);
const char* error_type_name(ErrorType type);

// A refused request. `extra` fields are merged into the error object (llama-server adds
// n_prompt_tokens and n_ctx to exceed_context_size_error).
class HttpError : public std::runtime_error {
 public:
  HttpError(ErrorType type, const std::string& message, nlohmann::ordered_json extra = nlohmann::ordered_json::object())
      : std::runtime_error(message), type_(type), extra_(std::move(extra)) {}
  ErrorType type() const { return type_; }
  const nlohmann::ordered_json& extra() const { return extra_; }

 private:
  ErrorType type_;
  nlohmann::ordered_json extra_;
};

// The inner error object {"code", "message", "type", ...extra}.
nlohmann::ordered_json error_object(const HttpError& e);
// The whole response body {"error": {...}}.
nlohmann::ordered_json error_body(const HttpError& e);

inline HttpError invalid_request(const std::string& message) { return HttpError(ErrorType::InvalidRequest, message); }

// A prompt of n_prompt_tokens that does not fit in n_ctx cells, worded and shaped as llama-server's.
inline HttpError exceed_context_size(size_t n_prompt_tokens, uint32_t n_ctx) {
  return HttpError(ErrorType::ExceedContextSize,
                   "request (" + std::to_string(n_prompt_tokens) + " tokens) exceeds the available context size (" +
                       std::to_string(n_ctx) + " tokens), try increasing it",
                   nlohmann::ordered_json{{"n_prompt_tokens", n_prompt_tokens}, {"n_ctx", n_ctx}});
}

}  // namespace agentkv::server
