// agentkv bench grammar: decode speed with a grammar (constrained decoding) vs without.
//   agentkv bench grammar -m M.gguf [--json-schema FILE | --grammar FILE] [-n 128] [-r 3] [-t 2]
//                         [--temp 0.8] [--seed 1]
// Both runs decode n tokens one at a time after the same short prompt and sample every token
// with the server's default chain (penalties off, top-k 40, top-p 0.95, min-p 0.05, temperature);
// the constrained run samples through server::GrammarRun exactly as the server does. When the
// grammar completes (an end-of-generation token is sampled) it starts again, so that both runs
// decode the same number of tokens. Reports tokens/s of both, their ratio, and how often the
// grammar needed a full token mask.
#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/seq_snapshot.h"
#include "agentkv/gbnf.h"
#include "agentkv/json_schema.h"
#include "server/grammar_run.h"
#include "tools/args.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"

namespace agentkv::tools {

namespace {

using Clock = std::chrono::steady_clock;

const char* const kDefaultSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "minLength": 1, "maxLength": 24},
  "kind": {"enum": ["file", "dir", "link"]},
  "size": {"type": "integer"},
  "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
  "owner": {"type": "object", "properties": {"id": {"type": "integer"}, "login": {"type": "string", "maxLength": 16}},
            "required": ["id"]}},
  "required": ["name", "kind", "tags"]})";

struct Run {
  double seconds = 0;
  double sample_seconds = 0;  // in the sampler (and the grammar)
  int64_t tokens = 0;
  int64_t documents = 0;  // completed grammar matches
};

}  // namespace

int bench_grammar(Args& a) {
  const std::string model_path = a.str("-m", "--model", "");
  const std::string schema_path = a.str("--json-schema", "", "");
  const std::string grammar_path = a.str("--grammar", "", "");
  const int64_t n = a.num("-n", "--n-gen", 128);
  const int reps = static_cast<int>(a.num("-r", "--repetitions", 3));
  const double temp = a.real("--temp", "", 0.8);
  const uint32_t seed = static_cast<uint32_t>(a.num("--seed", "", 1));
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  a.finish();
  if (model_path.empty()) throw std::invalid_argument("-m MODEL is required");
  if (!schema_path.empty() && !grammar_path.empty()) throw std::invalid_argument("--json-schema or --grammar, not both");

  std::string gbnf = !grammar_path.empty() ? read_text_file(grammar_path)
                     : grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(
                           schema_path.empty() ? std::string(kDefaultSchema) : read_text_file(schema_path)));
  auto g = std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf));

  auto model = Model::load(model_path);
  const Tokenizer& tok = model->tokenizer();
  cp.n_ctx = static_cast<uint32_t>(n + 64);
  Context ctx(*model, cp);
  const auto t_trie = Clock::now();
  grammar::TokenTrie trie(tok);
  const double trie_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_trie).count();

  // The prompt, evaluated once; every run starts from its snapshot.
  const std::vector<Token> prompt = tok.encode("Describe a file of the repository as JSON:\n", false, true);
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<MemoryPos>(i), {0}, i + 1 == prompt.size());
  if (ctx.decode(b) != 0) throw Error("the prompt does not fit");
  const std::vector<float> prompt_logits(ctx.last_logits(), ctx.last_logits() + model->n_vocab());
  const SeqSnapshot start = SeqSnapshot::capture(ctx, -1);

  SamplerParams sp;
  sp.temperature = static_cast<float>(temp);
  sp.seed = seed;
  server::MatcherCache cache;
  auto matcher = cache.get(g);
  server::GrammarSettings settings;
  settings.grammar = g;

  auto run_once = [&](bool constrained) {
    start.restore(ctx, -1);
    Sampler sampler(sp);
    std::optional<server::GrammarRun> run;
    if (constrained) run.emplace(matcher, trie, settings);
    std::vector<float> scratch;
    std::vector<int32_t> history(prompt.begin(), prompt.end());
    const float* logits = prompt_logits.data();
    Run r;
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
      const auto ts = Clock::now();
      int32_t id = constrained ? run->sample(sampler, logits, model->n_vocab(), history, scratch)
                               : sampler.sample(logits, model->n_vocab(), history);
      if (constrained) {
        if (id < 0 || tok.is_eog(id)) {  // document complete: start another one
          ++r.documents;
          run.emplace(matcher, trie, settings);
          if (id < 0) id = run->sample(sampler, logits, model->n_vocab(), history, scratch);
        }
        if (!tok.is_eog(id)) run->accept(id, tok.token_to_piece(id, false));
      }
      r.sample_seconds += std::chrono::duration<double>(Clock::now() - ts).count();
      history.push_back(id);
      b.clear();
      b.add(id, static_cast<MemoryPos>(history.size() - 1), {0}, true);
      if (ctx.decode(b) != 0) throw Error("generation does not fit");
      logits = ctx.last_logits();
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.tokens = n;
    return r;
  };

  std::printf("grammar: %zu bytes of GBNF, token trie of %d tokens (%zu nodes) built in %.0f ms\n", gbnf.size(),
              trie.n_vocab(), trie.nodes().size(), trie_ms);
  std::printf("| run | tg%lld t/s (median of %d) | sampling ms/token | documents |\n| --- | ---: | ---: | ---: |\n",
              static_cast<long long>(n), reps);
  // Runs alternate (unconstrained, constrained, ...) so that a change in machine load hits both.
  std::vector<double> v[2], sample_ms[2];
  int64_t docs = 0;
  for (int rep = 0; rep <= reps; ++rep) {
    for (int constrained = 0; constrained < 2; ++constrained) {
      const Run r = run_once(constrained);
      if (rep == 0) {  // warm-up; the constrained one fills the grammar's memo (cold)
        if (constrained)
          std::printf("| grammar, first run (cold memo) | %.2f | %.3f | %lld |\n", r.tokens / r.seconds,
                      1e3 * r.sample_seconds / r.tokens, static_cast<long long>(r.documents));
        continue;
      }
      v[constrained].push_back(r.tokens / r.seconds);
      sample_ms[constrained].push_back(1e3 * r.sample_seconds / r.tokens);
      if (constrained) docs += r.documents;
    }
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x.size() % 2 ? x[x.size() / 2] : (x[x.size() / 2 - 1] + x[x.size() / 2]) / 2;
  };
  for (int constrained = 0; constrained < 2; ++constrained)
    std::printf("| %s | %.2f | %.3f | %s |\n", constrained ? "grammar" : "unconstrained", median(v[constrained]),
                median(sample_ms[constrained]), constrained ? std::to_string(docs / reps).c_str() : "-");
  std::printf("\nconstrained / unconstrained tg: %.3f; the grammar adds %.3f ms per token to sampling (%zu grammar states)\n",
              median(v[1]) / median(v[0]), median(sample_ms[1]) - median(sample_ms[0]), matcher->n_states());
  return 0;
}

}  // namespace agentkv::tools
