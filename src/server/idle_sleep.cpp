// --sleep-idle-seconds: the engine is dropped after so long without requests and loaded again by
// the next request that needs it; observers (health checks, /props, /models, /metrics) neither
// wake it nor keep it awake, and are answered meanwhile from what they said before it slept.
#include <chrono>
#include <functional>

#include "server/http_server_impl.h"
#include "server/server_log.h"

namespace agentkv::server {

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

}  // namespace agentkv::server
