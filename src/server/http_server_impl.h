// HttpServer: the server behind run_server (http_server.h). Internal to the server's routes; its
// methods are defined by responsibility:
//   http_server.cpp        the composition root: configuration, bind, engine set-up (load),
//                          shutdown, the request gate (pre_routing, with_body) and the route table;
//   idle_sleep.cpp         --sleep-idle-seconds: requests in flight, unloading and waking;
//   completion_routes.cpp  the completion dialects (/completion, OpenAI, Anthropic, Responses),
//                          /infill, token counting (completion_stream.h answers them);
//   predict_route.cpp      Vertex AI's prediction route (instances dispatched to the other routes);
//   token_routes.cpp       /tokenize, /detokenize, /apply-template, embeddings;
//   state_routes.cpp       what the server holds: /props, /slots and their actions, /v1/prefill,
//                          /v1/cache/lookup, /metrics, /models.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/completion_params.h"
#include "server/embeddings.h"
#include "server/engine.h"
#include "server/http_helpers.h"
#include "server/http_server.h"
#include "server/http_transport.h"
#include "server/request_guard.h"
#include "server/response_format.h"
#include "server/state_folder.h"
#include "server/task.h"

namespace agentkv::server {

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

  // http_server.cpp: the request gate and the route table.
  static Handler guarded(Handler h);
  // A POST route: the body is read here, within --max-body whatever its transfer encoding.
  httplib::Server::HandlerWithContentReader with_body(Handler h) const;
  void routes();
  httplib::Server::HandlerResponse pre_routing(const Request& req, Response& res);
  bool authorized(const Request& req) const;

  // idle_sleep.cpp. --sleep-idle-seconds: counts the request in flight, and loads the model again
  // if it sleeps (observers are answered from what they said before it slept). true: answered here.
  bool enter_request(const Request& req, Response& res);
  void leave_request();

  // predict_route.cpp.
  void predict(const Request& req, Response& res);
  Json predict_one(const Request& outer, const Json& instance) const;

  // completion_routes.cpp.
  void completion(const Request& req, Response& res, ResponseKind kind);
  void infill(const Request& req, Response& res);
  // POST .../input_tokens and Anthropic's count_tokens: the prompt's length, nothing evaluated.
  void count_tokens(const Request& req, Response& res, ResponseKind kind);
  // A request's generation fields over the server's defaults (--n-predict, --temp, --seed).
  CompletionParams request_params(const Json& body) const;
  // --reasoning-format and --reasoning, where the request says nothing (also /apply-template).
  void apply_chat_defaults(Json& body) const;
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

  // token_routes.cpp.
  void tokenize(const Request& req, Response& res);
  void detokenize(const Request& req, Response& res);
  void apply_template(const Request& req, Response& res);
  void embeddings(const Request& req, Response& res, EmbeddingApi api);

  // state_routes.cpp.
  void props(Response& res);
  Json kv_cache_props() const;
  void slots(const Request& req, Response& res);
  void slot_action(const Request& req, Response& res);
  void prefill(const Request& req, Response& res);
  void cache_lookup(const Request& req, Response& res);
  void metrics(Response& res);
  void models(Response& res);
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

}  // namespace agentkv::server
