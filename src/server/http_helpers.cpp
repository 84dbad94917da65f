#include "server/http_helpers.h"

namespace agentkv::server {

thread_local RequestLog t_request;

void note_timings(const Timings& t) {
  t_request.prompt_n = t.prompt_n;
  t_request.cache_n = t.cache_n;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void send_json(Response& res, const Json& body, int status) {
  res.status = status;
  res.set_content(dump(body), "application/json; charset=utf-8");
}

void send_error(Response& res, const HttpError& e) { send_json(res, error_body(e), http_status(e.type())); }

void check_prompt_fits(const std::vector<Token>& prompt, uint32_t n_ctx) {
  if (prompt.empty()) throw invalid_request("the prompt is empty");
  if (prompt.size() >= n_ctx) throw exceed_context_size(prompt.size(), n_ctx);
}

void session_from_header(const Request& req, CompletionParams& p) {
  if (!p.session_id.empty() || !req.has_header("X-Session-Id")) return;
  p.session_id = req.get_header_value("X-Session-Id");
  if (p.session_id.size() > 256) throw invalid_request("X-Session-Id: longer than 256 bytes");
}

}  // namespace agentkv::server
