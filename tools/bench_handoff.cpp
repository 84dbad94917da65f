// agentkv bench handoff: the prefill/decode hand-off gate. A prefill side evaluates a prompt and
// saves the sequence state (tokens + last logits); a decode side adopts it and answers. Checked:
//   - same prompt: the decoder evaluates 0 prompt tokens and its greedy answer equals a fresh run;
//   - extended prompt: it evaluates exactly the extension, answer equal to a fresh run;
//   - a second request diverging inside the adopted prompt: answer equal to a fresh run (dense
//     models keep the common prefix; a hybrid one re-evaluates, its state cannot drop a suffix).
// Reported: the decoder's prompt_n per case and the time saved against re-prefilling the prompt.
// In-process (-m MODEL: two separate contexts and a state file between them) or across two
// servers (--prefill-server URL --decode-server URL: POST /v1/prefill writes the state into a
// --slot-save-path folder both share, POST /slots/0?action=adopt loads it on the decoder). A failed check exits 1 with the reason.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/session_state.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"

namespace agentkv::tools {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct CaseResult {
  std::string name;
  int64_t prompt_len = 0;
  int64_t prompt_n = 0;           // prompt tokens the decoder evaluated
  int64_t expected_prompt_n = 0;  // -1: not checked (a hybrid divergence re-evaluates by design)
  bool same_answer = false;
  double adopt_ms = 0;     // state load (+ the decoder's own prompt evaluation)
  double reprefill_ms = 0; // the fresh run's prompt evaluation
  std::vector<int32_t> answer, fresh_answer;
};

std::vector<int32_t> synthetic_prompt(int64_t stream, int64_t n, int32_t n_vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(synthetic_token(stream, i, n_vocab));
  return p;
}

// ---- in-process ----

class Engine {
 public:
  Engine(const std::string& path, int threads, uint32_t n_ctx) : model_(Model::load(path)) {
    cp_.n_threads = threads;
    cp_.n_ctx = n_ctx;
  }
  std::unique_ptr<Context> context() const { return std::make_unique<Context>(*model_, cp_); }
  int32_t n_vocab() const { return static_cast<int32_t>(model_->n_vocab()); }

  // Evaluates tokens [from, to) of prompt on seq 0; returns the evaluation time in ms.
  static double eval(Context& ctx, const std::vector<int32_t>& prompt, size_t from, size_t to) {
    if (from >= to) return 0;
    Batch b;
    for (size_t i = from; i < to; ++i) b.add(prompt[i], static_cast<MemoryPos>(i), {0}, i + 1 == to);
    const auto t0 = Clock::now();
    if (ctx.decode(b) != 0) throw Error("handoff: the context has no room");
    return since(t0);
  }
  static int32_t argmax(const float* logits, int64_t n) {
    return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
  }
  // Greedy continuation from the given logits (the prompt ends at position pos - 1).
  static std::vector<int32_t> generate(Context& ctx, std::vector<float> logits, int64_t pos, int n_gen) {
    std::vector<int32_t> out;
    const int64_t nv = ctx.model().n_vocab();
    for (int i = 0; i < n_gen; ++i) {
      out.push_back(argmax(logits.data(), nv));
      if (i + 1 == n_gen) break;
      Batch b;
      b.add(out.back(), static_cast<MemoryPos>(pos + i), {0}, true);
      if (ctx.decode(b) != 0) throw Error("handoff: the context has no room to generate");
      logits.assign(ctx.last_logits(), ctx.last_logits() + nv);
    }
    return out;
  }
  // A fresh run: a new context, no state; `split` reproduces the decoder's batch boundary (tokens
  // it had from the state, then the rest) so that the comparison isolates the state transfer.
  std::vector<int32_t> fresh(const std::vector<int32_t>& prompt, size_t split, int n_gen, double& prompt_ms) const {
    auto ctx = context();
    prompt_ms = eval(*ctx, prompt, 0, split) + eval(*ctx, prompt, split, prompt.size());
    return generate(*ctx, {ctx->last_logits(), ctx->last_logits() + n_vocab()}, static_cast<int64_t>(prompt.size()), n_gen);
  }

 private:
  std::unique_ptr<Model> model_;
  ContextParams cp_;
};

std::vector<CaseResult> run_in_process(const std::string& model_path, int threads, int64_t prompt_len, int64_t ext_len,
                                       int64_t diverge_at, int n_gen, const std::string& state_path, double& prefill_ms,
                                       size_t& state_bytes) {
  Engine eng(model_path, threads, static_cast<uint32_t>(prompt_len + ext_len + 2 * n_gen + 64));
  const auto prompt = synthetic_prompt(1, prompt_len, eng.n_vocab());

  {  // The prefill side: its own context, gone before the decoder starts.
    auto pre = eng.context();
    prefill_ms = Engine::eval(*pre, prompt, 0, prompt.size());
    SaveOptions opt;
    opt.with_tokens = true;
    opt.tokens = prompt;
    opt.logits = std::span<const float>(pre->last_logits(), static_cast<size_t>(eng.n_vocab()));
    const auto blob = save_seq(*pre, 0, opt);
    write_state_file(state_path, blob);
    state_bytes = blob.size();
  }

  std::vector<CaseResult> results;
  // The decoder answers `request` after adopting the prefill state; returns prompt_n and the answer.
  auto adopt_and_answer = [&](Context& dec, const std::vector<int32_t>& request, CaseResult& r) {
    const auto t0 = Clock::now();
    LoadedState st = load_seq(dec, read_state_file(state_path), 0, state_path);
    if (!st.has_tokens) throw Error("handoff: the state carries no tokens");
    size_t keep = 0;
    while (keep < st.tokens.size() && keep < request.size() && st.tokens[keep] == request[keep]) ++keep;
    std::vector<float> logits = st.logits;
    if (keep == request.size() && keep == st.tokens.size() && !logits.empty()) {
      // nothing to evaluate: the saved logits give the first token
    } else {
      if (keep == request.size()) --keep;  // the last token must be evaluated for its logits
      if (keep < st.tokens.size() && !dec.memory().seq_rm(0, static_cast<MemoryPos>(keep), -1)) {
        dec.memory().seq_rm(0, -1, -1);  // a recurrent state cannot drop a suffix: start over
        keep = 0;
      }
      Engine::eval(dec, request, keep, request.size());
      logits.assign(dec.last_logits(), dec.last_logits() + eng.n_vocab());
    }
    r.adopt_ms = since(t0);
    r.prompt_len = static_cast<int64_t>(request.size());
    r.prompt_n = static_cast<int64_t>(request.size() - keep);
    r.answer = Engine::generate(dec, logits, r.prompt_len, n_gen);
    return keep;
  };

  {
    CaseResult r{"same prompt"};
    auto dec = eng.context();
    const size_t keep = adopt_and_answer(*dec, prompt, r);
    r.expected_prompt_n = 0;
    r.fresh_answer = eng.fresh(prompt, keep, n_gen, r.reprefill_ms);
    r.same_answer = r.answer == r.fresh_answer;
    results.push_back(r);

    // A second request on the same decoder that diverges inside the adopted prompt.
    CaseResult d{"diverging 2nd request"};
    auto request = std::vector<int32_t>(prompt.begin(), prompt.begin() + diverge_at);
    const auto tail = synthetic_prompt(3, prompt_len - diverge_at + ext_len, eng.n_vocab());
    request.insert(request.end(), tail.begin(), tail.end());
    size_t keep2 = diverge_at;
    if (!dec->memory().seq_rm(0, static_cast<MemoryPos>(diverge_at), -1)) {
      dec->memory().seq_rm(0, -1, -1);
      keep2 = 0;
    }
    const auto t0 = Clock::now();
    Engine::eval(*dec, request, keep2, request.size());
    d.adopt_ms = since(t0);
    d.prompt_len = static_cast<int64_t>(request.size());
    d.prompt_n = static_cast<int64_t>(request.size() - keep2);
    d.expected_prompt_n = dec->needs_snapshots() ? -1 : d.prompt_len - diverge_at;
    d.answer = Engine::generate(*dec, {dec->last_logits(), dec->last_logits() + eng.n_vocab()}, d.prompt_len, n_gen);
    d.fresh_answer = eng.fresh(request, keep2, n_gen, d.reprefill_ms);
    d.same_answer = d.answer == d.fresh_answer;
    results.push_back(d);
  }
  {
    CaseResult r{"extended prompt"};
    auto request = prompt;
    const auto ext = synthetic_prompt(2, ext_len, eng.n_vocab());
    request.insert(request.end(), ext.begin(), ext.end());
    auto dec = eng.context();
    const size_t keep = adopt_and_answer(*dec, request, r);
    r.expected_prompt_n = ext_len;
    r.fresh_answer = eng.fresh(request, keep, n_gen, r.reprefill_ms);
    r.same_answer = r.answer == r.fresh_answer;
    results.push_back(r);
  }
  return results;
}

// ---- across two servers ----

std::vector<CaseResult> run_servers(const std::string& prefill_url, const std::string& decode_url, const std::string& action,
                                    int64_t prompt_len, int64_t ext_len, int64_t diverge_at, int n_gen,
                                    const std::string& state_name, double& prefill_ms) {
  BenchHttpClient pre(prefill_url), dec(decode_url);
  nlohmann::json models;
  if (dec.get("/v1/models", models) != 200 || !models.contains("data") || models["data"].empty())
    throw Error("--decode-server: GET /v1/models did not describe a model");
  const int32_t n_vocab = models["data"][0]["meta"].value("n_vocab", 0);
  const auto prompt = synthetic_prompt(1, prompt_len, n_vocab);
  auto completion = [&](BenchHttpClient& http, const std::vector<int32_t>& p, int n, bool cache, int slot) {
    nlohmann::json body{{"prompt", p}, {"n_predict", n}, {"temperature", 0}, {"return_tokens", true}, {"cache_prompt", cache}};
    if (slot >= 0) body["id_slot"] = slot;
    return http.post_ok("/completion", body);
  };
  auto tokens_of = [](const nlohmann::json& a) { return a.value("tokens", std::vector<int32_t>{}); };
  auto adopt = [&]() {
    const auto t0 = Clock::now();
    dec.post_ok("/slots/0?action=" + action, {{"filename", state_name}});
    return since(t0);
  };

  // The prefill side: POST /v1/prefill evaluates the prompt and writes the slot's state (tokens,
  // last logits, a checkpoint for hybrid models) to the shared --slot-save-path folder.
  const auto made = pre.post_ok("/v1/prefill", {{"prompt", prompt}, {"filename", state_name}});
  prefill_ms = made.value("timings", nlohmann::json::object()).value("prompt_ms", 0.0);
  if (made.value("n_tokens", int64_t{-1}) != prompt_len)
    throw Error("/v1/prefill: the state holds " + made.value("n_tokens", nlohmann::json(-1)).dump() + " tokens, expected " +
                std::to_string(prompt_len));

  std::vector<CaseResult> results;
  auto run_case = [&](const std::string& name, const std::vector<int32_t>& request, int64_t expected, bool adopt_first) {
    CaseResult r{name};
    r.adopt_ms = adopt_first ? adopt() : 0;
    const auto a = completion(dec, request, n_gen, true, 0);
    r.adopt_ms += a["timings"].value("prompt_ms", 0.0);
    r.prompt_len = static_cast<int64_t>(request.size());
    r.prompt_n = a["timings"].value("prompt_n", int64_t{-1});
    r.expected_prompt_n = expected;
    r.answer = tokens_of(a);
    const auto fresh = completion(dec, request, n_gen, false, 1);  // another slot: slot 0's cache stays
    r.reprefill_ms = fresh["timings"].value("prompt_ms", 0.0);
    r.fresh_answer = tokens_of(fresh);
    r.same_answer = r.answer == r.fresh_answer;
    results.push_back(r);
  };
  run_case("same prompt", prompt, 0, true);
  auto diverged = std::vector<int32_t>(prompt.begin(), prompt.begin() + diverge_at);
  const auto tail = synthetic_prompt(3, prompt_len - diverge_at + ext_len, n_vocab);
  diverged.insert(diverged.end(), tail.begin(), tail.end());
  run_case("diverging 2nd request", diverged, -1, false);
  auto extended = prompt;
  const auto ext = synthetic_prompt(2, ext_len, n_vocab);
  extended.insert(extended.end(), ext.begin(), ext.end());
  run_case("extended prompt", extended, ext_len, true);
  return results;
}

}  // namespace

int bench_handoff(Args& a) {
  if (a.flag("--help", "-h")) {
    std::puts(
        "usage: agentkv bench handoff -m MODEL [-t 2] [--state-file PATH]\n"
        "       agentkv bench handoff --prefill-server URL --decode-server URL [--state-name NAME] [--action adopt]\n"
        "         [--prompt 256] [--extension 32] [--diverge-at P/2] [--gen 8] [--json]\n"
        "  The prefill side evaluates a prompt and saves its state; the decode side adopts it and answers.\n"
        "  Checks (exit 1 when one fails): prompt_n = 0 for the same prompt, = the extension for an\n"
        "  extended one; every answer equals a fresh run's, including a 2nd request that diverges.\n"
        "  Servers: both need --slot-save-path on one shared folder (and at least 2 slots on the decoder).");
    return 0;
  }
  const std::string model_path = a.str("-m", "--model", "");
  const std::string prefill_url = a.str("--prefill-server", "", "");
  const std::string decode_url = a.str("--decode-server", "", "");
  const std::string action = a.str("--action", "", "adopt");
  const int threads = static_cast<int>(a.num("-t", "--threads", 2));
  const int64_t prompt_len = a.num("--prompt", "", 256);
  const int64_t ext_len = a.num("--extension", "", 32);
  const int64_t diverge_at = a.num("--diverge-at", "", prompt_len / 2);
  const int n_gen = static_cast<int>(a.num("--gen", "", 8));
  const bool as_json = a.flag("--json");
  std::string state = a.str("--state-file", "--state-name", "");
  a.finish();
  if (model_path.empty() == (prefill_url.empty() || decode_url.empty()))
    throw std::invalid_argument("give -m MODEL, or both --prefill-server URL and --decode-server URL");
  if (prompt_len < 2 || ext_len < 1 || n_gen < 1) throw std::invalid_argument("--prompt >= 2, --extension >= 1, --gen >= 1");
  if (diverge_at < 1 || diverge_at >= prompt_len) throw std::invalid_argument("--diverge-at must be in [1, --prompt)");
  if (action != "adopt" && action != "restore") throw std::invalid_argument("--action: adopt or restore");

  double prefill_ms = 0;
  size_t state_bytes = 0;
  std::vector<CaseResult> results;
  std::string where;
  const bool keep_state_file = !state.empty();
  if (!model_path.empty()) {
    if (state.empty()) state = (std::filesystem::temp_directory_path() / ("agentkv-handoff-" + std::to_string(::getpid()) + ".state")).string();
    results = run_in_process(model_path, threads, prompt_len, ext_len, diverge_at, n_gen, state, prefill_ms, state_bytes);
    std::error_code ec;
    if (!keep_state_file) std::filesystem::remove(state, ec);
    where = model_path + " (in-process: two contexts, state file)";
  } else {
    if (state.empty()) state = "agentkv-handoff.bin";
    results = run_servers(prefill_url, decode_url, action, prompt_len, ext_len, diverge_at, n_gen, state, prefill_ms);
    where = prefill_url + " -> " + decode_url + " (" + action + ")";
  }

  std::vector<std::string> failures;
  nlohmann::json cases = nlohmann::json::array();
  std::ostringstream table;
  table << "| case | prompt | decoder prompt_n | expected | answer = fresh | decoder ms | re-prefill ms | saved ms |\n"
           "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n";
  char buf[512];
  for (const auto& r : results) {
    if (r.expected_prompt_n >= 0 && r.prompt_n != r.expected_prompt_n)
      failures.push_back(r.name + ": decoder prompt_n = " + std::to_string(r.prompt_n) + ", expected " +
                         std::to_string(r.expected_prompt_n));
    if (!r.same_answer) failures.push_back(r.name + ": the answer differs from a fresh run");
    std::snprintf(buf, sizeof buf, "| %s | %lld | %lld | %s | %s | %.2f | %.2f | %.2f |\n", r.name.c_str(),
                  static_cast<long long>(r.prompt_len), static_cast<long long>(r.prompt_n),
                  r.expected_prompt_n >= 0 ? std::to_string(r.expected_prompt_n).c_str() : "-",
                  r.same_answer ? "yes" : "NO", r.adopt_ms, r.reprefill_ms, r.reprefill_ms - r.adopt_ms);
    table << buf;
    cases.push_back({{"case", r.name}, {"prompt_len", r.prompt_len}, {"prompt_n", r.prompt_n},
                     {"expected_prompt_n", r.expected_prompt_n >= 0 ? nlohmann::json(r.expected_prompt_n) : nlohmann::json(nullptr)},
                     {"same_answer", r.same_answer}, {"decoder_ms", r.adopt_ms}, {"reprefill_ms", r.reprefill_ms},
                     {"saved_ms", r.reprefill_ms - r.adopt_ms}, {"answer", r.answer}, {"fresh_answer", r.fresh_answer}});
  }
  if (as_json) {
    std::cout << nlohmann::json{{"setup", where}, {"prefill_ms", prefill_ms}, {"state_bytes", state_bytes},
                                {"cases", cases}, {"passed", failures.empty()}, {"failures", failures}}
                     .dump(1)
              << "\n";
  } else {
    std::cout << "handoff: " << where << "\nprefill side: " << prefill_ms << " ms"
              << (state_bytes ? ", state " + std::to_string(state_bytes) + " bytes" : "") << "\n\n"
              << table.str();
  }
  for (const auto& f : failures) std::fprintf(stderr, "agentkv bench handoff: FAILED: %s\n", f.c_str());
  return failures.empty() ? 0 : 1;
}

}  // namespace agentkv::tools
