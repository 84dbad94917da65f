// The composition root of `agentkv serve`: the server's configuration, its listening socket, the
// engine it loads (model, context, chat template, scheduler, page tiers), the checks every request
// passes before a route sees it, and the route table. The routes themselves live in the files
// http_server_impl.h lists.
#include "server/http_server.h"

#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <set>
#include <thread>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/kv_status.h"
#include "agentkv/page_tiers.h"
#include "agentkv/redis_page_tier.h"
#include "agentkv/retention.h"
#include "agentkv/session_state.h"
#include "server/anthropic_messages.h"
#include "server/http_server_impl.h"
#include "server/json_fields.h"
#include "server/server_log.h"
#include "server/webui_page.h"

namespace agentkv::server {

namespace {

// Connections the kernel queues before accept: a burst of agents connecting at once (nginx's and
// llama-server's default listen queues are 511 / SOMAXCONN).
constexpr int kListenBacklog = 1024;

// "b, a,b" -> {"a", "b"}: a comma-separated flag value as a sorted set of names.
std::vector<std::string> split_list(const std::string& list) {
  std::set<std::string> names;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string name = list.substr(start, end - start);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (!name.empty()) names.insert(name);
    start = end + 1;
  }
  return {names.begin(), names.end()};
}

// Anthropic clients read errors in Anthropic's shape: a llama-server-shaped error answer on an
// Anthropic route is rewritten (same status).
void reshape_anthropic_error(Response& res) {
  if (res.status < 400 || res.body.empty()) return;
  try {
    res.set_content(dump(anthropic_error_body(Json::parse(res.body))), "application/json; charset=utf-8");
  } catch (const Json::exception&) {
  }
}

TransportLimits transport_limits(const ServerConfig& cfg) {
  TransportLimits t;
  t.request_timeout_s = cfg.request_timeout_s;
  t.max_connections = cfg.http_threads > 0 ? cfg.http_threads : 256;
  return t;
}

}  // namespace

HttpServer::HttpServer(const ServerConfig& cfg) : cfg_(cfg), svr_(transport_limits(cfg)) {
  // --alias a,b,c: every name is the model's; responses use the first in sorted order (llama-server).
  model_aliases_ = split_list(cfg.alias);
  model_tags_ = split_list(cfg.tags);
  model_name_ = model_aliases_.empty() ? std::filesystem::path(cfg.model_path).filename().string() : model_aliases_[0];
  origin_policy_.bind_host = cfg.host;
  origin_policy_.allowed_hosts = cfg.allowed_hosts;
  origin_policy_.cors_origins = cfg.cors_origins;
  request_defaults_.n_predict = cfg.n_predict;
  request_defaults_.spec_n_max = cfg.spec_n_max;
  request_defaults_.spec_n_min = cfg.spec_n_min;
  request_defaults_.spec_sources = cfg.spec_sources;
  request_defaults_.spec_p_min = cfg.spec_p_min;
  request_defaults_.spec_adaptive = cfg.spec_adaptive;
  request_defaults_.verbose = cfg.verbose;  // --verbose: every OpenAI response carries __verbose (llama-server)
  request_defaults_.sampling.temperature = cfg.temperature;
  request_defaults_.sampling.seed = cfg.seed < 0 ? kRandomSeed : static_cast<uint32_t>(cfg.seed);
  if (!cfg.slot_save_path.empty()) {
    state_folder_ = std::make_unique<StateFolder>(cfg.slot_save_path);
    if (state_folder_->stale_removed() > 0)
      log_line("slot save path: removed %zu temporary files left by interrupted saves", state_folder_->stale_removed());
  }
  svr_.set_payload_max_length(cfg.max_body_bytes);
  svr_.set_default_headers({{"Server", "agentkv"}});
  routes();
}

int HttpServer::bind() {
  // httplib's default options add SO_REUSEPORT, with which a second server on a busy port also
  // listens and the kernel splits the connections between the two: only SO_REUSEADDR (a restart
  // need not wait for TIME_WAIT), so a busy port fails to bind. The callback also hands us the
  // listening socket: Debian's compiled httplib listens with a backlog of 5, which a burst of
  // agents overflows, so it is raised once bound (listen() again on Linux resizes the queue).
  int listening_fd = -1;
  svr_.set_socket_options([&listening_fd](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening_fd = sock;
  });
  const int port = cfg_.port == 0 ? svr_.bind_to_any_port(cfg_.host)
                                  : (svr_.bind_to_port(cfg_.host, cfg_.port) ? cfg_.port : -1);
  if (port >= 0 && listening_fd >= 0) ::listen(listening_fd, kListenBacklog);
  return port;
}

bool HttpServer::load() {
  const auto t0 = Clock::now();
  auto seconds_since = [&](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  try {
    auto e = std::make_unique<Engine>();
    log_line("loading model %s ...", cfg_.model_path.c_str());
    e->model = Model::load(cfg_.model_path);
    const ModelConfig& mc = e->model->config();
    log_line("model loaded in %.2f s: %s, %lld-token vocabulary, %d layers, trained context %lld", seconds_since(t0),
             mc.arch_key.c_str(), static_cast<long long>(mc.n_vocab), mc.n_layer, static_cast<long long>(mc.n_ctx_train));

    ContextParams cp;
    cp.n_ctx = cfg_.n_ctx > 0 ? cfg_.n_ctx : static_cast<uint32_t>(mc.n_ctx_train > 0 ? mc.n_ctx_train : 4096);
    cp.n_ubatch = cfg_.n_ubatch;
    cp.n_seq_max = static_cast<uint32_t>(cfg_.n_slots) + 1;  // + the prefix index's holder sequence
    cp.n_threads = cfg_.n_threads > 0 ? cfg_.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    cp.kv = cfg_.kv;
    cp.kv.unified = true;  // every slot may use the whole context (llama-server with -np auto)
    cp.embeddings = cfg_.embeddings;
    if (cfg_.context_shift && !cfg_.embeddings) cp.kv.query_window = kSnapKvWindow;  // what the snapkv policy scores with
    const uint32_t n_positions = cp.n_ctx;
    // --cache-ram: room for cached pages beyond the context, as KV cells (untouched cells cost
    // no memory); pages no slot uses are evicted only when all of it is taken.
    const uint32_t cache_cells = kv_cells_for_bytes(*e->model, cp, cfg_.cache_ram_bytes);
    cp.n_ctx = n_positions + cache_cells;
    log_line("creating context: n_ctx %u shared by %d slots (+ %u cells for cached pages), n_ubatch %u, K %s, V %s, "
             "%d threads", n_positions, cfg_.n_slots, cache_cells, cp.n_ubatch,
             std::string(ggml_type_name(cp.kv.type_k)).c_str(), std::string(ggml_type_name(cp.kv.type_v)).c_str(),
             cp.n_threads);
    e->ctx = std::make_unique<Context>(*e->model, cp);
    const KvStatus kv = kv_status(*e->ctx);
    if (kv.windowed) {
      const std::string place = kv.tail_dir.empty() ? "in RAM" : "in files mapped from " + kv.tail_dir;
      log_line("KV window: %u hot cells, the rest in a %s/%s tail %s; attention reads the tail in place (merged by "
               "log-sum-exp when its type differs)", kv.hot_cells, std::string(ggml_type_name(kv.tail_type_k)).c_str(),
               std::string(ggml_type_name(kv.tail_type_v)).c_str(),
               place.c_str());
      if (kv.tail_heads_kept < kv.tail_heads_total)
        log_line("KV retrieval heads: the tail keeps the rows of %u of %u KV heads (%s, by the retrieval probe); "
                 "the others attend over the %u-cell window alone", kv.tail_heads_kept, kv.tail_heads_total,
                 kv.tail_heads.empty() ? "none" : kv.tail_heads.c_str(), kv.hot_cells);
    }
    if (kv.rotated)
      log_line("KV rows Hadamard-rotated: %s (--kv-rotation %s)", kv.rotation.c_str(), kv_rotation_mode_name(cp.kv.rotation));
    if (kv.window_cells > 0)
      log_line("sliding-window layers keep only each sequence's window: %u cells (%.1f MiB) beside the main cache's "
               "%.1f MiB; sequences resume where a snapshot is (--swa-full keeps every row)",
               kv.window_cells, kv.window_storage_bytes / 1048576.0, kv.storage_bytes / 1048576.0);

    const Tokenizer& tok = e->model->tokenizer();
    try {
      // --chat-template-file, or --chat-template (a built-in name or a template), replaces the
      // model's template; a bad one fails the start.
      if (!cfg_.chat_template_source.empty())
        e->chat = std::make_unique<ChatFormatter>(tok, cfg_.chat_template_source);
      else
        e->chat = std::make_unique<ChatFormatter>(tok);
    } catch (const Error& err) {
      if (!cfg_.chat_template_source.empty()) throw Error(std::string("--chat-template-file: ") + err.what());
      log_line("warning: the model's chat template is not supported (%s); using ChatML", err.what());
      e->chat = std::make_unique<ChatFormatter>(tok, "");
    }

    if (!cfg_.mmproj_path.empty()) {
      const auto t_vision = Clock::now();
      e->vision = VisionEncoder::load(cfg_.mmproj_path, cp.n_threads);
      e->vision->check_language_model(*e->model);
      e->vision->set_cache_bytes(cfg_.image_cache_bytes);
      log_line("vision projector %s loaded in %.2f s: images in chat requests (encoder cache %.0f MiB)",
               std::filesystem::path(cfg_.mmproj_path).filename().string().c_str(), seconds_since(t_vision),
               cfg_.image_cache_bytes / 1048576.0);
    }
    if (!cfg_.draft_model_path.empty()) {
      const auto t_draft = Clock::now();
      e->draft_model = Model::load(cfg_.draft_model_path);
      DraftModelParams dp;
      dp.n_seq = static_cast<uint32_t>(cfg_.n_slots);
      dp.n_ctx = n_positions;  // the slots share it, as they share the model's
      dp.n_ubatch = cp.n_ubatch;
      dp.n_threads = cfg_.draft_threads > 0 ? cfg_.draft_threads : cp.n_threads;
      dp.type_k = cfg_.draft_type_k;
      dp.type_v = cfg_.draft_type_v;
      e->drafter = std::make_unique<DraftModel>(*e->draft_model, *e->model, dp);
      log_line("draft model %s loaded in %.2f s: %s, %d layers (speculative decoding draft-simple, p_min %.2f)",
               std::filesystem::path(cfg_.draft_model_path).filename().string().c_str(), seconds_since(t_draft),
               e->draft_model->config().arch_key.c_str(), e->draft_model->config().n_layer, cfg_.spec_p_min);
    }
    SchedulerConfig sc;
    sc.n_slots = cfg_.n_slots;
    sc.n_ctx = n_positions;
    sc.n_batch = cp.n_ubatch;
    sc.slot_similarity = cfg_.slot_similarity;
    sc.checkpoint_bytes = cfg_.checkpoint_bytes;
    sc.model_fingerprint = model_fingerprint(*e->model);
    // Pages holding image rows depend on the projector too (their ids are the images' content).
    if (e->vision) sc.model_fingerprint ^= e->vision->fingerprint() * 0x9E3779B97F4A7C15ull;
    sc.multimodal = e->vision != nullptr;
    sc.share_prefixes = cfg_.share_prefixes;
    sc.embeddings = cfg_.embeddings;
    sc.pooling = embedding_pooling(cfg_.pooling, model_pooling_type(*e->model));
    if (sc.embeddings) log_line("embedding server: %s pooling", pooling_name(sc.pooling));
    sc.context_shift = cfg_.context_shift && !cfg_.embeddings;
    sc.kv_evict = parse_evict_policy(cfg_.kv_evict).value_or(EvictPolicy::Positional);
    sc.kv_budget = cfg_.kv_budget;
    if (sc.context_shift && !e->ctx->can_shift()) {  // llama-server disables it the same way
      log_line("warning: --context-shift: this model's memory cannot shift (a recurrent state cannot forget); disabled");
      sc.context_shift = false;
    } else if (sc.context_shift) {
      log_line("context shift on: a generation reaching %u positions drops part of its sequence (n_keep / n_discard, "
               "policy %s by default)",
               sc.kv_budget > 0 ? std::min(sc.kv_budget, n_positions) : n_positions, evict_policy_name(sc.kv_evict));
    }
    e->scheduler = std::make_unique<Scheduler>(*e->ctx, tok, sc);
    if (e->drafter) e->scheduler->set_draft_model(e->drafter.get());
    if (!cfg_.cache_redis.empty() || !cfg_.cache_dir.empty() || cfg_.cache_warm_bytes > 0) {
      // Hybrid models' recurrent snapshots go to the same tiers as their pages.
      if (!cfg_.cache_redis.empty()) {
        RedisTierConfig rc = parse_redis_url(cfg_.cache_redis);
        rc.log = [](const std::string& line) { log_line("%s", line.c_str()); };
        e->redis_tier = open_redis_page_tier(std::move(rc));
      }
      LocalTierOptions lo;
      lo.warm_bytes = cfg_.cache_warm_bytes;
      lo.warm_type = cfg_.cache_warm_type;
      lo.disk_dir = cfg_.cache_dir;
      lo.disk_bytes = cfg_.cache_dir_bytes;
      e->tiers = std::make_unique<PageTiers>(*e->ctx, lo, std::vector<PageTier*>{e->redis_tier.get()});
      for (const std::string& line : e->tiers->description()) log_line("%s", line.c_str());
      if (e->redis_tier) log_line("shared page tier: %s", cfg_.cache_redis.c_str());
      e->scheduler->set_page_tier(e->tiers->stack());
    }
    e->scheduler->start();

    std::lock_guard<std::mutex> lock(shutdown_mutex_);
    if (shut_down_) {
      e->scheduler->stop();
      return false;
    }
    engine_ = std::move(e);
    ready_.store(true, std::memory_order_release);
    log_line("server ready in %.2f s: model '%s', %d slots", seconds_since(t0), model_name_.c_str(), cfg_.n_slots);
    return true;
  } catch (const std::exception& err) {
    log_line("error: cannot load the model: %s", err.what());
    return false;
  }
}

void HttpServer::shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (shut_down_) return;
  shut_down_ = true;
  if (ready_.load(std::memory_order_acquire)) engine_->scheduler->stop();
  svr_.stop();
}

HttpServer::Handler HttpServer::guarded(Handler h) {
  return [h = std::move(h)](const Request& req, Response& res) {
    try {
      h(req, res);
    } catch (const HttpError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, HttpError(ErrorType::InvalidRequest, e.what()));
    } catch (const Json::exception& e) {
      // Only request JSON reaches nlohmann's checked accessors: a value of an unexpected type or
      // range is the client's mistake (the readers in json_fields.h name the field first).
      send_error(res, HttpError(ErrorType::InvalidRequest, std::string("invalid request: ") + e.what()));
    } catch (const std::exception& e) {
      send_error(res, HttpError(ErrorType::Server, e.what()));
    }
  };
}

bool HttpServer::authorized(const Request& req) const {
  // Both headers are compared whole and in constant time, so that timing tells nothing of the key.
  const bool bearer = constant_time_equal(req.get_header_value("Authorization"), "Bearer " + cfg_.api_key);
  const bool x_api_key = constant_time_equal(req.get_header_value("X-Api-Key"), cfg_.api_key);
  return bearer || x_api_key;
}

httplib::Server::HandlerResponse HttpServer::pre_routing(const Request& req, Response& res) {
  t_request = RequestLog{Clock::now()};
  using HR = httplib::Server::HandlerResponse;
  const bool is_post = req.method == "POST";
  const bool chunked = req.has_header("Transfer-Encoding");
  const bool has_length = req.has_header("Content-Length");
  std::optional<uint64_t> length = has_length ? parse_content_length(req.get_header_value("Content-Length")) : 0;
  // Anything refused here leaves the body unread: the connection closes after the answer.
  auto refuse = [&](ErrorType type, const std::string& message, int status = 0) {
    HttpError e(type, message);
    Json body = error_body(e);
    if (status) body["error"]["code"] = status;
    send_json(res, body, status ? status : http_status(type));
    if (is_anthropic_path(req.path)) reshape_anthropic_error(res);
    if (is_post || chunked || (length && *length > 0) || !length) GuardedServer::close_after_response(res);
    return HR::Handled;
  };

  // Framing first: a length that is not one, two lengths, or a transfer coding httplib would not
  // decode are answered at once (no waiting for a body that cannot be delimited).
  if (has_length && (!length || req.get_header_value_count("Content-Length") != 1))
    return refuse(ErrorType::InvalidRequest, "invalid Content-Length header");
  if (chunked && (has_length || req.get_header_value_count("Transfer-Encoding") != 1 ||
                  std::string_view(req.get_header_value("Transfer-Encoding")) != "chunked"))
    return refuse(ErrorType::InvalidRequest, "unsupported Transfer-Encoding: only 'chunked', without Content-Length");
  if (length && *length > cfg_.max_body_bytes)
    return refuse(ErrorType::PayloadTooLarge,
                  "request body too large: the limit is " + std::to_string(cfg_.max_body_bytes) + " bytes");

  // Browsers: Host must name this server (DNS rebinding), Origin must be this server or --cors.
  if (!host_allowed(origin_policy_, req.get_header_value("Host"), req.has_header("Host")))
    return refuse(ErrorType::Permission, "Host header not allowed (start the server with --allowed-host to accept it)");
  const std::string origin = req.get_header_value("Origin");
  if (req.has_header("Origin")) {
    if (!origin_allowed(origin_policy_, origin, req.get_header_value("Host")))
      return refuse(ErrorType::Permission, "cross-origin request refused (start the server with --cors ORIGIN to allow it)");
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  if (req.method == "OPTIONS") {  // CORS preflight (an allowed origin got here); carries no API key
    res.status = 200;                // llama-server's answer: 200, empty body
    res.set_header("Access-Control-Allow-Methods", "GET, POST");
    // The headers asked for are allowed (llama-server answers "*", which does not cover
    // Authorization in browsers); names only, anything else gets the list agentkv reads.
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    const bool names_only = !asked.empty() && asked.size() <= 1024 &&
                            asked.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_, ") ==
                                std::string::npos;
    res.set_header("Access-Control-Allow-Headers", names_only ? asked : "Authorization, Content-Type, X-Api-Key");
    if (req.has_header("Origin")) res.set_header("Access-Control-Allow-Credentials", "true");
    res.set_header("Access-Control-Max-Age", "600");
    if (chunked || (length && *length > 0)) GuardedServer::close_after_response(res);
    return HR::Handled;
  }
  if (!is_post && req.method != "GET" && req.method != "HEAD")
    return refuse(ErrorType::InvalidRequest, "method " + req.method.substr(0, 16) + " not allowed", 405);

  // llama-server's public endpoints: health and the model list need no API key.
  const bool public_path = req.path == "/health" || req.path == "/v1/health" || req.path == "/models" || req.path == "/v1/models";
  // The web UI's page is public (as llama-server's UI assets): it holds no data, and asks for the
  // key itself; it loads while the model does.
  const bool ui_page = cfg_.webui && !is_post && (req.path == "/" || req.path == "/index.html");
  if (!public_path && !ui_page && !cfg_.api_key.empty() && !authorized(req))
    return refuse(ErrorType::Authentication, "Invalid API Key");
  // JSON endpoints take JSON only: a form or text/plain body is what a foreign page can send
  // without a CORS preflight.
  if (is_post && (chunked || *length > 0) && !is_json_content_type(req.get_header_value("Content-Type")))
    return refuse(ErrorType::InvalidRequest, "Content-Type must be application/json", 415);
  // GET bodies are not read: the connection is not reused after one.
  if (!is_post && (chunked || *length > 0)) GuardedServer::close_after_response(res);
  if (!ui_page && cfg_.sleep_idle_seconds >= 0 && enter_request(req, res)) return HR::Handled;
  if (!ui_page && !ready_.load(std::memory_order_acquire)) {
    send_error(res, HttpError(ErrorType::Unavailable, "Loading model"));
    if (is_anthropic_path(req.path)) reshape_anthropic_error(res);
    if (is_post) GuardedServer::close_after_response(res);
    return HR::Handled;
  }
  return HR::Unhandled;
}

httplib::Server::HandlerWithContentReader HttpServer::with_body(Handler h) const {
  return [this, h = std::move(h)](const Request& req, Response& res, const httplib::ContentReader& reader) {
    std::string body;
    const bool chunked = req.has_header("Transfer-Encoding");
    if (chunked || parse_content_length(req.get_header_value("Content-Length")).value_or(0) > 0) {
      // Counted after decoding (chunked, gzip): no encoding lets a body past the limit.
      bool too_large = false;
      const bool ok = reader([&](const char* data, size_t n) {
        if (n > cfg_.max_body_bytes - body.size()) {
          too_large = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (!ok) {
        GuardedServer::close_after_response(res);
        if (too_large)
          send_error(res, HttpError(ErrorType::PayloadTooLarge, "request body too large: the limit is " +
                                                                    std::to_string(cfg_.max_body_bytes) + " bytes"));
        else if (GuardedServer::request_timed_out())
          send_json(res, Json{{"error", {{"code", 408}, {"message", "request body not received in time"},
                                         {"type", "invalid_request_error"}}}}, 408);
        else
          send_error(res, invalid_request("the request body could not be read"));
        return;
      }
    }
    GuardedServer::request_read();
    // httplib's Request is the caller's own non-const object; the handlers read the body from it.
    const_cast<Request&>(req).body = std::move(body);
    h(req, res);
  };
}

void HttpServer::routes() {
  svr_.set_pre_routing_handler([this](const Request& req, Response& res) { return pre_routing(req, res); });

  // Errors httplib answers by itself (no route, body over the limit) get the JSON error shape.
  svr_.set_error_handler([this](const Request&, Response& res) {
    if (!res.body.empty()) return;
    const int status = res.status;
    std::string message = status >= 500 ? "internal server error" : "bad request";
    ErrorType type = status >= 500 ? ErrorType::Server : ErrorType::InvalidRequest;
    if (GuardedServer::request_timed_out()) {
      res.status = 408;
      message = "request not received within " + std::to_string(static_cast<int>(cfg_.request_timeout_s)) + " s";
    } else if (status == 404) {
      type = ErrorType::NotFound;
      message = "File Not Found";
    } else if (status == 413) {
      type = ErrorType::PayloadTooLarge;
      message = "request body too large: the limit is " + std::to_string(cfg_.max_body_bytes) + " bytes";
    }
    Json err = error_object(HttpError(type, message));
    err["code"] = res.status;
    send_json(res, Json{{"error", err}}, res.status);
  });
  svr_.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string message = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_error(res, HttpError(ErrorType::Server, message));
  });
  svr_.set_logger([server = this](const Request& req, const Response& res) {
    const RequestLog& r = t_request;
    const double ms =
        r.start == Clock::time_point{} ? 0.0 : std::chrono::duration<double, std::milli>(Clock::now() - r.start).count();
    if (r.prompt_n >= 0)
      log_line("request: %s %s %d prompt_n=%lld cache_n=%lld %.1f ms", req.method.c_str(), req.path.c_str(), res.status,
               static_cast<long long>(r.prompt_n), static_cast<long long>(r.cache_n), ms);
    else
      log_line("request: %s %s %d %.1f ms", req.method.c_str(), req.path.c_str(), res.status, ms);
    if (r.in_flight) server->leave_request();
    t_request = RequestLog{};
  });

  auto health = guarded([](const Request&, Response& res) { send_json(res, Json{{"status", "ok"}}); });
  // Every POST route reads its body itself (with_body); one that matches no route is not read.
  auto post = [this](const std::string& pattern, Handler h) {
    post_routes_[pattern] = h;
    svr_.Post(pattern, with_body(std::move(h)));
  };
  svr_.Get("/health", health);
  svr_.Get("/v1/health", health);
  if (cfg_.webui) {
    auto page = [](const Request&, Response& res) {
      // Inline script and style only, requests to this origin only, never framed.
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                     "frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      const std::string_view html = webui_page();
      res.set_content(html.data(), html.size(), "text/html; charset=utf-8");
    };
    svr_.Get("/", page);
    svr_.Get("/index.html", page);
  }
  svr_.Get("/props", guarded([this](const Request&, Response& res) { props(res); }));
  svr_.Get("/slots", guarded([this](const Request& req, Response& res) { slots(req, res); }));
  svr_.Get("/metrics", guarded([this](const Request&, Response& res) { metrics(res); }));
  auto list_models = guarded([this](const Request&, Response& res) { models(res); });
  svr_.Get("/models", list_models);
  svr_.Get("/v1/models", list_models);

  auto native = guarded([this](const Request& req, Response& res) { completion(req, res, ResponseKind::Native); });
  post("/completion", native);
  post("/completions", native);
  post("/v1/completions",
       guarded([this](const Request& req, Response& res) { completion(req, res, ResponseKind::OaiCompletion); }));
  auto chat = guarded([this](const Request& req, Response& res) { completion(req, res, ResponseKind::OaiChat); });
  post("/chat/completions", chat);
  post("/v1/chat/completions", chat);
  // Anthropic's API answers errors in its own shape.
  auto anthropic = [](Handler h) {
    return guarded([h = std::move(h)](const Request& req, Response& res) {
      h(req, res);
      reshape_anthropic_error(res);
    });
  };
  auto messages = guarded([this](const Request& req, Response& res) { completion(req, res, ResponseKind::Anthropic); });
  post("/v1/messages", anthropic(messages));
  post("/v1/messages/count_tokens",
       anthropic(guarded([this](const Request& req, Response& res) { count_tokens(req, res, ResponseKind::Anthropic); })));
  auto chat_tokens = guarded([this](const Request& req, Response& res) { count_tokens(req, res, ResponseKind::OaiChat); });
  post("/chat/completions/input_tokens", chat_tokens);
  post("/v1/chat/completions/input_tokens", chat_tokens);
  auto responses_tokens = guarded([this](const Request& req, Response& res) { count_tokens(req, res, ResponseKind::Responses); });
  post("/responses/input_tokens", responses_tokens);
  post("/v1/responses/input_tokens", responses_tokens);
  post("/v1/responses", guarded([this](const Request& req, Response& res) { completion(req, res, ResponseKind::Responses); }));
  post("/responses", guarded([this](const Request& req, Response& res) { completion(req, res, ResponseKind::Responses); }));
  auto native_embeddings = guarded([this](const Request& req, Response& res) { embeddings(req, res, EmbeddingApi::Native); });
  post("/embedding", native_embeddings);
  post("/embeddings", native_embeddings);
  post("/v1/embeddings",
       guarded([this](const Request& req, Response& res) { embeddings(req, res, EmbeddingApi::OpenAi); }));
  // Reranking needs a classifier head (llama.cpp's pooling "rank"), which no model agentkv loads has.
  auto rerank = guarded([](const Request&, Response&) {
    throw HttpError(ErrorType::NotSupported,
                    "This server does not support reranking: it needs a model with a classification head "
                    "(pooling 'rank'), which agentkv does not load");
  });
  for (const char* path : {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"}) post(path, rerank);
  post("/infill", guarded([this](const Request& req, Response& res) { infill(req, res); }));
  post("/tokenize", guarded([this](const Request& req, Response& res) { tokenize(req, res); }));
  auto lookup_route = guarded([this](const Request& req, Response& res) { cache_lookup(req, res); });
  post("/v1/cache/lookup", lookup_route);
  post("/cache/lookup", lookup_route);
  post("/detokenize", guarded([this](const Request& req, Response& res) { detokenize(req, res); }));
  auto apply = guarded([this](const Request& req, Response& res) { apply_template(req, res); });
  post("/apply-template", apply);
  post("/apply_template", apply);
  post(R"(/slots/([^/]*))", guarded([this](const Request& req, Response& res) { slot_action(req, res); }));
  auto prefill_route = guarded([this](const Request& req, Response& res) { prefill(req, res); });
  post("/v1/prefill", prefill_route);
  post("/prefill", prefill_route);
  if (!cfg_.predict_route.empty()) {
    if (post_routes_.count(cfg_.predict_route))
      throw Error("AIP_PREDICT_ROUTE " + cfg_.predict_route + " is one of the server's own routes");
    // An instance names its route by path or by llama-server's camelCase alias of the path
    // ("/v1/chat/completions" -> "chatCompletions"; the first path in order wins a shared alias).
    for (const auto& [path, handler] : post_routes_) {
      if (path.find('(') != std::string::npos) continue;  // routes with parameters take none here
      std::string alias;
      bool upper = false;
      for (char c : std::string_view(path).substr(path.rfind("/v1/", 0) == 0 ? 3 : 0)) {
        if (c == '/' || c == '-' || c == '_') {
          upper = !alias.empty();
        } else {
          alias += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
          upper = false;
        }
      }
      route_aliases_.emplace(alias, path);
    }
    post(cfg_.predict_route, guarded([this](const Request& req, Response& res) { predict(req, res); }));
    if (!cfg_.predict_health_route.empty()) svr_.Get(cfg_.predict_health_route, health);
  }
  svr_.Post(".*", [](const Request&, Response& res, const httplib::ContentReader&) {
    GuardedServer::close_after_response(res);
    send_json(res, error_body(HttpError(ErrorType::NotFound, "File Not Found")), 404);
  });
}

int run_server(const ServerConfig& cfg) {
  std::signal(SIGPIPE, SIG_IGN);  // a client that disconnects must not kill the server
  // SIGINT / SIGTERM are taken by one thread (sigwait), so every other thread blocks them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  HttpServer server(cfg);
  const int port = server.bind();
  if (port < 0) {
    log_line("error: cannot listen on %s:%d: the port is in use (another server?) or not available to this user",
             cfg.host.c_str(), cfg.port);
    return 1;
  }
  log_line("listening on http://%s:%d", cfg.host.c_str(), port);
  std::thread http([&] { server.listen(); });
  server.wait_until_listening();
  std::atomic<bool> exiting{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (!exiting.load()) log_line("signal %d: shutting down", sig);
    server.shutdown();
  });

  const bool loaded = server.load();
  if (!loaded) server.shutdown();
  std::thread sleeper;
  if (loaded && cfg.sleep_idle_seconds >= 0)
    sleeper = std::thread([&] {
      while (!exiting.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        server.sleep_if_idle();
      }
    });
  http.join();
  exiting.store(true);
  if (sleeper.joinable()) sleeper.join();
  pthread_kill(signals.native_handle(), SIGTERM);  // ends the sigwait if no signal came
  signals.join();
  log_line("server stopped");
  return loaded ? 0 : 1;
}

}  // namespace agentkv::server
