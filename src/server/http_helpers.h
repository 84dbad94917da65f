// What the route files of HttpServer (http_server_impl.h) share: JSON answers, the request log's
// facts, the checks every prompt-taking route makes. Internal to the server's routes.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "server/completion_params.h"
#include "server/httplib_include.h"
#include "server/server_error.h"
#include "server/task.h"

namespace agentkv::server {

using Clock = std::chrono::steady_clock;
using httplib::Request;
using httplib::Response;

// The "build_info" of /props and the "system_fingerprint" of OpenAI answers.
inline constexpr const char* kBuildInfo = "agentkv";
// How long a waiting handler sleeps on its task's channel before it checks the client is still there.
inline constexpr auto kPollInterval = std::chrono::milliseconds(100);

// Facts for the one-line request log. httplib runs routing, content providers and the logger of
// a request on one thread, so handlers leave them here for the logger.
struct RequestLog {
  Clock::time_point start{};
  int64_t prompt_n = -1;
  int64_t cache_n = -1;
  bool in_flight = false;  // counted in HttpServer::in_flight_ (--sleep-idle-seconds)
  bool activity = false;   // keeps the server awake (observers such as /health do not)
};
extern thread_local RequestLog t_request;

// The request log's prompt_n and cache_n, from a task's timings.
void note_timings(const Timings& t);

// Generated text may hold invalid UTF-8 (a token can end inside a character); such bytes become
// U+FFFD instead of failing the response.
std::string dump(const Json& j);

void send_json(Response& res, const Json& body, int status = 200);
void send_error(Response& res, const HttpError& e);

// A tokenized prompt must hold at least one token and leave room in the context.
void check_prompt_fits(const std::vector<Token>& prompt, uint32_t n_ctx);

// A router pins sessions by a header (nginx: hash $http_x_session_id consistent), so the header
// names the session too when the body does not.
void session_from_header(const Request& req, CompletionParams& p);

}  // namespace agentkv::server
