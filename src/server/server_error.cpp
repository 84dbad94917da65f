#include "server/server_error.h"

namespace agentkv::server {

int http_status(ErrorType type) {
  switch (type) {
    case ErrorType::InvalidRequest: return 400;
    case ErrorType::Authentication: return 401;
    case ErrorType::Permission: return 403;
    case ErrorType::NotFound: return 404;
    case ErrorType::PayloadTooLarge: return 413;
    case ErrorType::Server: return 500;
    case ErrorType::NotSupported: return 501;
    case ErrorType::Unavailable: return 503;
    case ErrorType::ExceedContextSize: return 400;
  }
  return 500;
}

const char* error_type_name(ErrorType type) {
  switch (type) {
    case ErrorType::InvalidRequest: return "invalid_request_error";
    case ErrorType::Authentication: return "authentication_error";
    case ErrorType::Permission: return "permission_error";
    case ErrorType::NotFound: return "not_found_error";
    case ErrorType::PayloadTooLarge: return "invalid_request_error";
    case ErrorType::Server: return "server_error";
    case ErrorType::NotSupported: return "not_supported_error";
    case ErrorType::Unavailable: return "unavailable_error";
    case ErrorType::ExceedContextSize: return "exceed_context_size_error";
  }
  return "server_error";
}

nlohmann::ordered_json error_object(const HttpError& e) {
  nlohmann::ordered_json obj = {
      {"code", http_status(e.type())},
      {"message", e.what()},
      {"type", error_type_name(e.type())},
  };
  for (const auto& [key, value] : e.extra().items()) obj[key] = value;
  return obj;
}

nlohmann::ordered_json error_body(const HttpError& e) { return {{"error", error_object(e)}}; }

}  // namespace agentkv::server
