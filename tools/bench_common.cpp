#include "tools/bench_common.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <httplib.h>

#include "agentkv/error.h"

namespace agentkv::tools {

std::vector<TraceStep> read_agent_trace(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot open trace '" + path + "'");
  std::vector<TraceStep> steps;
  std::string line;
  int line_no = 0;
  auto field = [&](const nlohmann::json& j, const char* key, int64_t min) {
    const std::string where = path + ":" + std::to_string(line_no);
    if (!j.contains(key) || !j[key].is_number_integer())
      throw Error(where + ": \"" + key + "\" must be an integer");
    const int64_t v = j[key].get<int64_t>();
    if (v < min) throw Error(where + ": \"" + key + "\" must be >= " + std::to_string(min));
    return v;
  };
  while (std::getline(f, line)) {
    ++line_no;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw Error(path + ":" + std::to_string(line_no) + ": not a JSON object (" + e.what() + ")");
    }
    if (!j.is_object()) throw Error(path + ":" + std::to_string(line_no) + ": not a JSON object");
    TraceStep s;
    s.step = field(j, "step", 0);
    s.depth = field(j, "depth", 0);
    s.new_tokens = field(j, "new_tokens", 1);
    if (j.contains("screenshot")) {
      if (!j["screenshot"].is_string() || j["screenshot"].get<std::string>().empty())
        throw Error(path + ":" + std::to_string(line_no) + ": \"screenshot\" must be \"WIDTHxHEIGHT\" or an image file's path");
      s.screenshot = j["screenshot"].get<std::string>();
    }
    steps.push_back(s);
  }
  if (steps.empty()) throw Error("trace '" + path + "' has no steps");
  return steps;
}

std::vector<uint8_t> synthetic_screen(int w, int h) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = rgb.data() + (static_cast<size_t>(y) * w + x) * 3;
      const bool stripe = (y / 12) % 3 == 0 && (x / 7) % 5 != 0;  // lines of "text"
      p[0] = stripe ? 20 : static_cast<uint8_t>(200 + x * 40 / w);
      p[1] = stripe ? 20 : static_cast<uint8_t>(210 + y * 30 / h);
      p[2] = stripe ? 30 : 235;
    }
  return rgb;
}

bool parse_screen_size(const std::string& s, int& w, int& h) {
  char tail = 0;
  return std::sscanf(s.c_str(), "%dx%d%c", &w, &h, &tail) == 2 && w > 0 && h > 0;
}

int64_t bucket_depth(int64_t depth, int64_t bucket) {
  if (bucket <= 1 || depth == 0) return depth;
  return (depth + bucket - 1) / bucket * bucket;
}

void make_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) throw Error("cannot create output folder '" + dir + "'");
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw Error("cannot write '" + path + "'");
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  if (!f) throw Error("cannot read '" + path + "'");
  return s.str();
}

int32_t synthetic_token(int64_t stream, int64_t i, int32_t n_vocab) {
  // Plain ids well below the special tokens; a multiplicative hash keeps streams apart.
  const int64_t span = std::max<int64_t>(2, std::min<int64_t>(n_vocab - 64, 20000) - 100);
  const uint64_t h = static_cast<uint64_t>(stream * 1000003 + i) * 0x9E3779B97F4A7C15ull;
  return static_cast<int32_t>(100 + static_cast<int64_t>((h >> 33) % static_cast<uint64_t>(span)));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct BenchHttpClient::Impl {
  std::unique_ptr<httplib::Client> client;
};

BenchHttpClient::BenchHttpClient(const std::string& url, double timeout_s) : impl_(new Impl), url_(url) {
  // Split http://host:port/prefix: httplib wants scheme://host:port only.
  const auto scheme = url.find("://");
  const auto slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  const std::string base = slash == std::string::npos ? url : url.substr(0, slash);
  prefix_ = slash == std::string::npos ? "" : url.substr(slash);
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
  if (url.rfind("http://", 0) != 0) throw Error("--server: only http:// URLs are supported, got '" + url + "'");
  impl_->client = std::make_unique<httplib::Client>(base);
  const auto secs = static_cast<time_t>(timeout_s);
  impl_->client->set_read_timeout(secs, 0);
  impl_->client->set_write_timeout(secs, 0);
  impl_->client->set_connection_timeout(10, 0);
}

BenchHttpClient::~BenchHttpClient() { delete impl_; }

namespace {
int finish(const httplib::Result& r, const std::string& what, nlohmann::json& out) {
  if (!r) throw Error(what + ": no answer (" + httplib::to_string(r.error()) + ")");
  out = nlohmann::json::parse(r->body, nullptr, false);
  if (out.is_discarded()) out = nullptr;
  return r->status;
}
}  // namespace

int BenchHttpClient::post(const std::string& path, const nlohmann::json& body, nlohmann::json& out) {
  return finish(impl_->client->Post(prefix_ + path, body.dump(), "application/json"), "POST " + url_ + path, out);
}

int BenchHttpClient::get(const std::string& path, nlohmann::json& out) {
  return finish(impl_->client->Get(prefix_ + path), "GET " + url_ + path, out);
}

nlohmann::json BenchHttpClient::post_ok(const std::string& path, const nlohmann::json& body) {
  nlohmann::json out;
  const int status = post(path, body, out);
  if (status != 200) {
    std::string msg = out.is_object() && out.contains("error") ? out["error"].dump() : std::string("(no JSON body)");
    throw Error("POST " + url_ + path + " answered " + std::to_string(status) + ": " + msg);
  }
  return out;
}

}  // namespace agentkv::tools
