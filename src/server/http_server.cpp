#include "server/http_server.h"

#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <memory>
#include <cctype>
#include <condition_variable>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/page_tiers.h"
#include "agentkv/redis_page_tier.h"
#include "agentkv/retention.h"
#include "agentkv/session_state.h"
#include "agentkv/numerics.h"
#include "server/agent_request.h"
#include "server/anthropic_messages.h"
#include "server/base64.h"
#include "server/chat_formatter.h"
#include "server/completion_params.h"
#include "server/connection_probe.h"
#include "server/http_transport.h"
#include "server/httplib_include.h"
#include "server/json_fields.h"
#include "server/metrics.h"
#include "server/openai_responses.h"
#include "server/request_guard.h"
#include "server/prompt_align.h"
#include "server/embeddings.h"
#include "server/infill.h"
#include "server/response_format.h"
#include "server/scheduler.h"
#include "server/server_error.h"
#include "server/server_log.h"
#include "server/state_folder.h"
#include "server/utf8.h"
#include "server/webui_page.h"

namespace agentkv::server {

namespace {

using Clock = std::chrono::steady_clock;
using httplib::Request;
using httplib::Response;

constexpr const char* kBuildInfo = "agentkv";
// Connections the kernel queues before accept: a burst of agents connecting at once (nginx's and
// llama-server's default listen queues are 511 / SOMAXCONN).
constexpr int kListenBacklog = 1024;

// A router pins sessions by a header (nginx: hash $http_x_session_id consistent), so the header
// names the session too when the body does not.
void session_from_header(const Request& req, CompletionParams& p) {
  if (!p.session_id.empty() || !req.has_header("X-Session-Id")) return;
  p.session_id = req.get_header_value("X-Session-Id");
  if (p.session_id.size() > 256) throw invalid_request("X-Session-Id: longer than 256 bytes");
}

constexpr auto kPollInterval = std::chrono::milliseconds(100);
// OpenAI's `n` and a list of prompts: completions one request may ask for.
constexpr int64_t kMaxChoices = 64;
constexpr size_t kMaxTasksPerRequest = 128;
constexpr size_t kMaxPredictInstances = 128;  // llama-server's bound

// Facts for the one-line request log. httplib runs routing, content providers and the logger of
// a request on one thread, so handlers leave them here for the logger.
struct RequestLog {
  Clock::time_point start{};
  int64_t prompt_n = -1;
  int64_t cache_n = -1;
  bool in_flight = false;  // counted in HttpServer::in_flight_ (--sleep-idle-seconds)
  bool activity = false;   // keeps the server awake (observers such as /health do not)
};
thread_local RequestLog t_request;

// A tokenized prompt must hold at least one token and leave room in the context.
void check_prompt_fits(const std::vector<Token>& prompt, uint32_t n_ctx) {
  if (prompt.empty()) throw invalid_request("the prompt is empty");
  if (prompt.size() >= n_ctx) throw exceed_context_size(prompt.size(), n_ctx);
}

// Generated text may hold invalid UTF-8 (a token can end inside a character); such bytes become
// U+FFFD instead of failing the response.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void send_json(Response& res, const Json& body, int status = 200) {
  res.status = status;
  res.set_content(dump(body), "application/json; charset=utf-8");
}

void send_error(Response& res, const HttpError& e) { send_json(res, error_body(e), http_status(e.type())); }

std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }
// Anthropic's and the Responses API's events name themselves: "event: TYPE" before the data.
std::string named_sse(const Json& j) { return "event: " + j.value("type", "message") + "\n" + sse(j); }

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

void note_timings(const Timings& t) {
  t_request.prompt_n = t.prompt_n;
  t_request.cache_n = t.cache_n;
}

// Everything that exists once the model is loaded.
struct Engine {
  // The page tiers outlive the scheduler, which sends pages to them (warm RAM first, then disk, then Redis).
  std::unique_ptr<RedisPageTier> redis_tier;
  std::unique_ptr<PageTiers> tiers;
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ChatFormatter> chat;
  std::unique_ptr<Scheduler> scheduler;
};

// The prompt of a request that gives either `messages` (rendered with the chat template) or
// `prompt` (/v1/prefill, /v1/cache/lookup).
std::vector<PromptPart> prompt_or_messages(const Engine& e, const Json& body) {
  if (has_field(body, "messages")) return {{e.chat->apply(body), -1}};
  if (!has_field(body, "prompt")) throw invalid_request("'prompt' or 'messages' is required");
  return parse_prompt(body.at("prompt"));
}

// Hybrid models keep a recurrent state only where one was snapshotted, so prompts that share a
// system prompt but not the question after it can share the system prompt only if a state after
// it exists: its token count, when the leading system messages render to a prefix of the prompt.
std::vector<size_t> system_prompt_end(const Engine& e, const Json& body, const std::vector<Token>& prompt) {
  if (!e.ctx->has_recurrent_state()) return {};
  const std::optional<std::string> text = e.chat->apply_leading_system(body);
  if (!text) return {};
  const std::vector<Token> head = tokenize_prompt(e.model->tokenizer(), {{*text, -1}}, /*add_special=*/true);
  if (head.empty() || head.size() >= prompt.size() || !std::equal(head.begin(), head.end(), prompt.begin())) return {};
  return {head.size()};
}

// One task's stream: how its events become chunks.
struct SubStream {
  std::shared_ptr<TaskChannel> channel;
  ResponseInfo info;
  ChatStream chat;
  AnthropicStream anthropic;
  ResponsesStream responses;
  bool first_token = true;
  bool done = false;
};

// A streamed completion's state, shared by httplib's content provider calls: one sub-stream per
// task (several for `n` > 1 or a list of prompts, their chunks told apart by "index").
struct StreamState {
  std::vector<SubStream> subs;
  ConnectionProbe probe;
  Scheduler* scheduler = nullptr;
  void cancel() {
    for (SubStream& s : subs) s.channel->cancel();
    scheduler->wake();
  }
};

std::vector<Json> token_chunks(const TokenEvent& t, SubStream& st) {
  if (t.progress) {
    // Anthropic streams have no such event; the Responses API's is response.in_progress.
    if (st.info.kind == ResponseKind::Anthropic) return {};
    if (st.info.kind == ResponseKind::Responses) return st.responses.on_progress(t, st.info);
    return {progress_chunk(t, st.info)};
  }
  switch (st.info.kind) {
    case ResponseKind::Native: return {native_partial_json(t, st.info)};
    case ResponseKind::OaiCompletion: return {oai_completion_chunk_json(t, st.info)};
    case ResponseKind::OaiChat: return oai_chat_token_chunks(t, st.info, st.first_token, st.chat);
    case ResponseKind::Anthropic: return st.anthropic.on_token(t, st.info);
    case ResponseKind::Responses: return st.responses.on_token(t, st.info);
  }
  return {};
}

std::vector<Json> final_chunks(const FinalResult& r, SubStream& st) {
  const ResponseInfo& info = st.info;
  switch (info.kind) {
    case ResponseKind::Native: return {native_final_json(r, info)};
    case ResponseKind::OaiCompletion: return {oai_completion_final_json(r, info)};
    case ResponseKind::OaiChat: return oai_chat_final_chunks(r, info, st.chat);
    case ResponseKind::Anthropic: return st.anthropic.on_final(r, info);
    case ResponseKind::Responses: return st.responses.on_final(r, info);
  }
  return {};
}

// llama-server's response_fields: {"a/b": value of j["a"]["b"], ...}; a missing path is left out.
Json select_fields(const Json& j, const std::vector<std::string>& paths) {
  Json out = Json::object();
  for (const std::string& path : paths) {
    const Json* v = &j;
    for (size_t start = 0; v && start <= path.size();) {
      const size_t end = std::min(path.find('/', start), path.size());
      const auto it = v->is_object() ? v->find(path.substr(start, end - start)) : v->end();
      v = it != v->end() ? &*it : nullptr;
      start = end + 1;
    }
    if (v) out[path] = *v;
  }
  return out;
}

Json final_json(const FinalResult& r, const ResponseInfo& info) {
  switch (info.kind) {
    case ResponseKind::Native:
      if (!info.params.response_fields.empty()) return select_fields(native_final_json(r, info), info.params.response_fields);
      return native_final_json(r, info);
    case ResponseKind::OaiCompletion: return oai_completion_final_json(r, info);
    case ResponseKind::OaiChat: return oai_chat_final_json(r, info);
    case ResponseKind::Anthropic: return anthropic_message_json(r, info);
    case ResponseKind::Responses: return responses_json(r, info);
  }
  return Json::object();
}

// The answer to a request of several tasks: native answers as a list (llama-server), OpenAI
// ones as one object whose choices are every task's, with usage counting each prompt once.
Json combined_final_json(const std::vector<FinalResult>& finals, const std::vector<ResponseInfo>& infos,
                         size_t n_choices) {
  if (finals.size() == 1) return final_json(finals[0], infos[0]);
  if (infos[0].kind == ResponseKind::Native) {
    Json list = Json::array();
    for (size_t i = 0; i < finals.size(); ++i) list.push_back(final_json(finals[i], infos[i]));
    return list;
  }
  Json j;  // the first answer, with every answer's choices
  Json choices = Json::array();
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < finals.size(); ++i) {
    Json answer = final_json(finals[i], infos[i]);
    for (Json& choice : answer["choices"]) choices.push_back(std::move(choice));
    if (i == 0) j = std::move(answer);
    const Json usage = usage_json(finals[i]);
    completion_tokens += usage.value("completion_tokens", int64_t{0});
    if (i % n_choices != 0) continue;  // the prompt was counted with its first choice
    prompt_tokens += usage.value("prompt_tokens", int64_t{0});
    cached_tokens += usage.value("/prompt_tokens_details/cached_tokens"_json_pointer, int64_t{0});
  }
  j["usage"] = Json{{"completion_tokens", completion_tokens},
                    {"prompt_tokens", prompt_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens},
                    {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  j["choices"] = std::move(choices);
  return j;
}

// One streamed event: Anthropic and Responses events are named ("event: TYPE"); the others are
// data lines only.
std::string sse_event(const Json& chunk, ResponseKind kind) {
  return kind == ResponseKind::Anthropic || kind == ResponseKind::Responses ? named_sse(chunk) : sse(chunk);
}

std::string sse_error(const HttpError& e, ResponseKind kind) {
  if (kind == ResponseKind::Anthropic) return named_sse(anthropic_error_body(e));
  if (kind == ResponseKind::Responses) return named_sse(Json{{"type", "error"}, {"code", error_type_name(e.type())},
                                                             {"message", e.what()}, {"param", nullptr}});
  return sse(error_body(e));
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

class HttpServer {
 public:
  explicit HttpServer(const ServerConfig& cfg);
  int bind();
  void listen() {
    svr_.listen_after_bind();
    listen_returned_.store(true);
  }
  // httplib's stop() does nothing before the accept loop runs, so shutdown must not come earlier.
  void wait_until_listening() const {
    while (!svr_.is_running() && !listen_returned_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  bool load();
  // Stops the scheduler first (its waiting handlers then return), then the listener.
  void shutdown();
  // --sleep-idle-seconds: unloads the model when nothing ran for that long (called periodically).
  void sleep_if_idle();

 private:
  using Handler = std::function<void(const Request&, Response&)>;
  static Handler guarded(Handler h);
  // A POST route: the body is read here, within --max-body whatever its transfer encoding.
  httplib::Server::HandlerWithContentReader with_body(Handler h) const;
  void routes();
  httplib::Server::HandlerResponse pre_routing(const Request& req, Response& res);
  bool authorized(const Request& req) const;

  // --sleep-idle-seconds: counts the request in flight, and loads the model again if it sleeps
  // (observers are answered from what they said before it slept). true: answered here.
  bool enter_request(const Request& req, Response& res);
  void leave_request();
  void predict(const Request& req, Response& res);
  Json predict_one(const Request& outer, const Json& instance) const;

  void completion(const Request& req, Response& res, ResponseKind kind);
  // POST .../input_tokens and Anthropic's count_tokens: the prompt's length, nothing evaluated.
  void count_tokens(const Request& req, Response& res, ResponseKind kind);
  // A request's generation fields over the server's defaults (--n-predict, --temp, --seed).
  CompletionParams request_params(const Json& body) const;
  void tokenize(const Request& req, Response& res);
  void cache_lookup(const Request& req, Response& res);
  void detokenize(const Request& req, Response& res);
  void apply_template(const Request& req, Response& res);
  void props(Response& res);
  Json kv_cache_props() const;
  void slots(const Request& req, Response& res);
  void metrics(Response& res);
  void embeddings(const Request& req, Response& res, EmbeddingApi api);
  void infill(const Request& req, Response& res);
  // A completion request's tasks (n choices of each prompt), validated and tokenized, not submitted.
  struct PreparedCompletion {
    std::vector<std::shared_ptr<Task>> tasks;
    std::vector<ResponseInfo> infos;  // infos[i].index == i
    size_t n_choices = 1;
    bool stream = false;
  };
  // `params`: the request's generation fields when the caller parsed them already (else parsed here).
  PreparedCompletion prepare_completion(const Request& req, ResponseKind kind, Json body,
                                        std::optional<CompletionParams> params = std::nullopt) const;
  void completion_of(const Request& req, Response& res, ResponseKind kind, Json body,
                     std::optional<CompletionParams> params = std::nullopt);
  void apply_chat_defaults(Json& body) const;
  void models(Response& res);
  void slot_action(const Request& req, Response& res);
  void prefill(const Request& req, Response& res);
  const StateFolder& state_folder() const;

  const ServerConfig cfg_;
  OriginPolicy origin_policy_;
  CompletionParams request_defaults_;
  std::string model_name_;
  std::vector<std::string> model_aliases_;  // --alias a,b: sorted, unique
  std::vector<std::string> model_tags_;     // --tags: informational, listed by /models
  GuardedServer svr_;
  std::unique_ptr<StateFolder> state_folder_;
  std::unique_ptr<Engine> engine_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> listen_returned_{false};
  mutable std::atomic<uint64_t> next_task_id_{1};
  std::mutex shutdown_mutex_;
  bool shut_down_ = false;
  // Vertex AI predict: the POST routes an instance may name, by path and by camelCase alias.
  std::map<std::string, Handler> post_routes_;
  std::map<std::string, std::string> route_aliases_;
  // --sleep-idle-seconds.
  std::mutex sleep_mutex_;
  bool sleeping_ = false;
  bool waking_ = false;  // a request is loading the model again
  std::condition_variable woken_;
  int in_flight_ = 0;
  Clock::time_point last_activity_ = Clock::now();
  struct StoredAnswer {
    int status = 200;
    std::string body, content_type;
  };
  std::map<std::string, StoredAnswer> asleep_answers_;  // path -> what it answered before the model slept
};

TransportLimits transport_limits(const ServerConfig& cfg) {
  TransportLimits t;
  t.request_timeout_s = cfg.request_timeout_s;
  t.max_connections = cfg.http_threads > 0 ? cfg.http_threads : 256;
  return t;
}

HttpServer::HttpServer(const ServerConfig& cfg) : cfg_(cfg), svr_(transport_limits(cfg)) {
  // --alias a,b,c: every name is the model's; responses use the first in sorted order (llama-server).
  model_aliases_ = split_list(cfg.alias);
  model_tags_ = split_list(cfg.tags);
  model_name_ = model_aliases_.empty() ? std::filesystem::path(cfg.model_path).filename().string() : model_aliases_[0];
  origin_policy_.bind_host = cfg.host;
  origin_policy_.allowed_hosts = cfg.allowed_hosts;
  origin_policy_.cors_origins = cfg.cors_origins;
  request_defaults_.n_predict = cfg.n_predict;
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
    cp.kv_unified = true;  // every slot may use the whole context (llama-server with -np auto)
    cp.n_threads = cfg_.n_threads > 0 ? cfg_.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    cp.type_k = cfg_.type_k;
    cp.type_v = cfg_.type_v;
    cp.kv_rotation = cfg_.kv_rotation;
    cp.kv_rotation_seed = cfg_.kv_rotation_seed;
    cp.kv_code = cfg_.kv_code;
    cp.kv_hot_cells = cfg_.kv_hot_cells;
    cp.tail_type_k = cfg_.tail_type_k;
    cp.tail_type_v = cfg_.tail_type_v;
    cp.kv_tail_dir = cfg_.kv_tail_dir;
    cp.kv_retrieval_heads = cfg_.kv_retrieval_heads;
    cp.embeddings = cfg_.embeddings;
    if (cfg_.context_shift && !cfg_.embeddings) cp.query_window = kSnapKvWindow;  // what the snapkv policy scores with
    const uint32_t n_positions = cp.n_ctx;
    // --cache-ram: room for cached pages beyond the context, as KV cells (untouched cells cost
    // no memory); pages no slot uses are evicted only when all of it is taken.
    const uint32_t cache_cells = kv_cells_for_bytes(*e->model, cp, cfg_.cache_ram_bytes);
    cp.n_ctx = n_positions + cache_cells;
    log_line("creating context: n_ctx %u shared by %d slots (+ %u cells for cached pages), n_ubatch %u, K %s, V %s, "
             "%d threads", n_positions, cfg_.n_slots, cache_cells, cp.n_ubatch,
             std::string(ggml_type_name(cp.type_k)).c_str(), std::string(ggml_type_name(cp.type_v)).c_str(),
             cp.n_threads);
    e->ctx = std::make_unique<Context>(*e->model, cp);
    const KvStatus kv = e->ctx->kv_status();
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
      log_line("KV rows Hadamard-rotated: %s (--kv-rotation %s)", kv.rotation.c_str(), kv_rotation_mode_name(cp.kv_rotation));

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

    SchedulerConfig sc;
    sc.n_slots = cfg_.n_slots;
    sc.n_ctx = n_positions;
    sc.n_batch = cp.n_ubatch;
    sc.slot_similarity = cfg_.slot_similarity;
    sc.checkpoint_bytes = cfg_.checkpoint_bytes;
    sc.model_fingerprint = model_fingerprint(*e->model);
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

bool HttpServer::enter_request(const Request& req, Response& res) {
  // Observers do not wake the model nor keep it awake: a load balancer's health checks must not.
  const bool observer = req.path == "/health" || req.path == "/v1/health" ||
                        req.path == "/props" || req.path == "/models" || req.path == "/v1/models" ||
                        req.path == "/metrics" || req.path == cfg_.predict_health_route;
  std::unique_lock<std::mutex> lock(sleep_mutex_);
  if (sleeping_) {
    if (observer) {
      const auto it = asleep_answers_.find(req.path);
      if (it != asleep_answers_.end()) {
        res.status = it->second.status;
        res.set_content(it->second.body, it->second.content_type);
      } else {
        send_json(res, Json{{"status", "ok"}});  // /health
      }
      return true;
    }
    // One request loads the model; others that need it wait for that, observers do not.
    if (!waking_) {
      waking_ = true;
      log_line("waking up: %s %s needs the model", req.method.c_str(), req.path.c_str());
      lock.unlock();
      const bool loaded = load();
      lock.lock();
      waking_ = false;
      sleeping_ = !loaded;
      woken_.notify_all();
    } else {
      woken_.wait(lock, [this] { return !waking_; });
    }
    if (sleeping_) {
      send_error(res, HttpError(ErrorType::Unavailable, "the model could not be loaded again after sleeping"));
      if (req.method == "POST") GuardedServer::close_after_response(res);
      return true;
    }
  }
  ++in_flight_;
  t_request.in_flight = true;
  t_request.activity = !observer;
  return false;
}

void HttpServer::leave_request() {
  std::lock_guard<std::mutex> lock(sleep_mutex_);
  --in_flight_;
  if (t_request.activity) last_activity_ = Clock::now();
}

void HttpServer::sleep_if_idle() {
  std::lock_guard<std::mutex> lock(sleep_mutex_);
  if (cfg_.sleep_idle_seconds < 0 || sleeping_ || in_flight_ > 0 || !ready_.load(std::memory_order_acquire)) return;
  if (Clock::now() - last_activity_ < std::chrono::seconds(cfg_.sleep_idle_seconds)) return;
  std::lock_guard<std::mutex> shutdown_lock(shutdown_mutex_);
  if (shut_down_) return;
  // What the observers say while the model sleeps: their last answer, /props saying so.
  asleep_answers_.clear();
  auto store = [&](const std::string& path, const std::function<void(Response&)>& answer) {
    Response r;
    guarded([&](const Request&, Response& out) { answer(out); })(Request(), r);
    asleep_answers_[path] = StoredAnswer{r.status == -1 ? 200 : r.status, r.body, r.get_header_value("Content-Type")};
  };
  store("/props", [this](Response& r) { props(r); });
  try {
    Json props = Json::parse(asleep_answers_["/props"].body);
    props["is_sleeping"] = true;
    asleep_answers_["/props"].body = dump(props);
  } catch (const Json::exception&) {
  }
  store("/models", [this](Response& r) { models(r); });
  asleep_answers_["/v1/models"] = asleep_answers_["/models"];
  store("/metrics", [this](Response& r) { metrics(r); });
  ready_.store(false, std::memory_order_release);
  engine_->scheduler->stop();
  engine_.reset();  // the weights, the KV pages, the recurrent snapshots (a disk tier keeps its pages)
  sleeping_ = true;
  log_line("sleeping: idle for %d s, the model is unloaded until a request needs it", cfg_.sleep_idle_seconds);
}

void HttpServer::predict(const Request& req, Response& res) {
  const Json body = parse_body_object(req.body);
  if (!body.contains("instances") || !body["instances"].is_array())
    throw invalid_request("request body must include an array field named instances");
  const Json& instances = body["instances"];
  if (instances.size() > kMaxPredictInstances)
    throw invalid_request("instances array exceeds maximum size of " + std::to_string(kMaxPredictInstances));
  // Instances run at once (each as its own request), so that they share the slots.
  std::vector<std::future<Json>> answers;
  for (const Json& instance : instances)
    answers.push_back(std::async(std::launch::async, [this, &req, &instance] { return predict_one(req, instance); }));
  Json predictions = Json::array();
  for (auto& a : answers) predictions.push_back(a.get());
  send_json(res, Json{{"predictions", predictions}});
}

Json HttpServer::predict_one(const Request& outer, const Json& instance) const {
  auto error = [](const std::string& message) { return Json{{"error", error_object(invalid_request(message))}}; };
  if (!instance.is_object()) return error("each instance must be a JSON object");
  const auto format = instance.find("@requestFormat");
  if (format == instance.end() || !format->is_string()) return error("each instance must include a string @requestFormat");
  const auto alias = route_aliases_.find(format->get<std::string>());
  const std::string path = alias != route_aliases_.end() ? alias->second : format->get<std::string>();
  const auto route = post_routes_.find(path);
  if (route == post_routes_.end() || path.find('(') != std::string::npos || path == cfg_.predict_route)
    return error("no handler registered for @requestFormat: " + format->get<std::string>());
  Json payload = instance;
  payload.erase("@requestFormat");
  if (payload.contains("stream")) payload["stream"] = false;  // predictions are whole answers
  Request inner;
  inner.method = "POST";
  inner.path = path;
  inner.headers = outer.headers;
  inner.body = dump(payload);
  inner.remote_addr = outer.remote_addr;
  inner.remote_port = outer.remote_port;
  inner.local_addr = outer.local_addr;
  inner.local_port = outer.local_port;
  Response answer;
  route->second(inner, answer);
  try {
    return Json::parse(answer.body);
  } catch (const Json::exception&) {
    return answer.body;
  }
}

void HttpServer::completion(const Request& req, Response& res, ResponseKind kind) {
  completion_of(req, res, kind, parse_body_object(req.body));
}

void HttpServer::infill(const Request& req, Response& res) {
  if (cfg_.embeddings)
    throw HttpError(ErrorType::NotSupported, "This server does not support infill. Start it without `--embeddings`");
  Engine& e = *engine_;
  Json body = parse_body_object(req.body);
  const InfillRequest ir = parse_infill_request(body, e.model->tokenizer());
  CompletionParams params = request_params(body);  // n_predict: the server's default and cap included
  const std::vector<Token> prompt = format_infill(e.model->tokenizer(), ir, kInfillBatch, params.n_predict,
                                                  static_cast<int>(e.scheduler->config().n_ctx));
  body = infill_completion_body(std::move(body));
  body["prompt"] = prompt;
  completion_of(req, res, ResponseKind::Native, std::move(body), std::move(params));
}

void HttpServer::apply_chat_defaults(Json& body) const {
  // --reasoning-format and --reasoning: the server's defaults where the request says nothing.
  if (!cfg_.reasoning_format.empty() && !body.contains("reasoning_format")) body["reasoning_format"] = cfg_.reasoning_format;
  if (cfg_.enable_thinking >= 0) {
    if (!body.contains("chat_template_kwargs")) body["chat_template_kwargs"] = Json::object();
    Json& kwargs = body["chat_template_kwargs"];
    if (kwargs.is_object() && !kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = cfg_.enable_thinking == 1;
  }
}

HttpServer::PreparedCompletion HttpServer::prepare_completion(const Request& req, ResponseKind kind, Json body,
                                                              std::optional<CompletionParams> parsed) const {
  if (cfg_.embeddings)  // the context keeps hidden states, not logits
    throw HttpError(ErrorType::NotSupported,
                    "This server does not support completions. Start it without `--embeddings`");
  const Engine& e = *engine_;
  const Tokenizer& tok = e.model->tokenizer();
  Json request_echo;
  if (kind == ResponseKind::Anthropic) body = anthropic_to_chat_request(body, AnthropicEndpoint::Messages);
  if (kind == ResponseKind::Responses) {
    request_echo = responses_echo(body);
    body = responses_to_chat_request(body);
  }
  const bool chat = kind == ResponseKind::OaiChat || kind == ResponseKind::Anthropic || kind == ResponseKind::Responses;

  const Endpoint endpoint = kind == ResponseKind::Native        ? Endpoint::Native
                            : kind == ResponseKind::OaiCompletion ? Endpoint::OaiCompletion
                                                                  : Endpoint::OaiChat;
  check_known_fields(body, endpoint);
  read_bool(body, "backend_sampling", false);  // a type check: agentkv samples on the CPU either way
  // `n` (llama-server also reads n_cmpl): choices per prompt, each its own task.
  const int64_t n_choices = has_field(body, "n_cmpl") ? read_int(body, "n_cmpl", 1, 1, kMaxChoices)
                                                      : read_int(body, "n", 1, 1, kMaxChoices);
  std::vector<std::vector<PromptPart>> prompts;
  if (chat) {
    apply_chat_defaults(body);
    prompts.push_back({{e.chat->apply(body), -1}});
  } else {
    if (!has_field(body, "prompt")) throw invalid_request("'prompt' is required");
    prompts = parse_prompts(body.at("prompt"));
  }
  if (prompts.size() * static_cast<size_t>(n_choices) > kMaxTasksPerRequest)
    throw invalid_request("a request may ask for at most " + std::to_string(kMaxTasksPerRequest) +
                          " completions (prompts times n); this one asks for " +
                          std::to_string(prompts.size() * static_cast<size_t>(n_choices)));
  CompletionParams params = parsed ? std::move(*parsed) : request_params(body);
  session_from_header(req, params);
  parse_constraints(body, endpoint, params);
  // Anthropic's message_start reports the cache split, known from the first token's timings.
  if (kind == ResponseKind::Anthropic && params.stream) params.timings_per_token = true;
  ChatParseOptions chat_options;
  if (chat) chat_options = parse_chat_options(body, detect_tool_format(e.chat->template_source()), prompts[0][0].text, params);

  ResponseInfo info;
  info.kind = kind;
  // OpenAI clients get back the model name they asked for, as from llama-server.
  info.model = kind != ResponseKind::Native && body.contains("model") && body["model"].is_string()
                   ? body["model"].get<std::string>()
                   : model_name_;
  info.completion_id = make_completion_id(kind == ResponseKind::Anthropic   ? "msg_"
                                          : kind == ResponseKind::Responses ? "resp_"
                                          : kind == ResponseKind::OaiChat   ? "chatcmpl-"
                                                                            : "cmpl-");
  info.fingerprint = kBuildInfo;
  info.created = static_cast<int64_t>(std::time(nullptr));
  info.chat = std::move(chat_options);
  info.request_echo = std::move(request_echo);

  PreparedCompletion out;
  out.n_choices = static_cast<size_t>(n_choices);
  out.stream = params.stream;
  for (const std::vector<PromptPart>& parts : prompts) {
    std::vector<Token> prompt = tokenize_prompt(tok, parts, /*add_special=*/true);
    // A chat prompt re-renders earlier answers: keep the tokens the model generated for them.
    if (chat) prompt = align_to_cache(tok, parts[0].text, prompt, e.scheduler->cached_sequences()).tokens;
    check_prompt_fits(prompt, e.scheduler->config().n_ctx);
    if (params.n_fake_cached > 0 && static_cast<size_t>(params.n_fake_cached) >= prompt.size())
      throw invalid_request("n_fake_cached (" + std::to_string(params.n_fake_cached) +
                            ") must be below the prompt length (" + std::to_string(prompt.size()) + " tokens)");
    const std::vector<size_t> snapshot_points = chat ? system_prompt_end(e, body, prompt) : std::vector<size_t>{};
    for (int64_t c = 0; c < n_choices; ++c) {
      auto task = std::make_shared<Task>();
      task->id = next_task_id_++;
      task->prompt = prompt;
      task->params = params;
      // A fixed seed gives every choice its own draws (the same seed would give n equal answers).
      if (c > 0 && params.sampling.seed != kRandomSeed)
        task->params.sampling.seed = static_cast<uint32_t>((params.sampling.seed + static_cast<uint64_t>(c)) % kRandomSeed);
      task->snapshot_points = snapshot_points;
      ResponseInfo task_info = info;
      task_info.index = static_cast<int>(out.tasks.size());
      task_info.params = task->params;
      if (kind == ResponseKind::Native || params.verbose) task_info.prompt_text = tok.decode(task->prompt, true);
      out.tasks.push_back(std::move(task));
      out.infos.push_back(std::move(task_info));
    }
  }
  return out;
}

void HttpServer::completion_of(const Request& req, Response& res, ResponseKind kind, Json body,
                               std::optional<CompletionParams> params) {
  PreparedCompletion pc = prepare_completion(req, kind, std::move(body), std::move(params));
  Engine& e = *engine_;
  ConnectionProbe probe(req.local_port, req.remote_addr, req.remote_port);
  std::vector<std::shared_ptr<TaskChannel>> channels;
  for (std::shared_ptr<Task>& task : pc.tasks) {
    channels.push_back(task->channel);
    e.scheduler->submit(std::move(task));
  }
  auto cancel_all = [&] {
    for (auto& c : channels) c->cancel();
    e.scheduler->wake();
  };

  if (!pc.stream) {
    std::vector<FinalResult> finals(channels.size());
    for (size_t i = 0; i < channels.size(); ++i) {
      for (bool finished = false; !finished;) {
        for (TaskEvent& ev : channels[i]->wait(kPollInterval)) {
          if (ev.kind == TaskEvent::Kind::Final) {
            finals[i] = std::move(ev.final);
            finished = true;
          } else if (ev.kind == TaskEvent::Kind::Error) {
            cancel_all();
            send_error(res, *ev.error);
            return;
          }
        }
        if (!finished && !probe.alive()) {
          cancel_all();
          res.status = 499;  // client closed the request (nobody reads this)
          return;
        }
      }
    }
    note_timings(finals[0].timings);
    send_json(res, combined_final_json(finals, pc.infos, pc.n_choices));
    return;
  }

  auto st = std::make_shared<StreamState>();
  for (size_t i = 0; i < channels.size(); ++i) {
    SubStream sub;
    sub.channel = channels[i];
    sub.info = std::move(pc.infos[i]);
    st->subs.push_back(std::move(sub));
  }
  st->probe = probe;
  st->scheduler = e.scheduler.get();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) -> bool {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        const ResponseKind kind = st->subs[0].info.kind;
        // One task waits for its events; several are polled in turn.
        const auto wait = st->subs.size() == 1 ? kPollInterval : std::chrono::milliseconds(5);
        bool any_event = false;
        for (SubStream& sub : st->subs) {
          if (sub.done) continue;
          auto events = sub.channel->wait(wait);
          any_event = any_event || !events.empty();
          for (TaskEvent& ev : events) {
            if (ev.kind == TaskEvent::Kind::Token) {
              for (const Json& chunk : token_chunks(ev.token, sub)) {
                if (!write(sse_event(chunk, kind))) {
                  st->cancel();
                  return false;
                }
              }
              if (!ev.token.progress) sub.first_token = false;
            } else if (ev.kind == TaskEvent::Kind::Final) {
              if (sub.info.index == 0) note_timings(ev.final.timings);
              for (const Json& chunk : final_chunks(ev.final, sub)) write(sse_event(chunk, kind));
              sub.done = true;
            } else {  // one task's error ends the stream
              write(sse_error(*ev.error, kind));
              st->cancel();
              sink.done();
              return true;
            }
          }
        }
        if (std::all_of(st->subs.begin(), st->subs.end(), [](const SubStream& s) { return s.done; })) {
          if (kind == ResponseKind::OaiCompletion || kind == ResponseKind::OaiChat) write("data: [DONE]\n\n");
          sink.done();
          return true;
        }
        if (!any_event && !st->probe.alive()) {
          st->cancel();
          return false;
        }
        return true;
      },
      [st](bool success) {
        if (!success) st->cancel();
      });
}

void HttpServer::cache_lookup(const Request& req, Response& res) {
  // What a prefix-aware router asks each instance: how much of this prompt it holds (llm-d's
  // scorer, docs/deploy.md). The prompt is rendered and tokenized as a completion would be.
  Engine& e = *engine_;
  const Json body = parse_body_object(req.body);
  // What renders the prompt, and the salt; a field meant for a completion is a client's mistake.
  static const std::set<std::string> kLookupFields = {"prompt", "messages", "tools", "tool_choice",
                                                      "chat_template_kwargs", "add_generation_prompt",
                                                      "cache_salt", "model", "session_id"};
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!kLookupFields.count(it.key()))
      throw invalid_request("field '" + it.key() + "' is not supported by /v1/cache/lookup (it evaluates nothing)");
  const std::vector<PromptPart> parts = prompt_or_messages(e, body);
  const std::vector<Token> prompt = tokenize_prompt(e.model->tokenizer(), parts, /*add_special=*/true);
  const size_t cached = e.scheduler->cached_prefix(prompt, read_string(body, "cache_salt", ""));
  const size_t page = e.scheduler->config().page_tokens;
  send_json(res, Json{{"n_prompt_tokens", prompt.size()},
                      {"n_cached_tokens", cached},
                      {"page_tokens", page},
                      {"n_cached_pages", cached / page}});
}

CompletionParams HttpServer::request_params(const Json& body) const {
  const Tokenizer& tok = engine_->model->tokenizer();
  CompletionParams p = parse_completion_params(body, cfg_.n_slots, tok.n_vocab(), request_defaults_, &tok);
  if (p.ignore_eos)  // llama-server's rule: every end-of-generation token is banned
    for (Token t : tok.eog_tokens()) p.logit_bias.emplace_back(t, -std::numeric_limits<float>::infinity());
  if (cfg_.n_predict > 0 && (p.n_predict < 0 || p.n_predict > cfg_.n_predict)) p.n_predict = cfg_.n_predict;
  return p;
}

void HttpServer::count_tokens(const Request& req, Response& res, ResponseKind kind) {
  const Engine& e = *engine_;
  Json chat = parse_body_object(req.body);
  if (kind == ResponseKind::Anthropic) chat = anthropic_to_chat_request(chat, AnthropicEndpoint::CountTokens);
  if (kind == ResponseKind::Responses) chat = responses_to_chat_request(chat);
  if (!chat.contains("messages")) throw invalid_request("'messages' is required");
  const std::string prompt = e.chat->apply(chat);
  const size_t n = tokenize_prompt(e.model->tokenizer(), {{prompt, -1}}, /*add_special=*/true).size();
  Json out{{"input_tokens", n}};
  if (kind != ResponseKind::Anthropic) out["object"] = "response.input_tokens";  // llama-server's OpenAI shape
  send_json(res, out);
}

void HttpServer::tokenize(const Request& req, Response& res) {
  const Tokenizer& tok = engine_->model->tokenizer();
  const Json body = parse_body_object(req.body);
  Json tokens = Json::array();
  if (has_field(body, "content")) {
    const bool add_special = read_bool(body, "add_special", false);
    const bool parse_special = read_bool(body, "parse_special", true);
    const bool with_pieces = read_bool(body, "with_pieces", false);
    for (Token id : tokenize_prompt(tok, parse_prompt(body.at("content")), add_special, parse_special)) {
      if (!with_pieces) {
        tokens.push_back(id);
        continue;
      }
      // A piece that is not valid UTF-8 on its own is given as its bytes (llama-server's rule).
      const std::string piece = tok.token_to_piece(id, true);
      Json piece_json;
      if (is_valid_utf8(piece)) {
        piece_json = piece;
      } else {
        piece_json = Json::array();
        for (unsigned char c : piece) piece_json.push_back(static_cast<int>(c));
      }
      tokens.push_back(Json{{"id", id}, {"piece", piece_json}});
    }
  }
  send_json(res, Json{{"tokens", tokens}});
}

void HttpServer::detokenize(const Request& req, Response& res) {
  const Tokenizer& tok = engine_->model->tokenizer();
  const Json body = parse_body_object(req.body);
  std::vector<Token> ids;
  if (has_field(body, "tokens")) {
    const Json& list = body.at("tokens");
    if (!list.is_array()) throw invalid_request("field 'tokens' must be an array of token ids");
    for (const Json& item : list) {
      if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() >= tok.n_vocab())
        throw invalid_request("field 'tokens' must hold token ids in [0, " + std::to_string(tok.n_vocab()) + ")");
      ids.push_back(item.get<Token>());
    }
  }
  send_json(res, Json{{"content", tok.decode(ids, true)}});
}

void HttpServer::apply_template(const Request& req, Response& res) {
  Json body = parse_body_object(req.body);
  apply_chat_defaults(body);
  send_json(res, Json{{"prompt", engine_->chat->apply(body)}});
}

// What the KV cache stores: element types and the rotation of its rows (docs/quant-types.md).
Json HttpServer::kv_cache_props() const {
  const KvStatus kv = engine_->ctx->kv_status();
  if (!kv.present) return nullptr;
  return Json{{"type_k", std::string(ggml_type_name(kv.type_k))},
              {"type_v", std::string(ggml_type_name(kv.type_v))},
              {"rotation", kv_rotation_mode_name(cfg_.kv_rotation)},
              {"rotation_k_block", kv.rotation_k_block},
              {"rotation_v_block", kv.rotation_v_block},
              {"rotation_seed", kv.rotation_seed},
              {"code_id", kv.code_id},  // tqc3's calibrated code (0: none)
              {"hot_cells", kv.windowed ? kv.hot_cells : 0},
              {"tail_heads_kept", kv.tail_heads_kept},  // retrieval heads: KV heads whose rows the tail keeps
              {"tail_heads_total", kv.tail_heads_total},
              {"tail_heads", kv.tail_heads}};
}

void HttpServer::props(Response& res) {
  const Engine& e = *engine_;
  const CompletionParams& defaults = request_defaults_;
  send_json(res, Json{
                     {"default_generation_settings", Json{{"id", 0},
                                                          {"id_task", -1},
                                                          {"n_ctx", e.scheduler->config().n_ctx},
                                                          {"speculative", false},
                                                          {"is_processing", false},
                                                          {"params", defaults.to_json()}}},
                     {"total_slots", cfg_.n_slots},
                     // agentkv: the slots share one memory, so n_ctx above is what one request may
                     // use (llama-server's is n_ctx / slots); the pool is what all share, cached
                     // pages (--cache-ram) included (docs/server.md, "Context").
                     {"n_ctx_request", e.scheduler->config().n_ctx},
                     {"n_ctx_pool", e.ctx->params().n_ctx},
                     {"model_alias", model_name_},
                     // the file name only: absolute paths of the host are not the clients' business
                     {"model_path", std::filesystem::path(cfg_.model_path).filename().string()},
                     {"modalities", Json{{"vision", false}, {"audio", false}}},
                     {"endpoint_slots", cfg_.endpoint_slots},
                     {"endpoint_props", false},
                     {"endpoint_metrics", cfg_.metrics},
                     {"chat_template", e.chat->template_source()},
                     {"bos_token", e.chat->bos_token()},
                     {"eos_token", e.chat->eos_token()},
                     {"build_info", kBuildInfo},
                     {"is_sleeping", false},
                     // agentkv: one prefix index for all slots; numerics independent of batching
                     {"share_prefixes", cfg_.share_prefixes},
                     {"batch_invariant", batch_invariant()},
                     {"kv_cache", kv_cache_props()},
                     {"memory", e.scheduler->memory_json()},
                 });
}

void HttpServer::slots(const Request& req, Response& res) {
  if (!cfg_.endpoint_slots)
    throw HttpError(ErrorType::NotSupported, "This server does not support slots endpoint. Start it with `--slots`");
  const Scheduler& sched = *engine_->scheduler;
  const std::string fail = req.has_param("fail_on_no_slot") ? req.get_param_value("fail_on_no_slot") : "";
  if ((fail == "1" || fail == "true") && !sched.has_idle_slot())
    throw HttpError(ErrorType::Unavailable, "no slot available");
  // Prompts are other clients' text: shown only when asked for, or to holders of the API key.
  send_json(res, sched.slots_json(request_defaults_, cfg_.slots_show_prompts || !cfg_.api_key.empty()));
}

void HttpServer::metrics(Response& res) {
  if (!cfg_.metrics)
    throw HttpError(ErrorType::NotSupported, "This server does not support metrics endpoint. Start it with `--metrics`");
  std::string text = prometheus_text(engine_->scheduler->metrics());
  if (engine_->tiers) {
    if (const auto warm = engine_->tiers->warm_stats()) text += prometheus_text(*warm);
    if (const auto disk = engine_->tiers->disk_stats()) text += prometheus_text(*disk);
  }
  res.set_content(text, "text/plain; version=0.0.4");
}

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int parse_slot_id(const std::string& text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos)
    throw invalid_request("invalid slot id '" + text + "'");
  return std::stoi(text);
}

}  // namespace

const StateFolder& HttpServer::state_folder() const {
  if (!state_folder_)
    throw HttpError(ErrorType::NotSupported, "This server does not support slots action. Start it with `--slot-save-path`");
  return *state_folder_;
}

void HttpServer::slot_action(const Request& req, Response& res) {
  Scheduler& sched = *engine_->scheduler;
  const int id = parse_slot_id(req.matches[1]);
  const std::string action = req.has_param("action") ? req.get_param_value("action") : "";
  const Json body = req.body.empty() ? Json::object() : parse_body_object(req.body);
  const auto t0 = Clock::now();
  if (action == "erase") {
    const size_t n = sched.erase_slot(id);
    send_json(res, Json{{"id_slot", id}, {"n_erased", n}});
  } else if (action == "save") {
    const std::string filename = read_string(body, "filename", "");
    state_folder();
    StateFolder::check_name(filename);
    const SlotStateBlob saved = sched.save_slot(id);
    state_folder().write(filename, saved.blob);
    send_json(res, Json{{"id_slot", id},
                        {"filename", filename},
                        {"n_saved", saved.n_tokens},
                        {"n_written", saved.blob.size()},
                        {"timings", Json{{"save_ms", ms_since(t0)}}}});
  } else if (action == "restore" || action == "adopt") {
    // adopt also takes a state made elsewhere inline: {"state": base64}.
    std::vector<uint8_t> blob;
    std::string filename;
    std::string what;
    if (action == "adopt" && has_field(body, "state")) {
      if (!body["state"].is_string()) throw invalid_request("field 'state' must be a base64 string");
      blob = base64_decode(body["state"].get_ref<const std::string&>(), "field 'state'");
      what = "state in the request";
    } else {
      filename = read_string(body, "filename", "");
      blob = state_folder().read(filename);
      what = "state file " + filename;
    }
    const size_t n = sched.restore_slot(id, blob, what);
    Json out{{"id_slot", id}};
    if (!filename.empty()) out["filename"] = filename;
    out["n_restored"] = n;
    out["n_read"] = blob.size();
    out["timings"] = Json{{"restore_ms", ms_since(t0)}};
    send_json(res, out);
  } else {
    throw invalid_request("Invalid action '" + action + "': use save, restore, adopt or erase");
  }
}

void HttpServer::prefill(const Request& req, Response& res) {
  if (cfg_.embeddings)
    throw HttpError(ErrorType::NotSupported, "This server does not support prefill. Start it without `--embeddings`");
  Engine& e = *engine_;
  const Tokenizer& tok = e.model->tokenizer();
  const Json body = parse_body_object(req.body);
  const std::vector<PromptPart> parts = prompt_or_messages(e, body);
  const std::string filename = read_string(body, "filename", "");
  if (!filename.empty()) {
    state_folder();
    StateFolder::check_name(filename);
  }
  auto task = std::make_shared<Task>();
  task->id = next_task_id_++;
  task->params = request_params(body);
  session_from_header(req, task->params);
  if (task->params.n_fake_cached > 0) throw invalid_request("n_fake_cached cannot be prefilled: its prefix is not real");
  task->params.n_predict = 0;
  task->params.stream = false;
  task->return_state = true;
  task->prompt = tokenize_prompt(tok, parts, /*add_special=*/true);
  check_prompt_fits(task->prompt, e.scheduler->config().n_ctx);
  ConnectionProbe probe(req.local_port, req.remote_addr, req.remote_port);
  std::shared_ptr<TaskChannel> channel = task->channel;
  e.scheduler->submit(std::move(task));
  while (true) {
    for (TaskEvent& ev : channel->wait(kPollInterval)) {
      if (ev.kind == TaskEvent::Kind::Error) {
        send_error(res, *ev.error);
        return;
      }
      if (ev.kind != TaskEvent::Kind::Final) continue;
      const FinalResult& r = ev.final;
      note_timings(r.timings);
      Json out{{"id_slot", r.id_slot},
               {"n_prompt_tokens", r.n_prompt},
               {"n_tokens", r.n_cached},
               {"n_bytes", r.state.size()},
               {"timings", r.timings.to_json()}};
      if (filename.empty()) {
        out["state"] = base64_encode(r.state);
      } else {
        state_folder().write(filename, r.state);
        out["filename"] = filename;
      }
      send_json(res, out);
      return;
    }
    if (!probe.alive()) {
      channel->cancel();
      e.scheduler->wake();
      res.status = 499;
      return;
    }
  }
}

void HttpServer::embeddings(const Request& req, Response& res, EmbeddingApi api) {
  if (!cfg_.embeddings)
    throw HttpError(ErrorType::NotSupported,
                    "This server does not support embeddings. Start it with `--embeddings`");
  Engine& e = *engine_;
  const Json body = parse_body_object(req.body);
  const Pooling pooling = e.scheduler->config().pooling;
  const EmbeddingRequest er = parse_embedding_request(body, e.model->tokenizer(), api, pooling);
  // Every input is checked before any is queued: a refused request leaves no task behind.
  for (const std::vector<Token>& input : er.inputs) check_prompt_fits(input, e.scheduler->config().n_ctx);
  std::vector<std::shared_ptr<TaskChannel>> channels;
  for (const std::vector<Token>& input : er.inputs) {
    auto task = std::make_shared<Task>();
    task->id = next_task_id_++;
    task->params.cache_prompt = false;  // every row is pooled: nothing can come from a cache
    task->params.n_predict = 0;
    task->prompt = input;
    channels.push_back(task->channel);
    e.scheduler->submit(std::move(task));
  }
  auto cancel_all = [&] {
    for (auto& c : channels) c->cancel();
    e.scheduler->wake();
  };
  ConnectionProbe probe(req.local_port, req.remote_addr, req.remote_port);
  std::vector<std::vector<std::vector<float>>> rows(channels.size());
  for (size_t i = 0; i < channels.size();) {
    bool done = false;
    for (TaskEvent& ev : channels[i]->wait(kPollInterval)) {
      if (ev.kind == TaskEvent::Kind::Error) {
        cancel_all();
        send_error(res, *ev.error);
        return;
      }
      if (ev.kind != TaskEvent::Kind::Final) continue;
      rows[i] = std::move(ev.final.embedding);
      done = true;
    }
    if (done) {
      ++i;
      continue;
    }
    if (!probe.alive()) {
      cancel_all();
      res.status = 499;
      return;
    }
  }
  send_json(res, embedding_response(api, er, std::move(rows), pooling, model_name_));
}

void HttpServer::models(Response& res) {
  const ModelConfig& mc = engine_->model->config();
  send_json(res, Json{{"object", "list"},
                      {"data", Json::array({Json{{"id", model_name_},
                                                 {"aliases", model_aliases_},
                                                 {"tags", model_tags_},
                                                 {"object", "model"},
                                                 {"created", static_cast<int64_t>(std::time(nullptr))},
                                                 {"owned_by", "llamacpp"},
                                                 {"meta", Json{{"n_vocab", mc.n_vocab},
                                                               {"n_ctx_train", mc.n_ctx_train},
                                                               {"n_embd", mc.n_embd}}}}})}});
}

}  // namespace

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
