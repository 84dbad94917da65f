// Vertex AI's prediction route (AIP_MODE=PREDICTION): each of a request's "instances" is a request
// to one of the server's other POST routes, named by its "@requestFormat".
#include <future>

#include "server/http_server_impl.h"
#include "server/json_fields.h"

namespace agentkv::server {

namespace {

constexpr size_t kMaxPredictInstances = 128;  // llama-server's bound

}  // namespace

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

}  // namespace agentkv::server
