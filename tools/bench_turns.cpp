// agentkv bench turns: replays a multi-turn agent conversation against one or more running
// `agentkv serve` instances (e.g. a dense and a hybrid model), once with the prompt cache and once
// without, and reports per turn the time to first token, prompt_n, cache_n and the reuse rate.
// Turn t's prompt = turn t-1's prompt + its answer tokens + the new message of turn t, so with the
// cache every turn must reuse exactly what the slot kept (checked; a failed check aborts).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"
#include "tools/svg_plot.h"

namespace agentkv::tools {
namespace {

struct Turn {
  int64_t index = 0;
  int64_t system_tokens = 0;  // > 0 only on a turn that starts a conversation
  int64_t new_tokens = 0;
  int64_t answer_tokens = 0;  // n_predict of the turn
};

struct TurnResult {
  std::string server, mode;
  int64_t turn = 0, conversation = 0, prompt_len = 0, prompt_n = 0, cache_n = 0, predicted_n = 0, tokens_cached = 0;
  double ttft_ms = 0;  // timings.prompt_ms: start of prompt processing to the first sampled token
  double reuse() const { return prompt_len ? static_cast<double>(cache_n) / prompt_len : 0; }
};

// Turns from an agent trace: a step whose depth is below the conversation so far starts a new
// conversation of that depth (a compaction); answer_tokens (if present) sets n_predict.
std::vector<Turn> turns_from_trace(const std::string& path, int64_t default_answer) {
  std::vector<Turn> turns;
  const auto steps = read_agent_trace(path);
  // read_agent_trace drops extra keys; answer_tokens is read again here.
  std::vector<int64_t> answers;
  {
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
      const auto first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos || line[first] == '#') continue;
      const auto j = nlohmann::json::parse(line);
      answers.push_back(j.contains("answer_tokens") && j["answer_tokens"].is_number_integer()
                            ? std::max<int64_t>(1, j["answer_tokens"].get<int64_t>())
                            : default_answer);
    }
  }
  int64_t conversation_len = -1;
  for (size_t i = 0; i < steps.size(); ++i) {
    Turn t{static_cast<int64_t>(i), 0, steps[i].new_tokens, answers[i]};
    if (conversation_len < 0 || steps[i].depth < conversation_len) t.system_tokens = std::max<int64_t>(1, steps[i].depth);
    conversation_len = steps[i].depth + steps[i].new_tokens + t.answer_tokens;
    turns.push_back(t);
  }
  return turns;
}

std::vector<TurnResult> replay(BenchHttpClient& http, const std::string& label, const std::vector<Turn>& turns, bool cache,
                               int32_t n_vocab, int64_t run_id, bool check) {
  std::vector<TurnResult> out;
  std::vector<int32_t> prompt;
  int64_t conversation = -1, prev_cached = 0;
  const std::string mode = cache ? "cache" : "no-cache";
  for (const auto& t : turns) {
    if (t.system_tokens > 0 || conversation < 0) {
      ++conversation;
      prompt.clear();
      prev_cached = 0;
      for (int64_t i = 0; i < std::max<int64_t>(1, t.system_tokens); ++i)
        prompt.push_back(synthetic_token(run_id * 7919 + conversation * 131 + 1, i, n_vocab));
    }
    for (int64_t i = 0; i < t.new_tokens; ++i) prompt.push_back(synthetic_token(run_id * 7919 + 2 + t.index, i, n_vocab));
    nlohmann::json body{{"prompt", prompt}, {"n_predict", t.answer_tokens}, {"temperature", 0}, {"return_tokens", true},
                        {"cache_prompt", cache}};
    if (cache) body["session_id"] = "bench-turns-" + std::to_string(run_id) + "-" + std::to_string(conversation);
    const auto answer = http.post_ok("/completion", body);
    const auto& tm = answer.at("timings");
    TurnResult r{label, mode, t.index, conversation, static_cast<int64_t>(prompt.size()), tm.value("prompt_n", int64_t{-1}),
                 tm.value("cache_n", int64_t{-1}), tm.value("predicted_n", int64_t{0}),
                 answer.value("tokens_cached", int64_t{-1}), tm.value("prompt_ms", 0.0)};
    const std::string where = label + " " + mode + " turn " + std::to_string(t.index) + ": ";
    if (check) {
      if (r.prompt_n + r.cache_n != r.prompt_len)
        throw Error(where + "prompt_n + cache_n = " + std::to_string(r.prompt_n + r.cache_n) + ", prompt length " +
                    std::to_string(r.prompt_len));
      if (!cache && r.cache_n != 0) throw Error(where + "cache_prompt=false but cache_n = " + std::to_string(r.cache_n));
      if (cache && prev_cached > 0 && r.cache_n != prev_cached)
        throw Error(where + "cache_n = " + std::to_string(r.cache_n) + ", but the slot kept " + std::to_string(prev_cached) +
                    " tokens of this conversation after the previous turn (the prompt cache did not reuse them)");
    }
    prev_cached = r.tokens_cached;
    for (const auto& tok : answer.value("tokens", nlohmann::json::array())) prompt.push_back(tok.get<int32_t>());
    out.push_back(r);
    std::fprintf(stderr, "  %s %s turn %lld: prompt %lld, prompt_n %lld, cache_n %lld, ttft %.1f ms\n", label.c_str(),
                 mode.c_str(), static_cast<long long>(r.turn), static_cast<long long>(r.prompt_len),
                 static_cast<long long>(r.prompt_n), static_cast<long long>(r.cache_n), r.ttft_ms);
  }
  return out;
}

}  // namespace

int bench_turns(Args& a) {
  if (a.flag("--help", "-h")) {
    std::puts(
        "usage: agentkv bench turns --server URL [--server URL2 ...] [--trace FILE | --turns 8 --system 256\n"
        "         --new 64 --answer 16] [--modes cache,no-cache] [--max-turns K] [--no-check] [--out DIR]\n"
        "  Replays a conversation (turn t = previous prompt + previous answer + new message) on each\n"
        "  server with and without the prompt cache; per turn: TTFT (timings.prompt_ms), prompt_n,\n"
        "  cache_n, reuse rate. Checks prompt_n + cache_n = prompt length, cache_n = 0 without cache and,\n"
        "  with cache, cache_n = the tokens the slot kept after the previous turn. See docs/measurement.md.");
    return 0;
  }
  std::vector<std::string> servers;
  for (std::string s; !(s = a.str("--server", "", "")).empty();) servers.push_back(s);
  const std::string trace = a.str("--trace", "", "");
  const int64_t n_turns = a.num("--turns", "", 8);
  const int64_t system = a.num("--system", "", 256);
  const auto news = a.nums("--new", "", {64});
  const int64_t answer = a.num("--answer", "", 16);
  const std::string modes = a.str("--modes", "", "cache,no-cache");
  const int64_t max_turns = a.num("--max-turns", "", -1);
  const bool check = !a.flag("--no-check");
  const std::string out_dir = a.str("--out", "-o", "");
  const int64_t run_id = a.num("--run-id", "", 1);
  a.finish();
  if (servers.empty()) throw std::invalid_argument("--server URL is required (agentkv serve ...)");
  auto wants = [&](const std::string& mode) {
    std::stringstream list(modes);
    for (std::string part; std::getline(list, part, ',');)
      if (part == mode) return true;
    return false;
  };
  if (!wants("cache") && !wants("no-cache")) throw std::invalid_argument("--modes: cache, no-cache or both");
  if (n_turns < 1 || system < 1 || answer < 1) throw std::invalid_argument("--turns, --system, --answer must be >= 1");
  for (auto n : news)
    if (n < 1) throw std::invalid_argument("--new values must be >= 1");

  std::vector<Turn> turns;
  if (!trace.empty()) {
    turns = turns_from_trace(trace, answer);
  } else {
    for (int64_t i = 0; i < n_turns; ++i)
      turns.push_back({i, i == 0 ? system : 0, news[static_cast<size_t>(i) % news.size()], answer});
  }
  if (max_turns >= 0 && static_cast<int64_t>(turns.size()) > max_turns) turns.resize(static_cast<size_t>(max_turns));

  std::vector<TurnResult> all;
  int64_t run = run_id * 16;
  for (const auto& url : servers) {
    BenchHttpClient http(url);
    nlohmann::json models;
    if (http.get("/v1/models", models) != 200 || !models.contains("data") || models["data"].empty())
      throw Error("--server " + url + ": GET /v1/models did not describe a model");
    const int32_t n_vocab = models["data"][0]["meta"].value("n_vocab", 0);
    const std::string label = models["data"][0].value("id", url);
    for (bool cache : {true, false}) {
      if (!wants(cache ? "cache" : "no-cache")) continue;
      auto rs = replay(http, label, turns, cache, n_vocab, ++run, check);
      all.insert(all.end(), rs.begin(), rs.end());
    }
  }

  // Per-turn table.
  std::ostringstream table;
  table << "| server | mode | turn | prompt | prompt_n | cache_n | reuse | TTFT ms |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  char buf[256];
  for (const auto& r : all) {
    std::snprintf(buf, sizeof buf, "| %s | %s | %lld | %lld | %lld | %lld | %.1f%% | %.1f |\n", r.server.c_str(), r.mode.c_str(),
                  static_cast<long long>(r.turn), static_cast<long long>(r.prompt_len), static_cast<long long>(r.prompt_n),
                  static_cast<long long>(r.cache_n), 100 * r.reuse(), r.ttft_ms);
    table << buf;
  }
  // Totals per server and mode.
  std::ostringstream totals;
  totals << "| server | mode | turns | prompt tokens | evaluated | reused | reuse | TTFT ms total |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& r : all)
    if (std::find(keys.begin(), keys.end(), std::pair{r.server, r.mode}) == keys.end()) keys.push_back({r.server, r.mode});
  for (const auto& [server, mode] : keys) {
    int64_t n = 0, len = 0, ev = 0, re = 0;
    double ttft = 0;
    for (const auto& r : all)
      if (r.server == server && r.mode == mode) ++n, len += r.prompt_len, ev += r.prompt_n, re += r.cache_n, ttft += r.ttft_ms;
    std::snprintf(buf, sizeof buf, "| %s | %s | %lld | %lld | %lld | %lld | %.1f%% | %.1f |\n", server.c_str(), mode.c_str(),
                  static_cast<long long>(n), static_cast<long long>(len), static_cast<long long>(ev),
                  static_cast<long long>(re), len ? 100.0 * re / len : 0.0, ttft);
    totals << buf;
  }
  std::cout << "\nturns: " << turns.size() << " turns" << (check ? ", invariants checked" : "") << "\n\n"
            << totals.str() << "\n" << table.str();

  if (!out_dir.empty()) {
    make_output_dir(out_dir);
    std::ostringstream csv;
    csv << "server,mode,turn,conversation,prompt_len,prompt_n,cache_n,reuse,ttft_ms,predicted_n,tokens_cached\n";
    auto arr = nlohmann::json::array();
    for (const auto& r : all) {
      csv << r.server << ',' << r.mode << ',' << r.turn << ',' << r.conversation << ',' << r.prompt_len << ',' << r.prompt_n
          << ',' << r.cache_n << ',' << r.reuse() << ',' << r.ttft_ms << ',' << r.predicted_n << ',' << r.tokens_cached << '\n';
      arr.push_back({{"server", r.server}, {"mode", r.mode}, {"turn", r.turn}, {"conversation", r.conversation},
                     {"prompt_len", r.prompt_len}, {"prompt_n", r.prompt_n}, {"cache_n", r.cache_n}, {"reuse", r.reuse()},
                     {"ttft_ms", r.ttft_ms}, {"predicted_n", r.predicted_n}, {"tokens_cached", r.tokens_cached}});
    }
    write_text_file(out_dir + "/turns.csv", csv.str());
    write_text_file(out_dir + "/turns.json", nlohmann::json{{"servers", servers}, {"turns", arr}}.dump(1) + "\n");
    LinePlot ttft{"Time to first token per turn", "turn", "TTFT ms (timings.prompt_ms)", {}, false, {}};
    LinePlot evaluated{"Prompt tokens evaluated per turn", "turn", "prompt_n", {}, false, {}};
    for (const auto& [server, mode] : keys) {
      PlotSeries s{server + " " + mode, {}, {}, mode != "cache"}, e = s;
      for (const auto& r : all)
        if (r.server == server && r.mode == mode) {
          s.xs.push_back(r.turn), s.ys.push_back(r.ttft_ms);
          e.xs.push_back(r.turn), e.ys.push_back(r.prompt_n);
        }
      ttft.series.push_back(s), evaluated.series.push_back(e);
    }
    write_svg(out_dir + "/ttft.svg", ttft);
    write_svg(out_dir + "/prompt-n.svg", evaluated);
    write_text_file(out_dir + "/summary.md", "# turns\n\n" + totals.str() + "\n![TTFT](ttft.svg)\n\n![prompt_n](prompt-n.svg)\n\n" + table.str());
    std::cout << "\nwrote " << out_dir << "/{turns.csv,turns.json,summary.md,ttft.svg,prompt-n.svg}\n";
  }
  return 0;
}

}  // namespace agentkv::tools
