// Shared pieces of the measurement benches (agentkv bench fakeprefix | turns | handoff):
// agent traces, the depth bucket rule, output folders and a small JSON-over-HTTP client.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/args.h"

namespace agentkv::tools {

// One step of an agent trace (bench/traces/*.jsonl, one JSON object a line):
//   {"step": i, "depth": D, "new_tokens": N}
// depth: tokens already in the conversation before the step (what a prompt cache holds);
// new_tokens: tokens the step appends (user message, tool output, ...). Extra keys are ignored.
// A GUI agent's step may also carry "screenshot": "WIDTHxHEIGHT" (a synthetic screen of that size)
// or the path of a PNG / JPEG file: an image the step appends before its text.
struct TraceStep {
  int64_t step = 0;
  int64_t depth = 0;
  int64_t new_tokens = 0;
  std::string screenshot;  // empty: text only
};

// Reads a trace; agentkv::Error naming file and line for malformed JSON, missing or negative
// fields, new_tokens < 1, or an empty trace. Blank lines and lines starting with '#' are skipped.
std::vector<TraceStep> read_agent_trace(const std::string& path);

// The bucket rule: a depth is rounded UP to a multiple of `bucket` tokens (bucket <= 1: unchanged),
// so neighbouring steps attend the same number of keys and share one prefill_tps(L) measurement.
int64_t bucket_depth(int64_t depth, int64_t bucket);

// Creates the folder (and parents) when missing; agentkv::Error when it cannot.
void make_output_dir(const std::string& dir);
void write_text_file(const std::string& path, const std::string& text);
// The whole file; agentkv::Error naming it when it cannot be read.
std::string read_text_file(const std::string& path);

// Deterministic token ids in [first, first + span) (the special tokens of a vocabulary sit at its
// end, so benches stay in the lower range): token i of stream `stream`.
int32_t synthetic_token(int64_t stream, int64_t i, int32_t n_vocab);

// Minimal JSON client for `agentkv serve` (http://host:port[/prefix]). Every call returns the
// HTTP status and the parsed body (null when the body is not JSON); transport errors throw
// agentkv::Error naming the URL.
class BenchHttpClient {
 public:
  explicit BenchHttpClient(const std::string& url, double timeout_s = 600);
  ~BenchHttpClient();
  int post(const std::string& path, const nlohmann::json& body, nlohmann::json& out);
  int get(const std::string& path, nlohmann::json& out);
  // POST that must answer 200; otherwise agentkv::Error with the server's message.
  nlohmann::json post_ok(const std::string& path, const nlohmann::json& body);
  const std::string& url() const { return url_; }

 private:
  struct Impl;
  Impl* impl_;
  std::string url_;
  std::string prefix_;
};

// A synthetic screenshot of w x h RGB pixels (gradients and text-like stripes; an encoder's cost
// does not depend on the pixels).
std::vector<uint8_t> synthetic_screen(int w, int h);
// "WIDTHxHEIGHT" (both > 0) into w, h; false for anything else (a file name).
bool parse_screen_size(const std::string& s, int& w, int& h);

// Median of a non-empty list.
double median(std::vector<double> v);

}  // namespace agentkv::tools
