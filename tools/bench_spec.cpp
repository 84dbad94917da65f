// agentkv bench spec: greedy decode speed with speculative verification (agentkv/speculative.h)
// against plain one-token steps.
//   agentkv bench spec -m M.gguf [-n 128] [-k 1,2,4,8] [-r 2] [-t 2] [-p 256]
// The prompt is p synthetic tokens with its second half repeating its first (so that prompt
// lookup finds something). Every run starts from the evaluated prompt's snapshot and writes n
// tokens greedily. Sources: "oracle" (the drafts are the plain run's own next tokens: every draft
// is accepted, so its speed is the verification pass's cost alone), "wrong" (every draft differs
// from the plain run's token: the cost of drafts that never hold), "half" (the first k / 2 drafts
// right, the rest wrong: a rejection every pass, a hybrid's rollback each time) and "ngram" (prompt
// lookup over the sequence's tokens). Runs use batch-invariant numerics so that each source's output can be
// checked against the plain run's (a mismatch fails the bench). Reports tokens/s, drafts accepted
// and the speed-up over plain decoding; runs alternate so that a change in load hits all.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/error.h"
#include "agentkv/numerics.h"
#include "agentkv/sampling.h"
#include "agentkv/seq_snapshot.h"
#include "agentkv/speculative.h"
#include "tools/args.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"

namespace agentkv::tools {

namespace {

using Clock = std::chrono::steady_clock;

struct SpecRun {
  double seconds = 0;
  std::vector<Token> tokens;
  size_t drafted = 0, accepted = 0, passes = 0;
};

}  // namespace

int bench_spec(Args& a) {
  if (a.flag("--help", "-h")) {
    std::puts("usage: agentkv bench spec -m MODEL [-n 128] [-k 1,2,4,8] [-r 2] [-t 2] [-p 256]\n"
              "  greedy decode with speculative verification: oracle drafts (the verification cost alone),\n"
              "  always-wrong drafts, half-right drafts (a rejection every pass) and n-gram drafts (prompt\n"
              "  lookup), against plain one-token steps (docs/speculative.md)");
    return 0;
  }
  const std::string model_path = a.str("-m", "--model", "");
  const int64_t n = a.num("-n", "--n-gen", 128);
  const auto ks = a.nums("-k", "--draft-max", {1, 2, 4, 8});
  const int reps = static_cast<int>(a.num("-r", "--repetitions", 2));
  const int64_t n_prompt = a.num("-p", "--n-prompt", 256);
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  a.finish();
  if (model_path.empty()) throw std::invalid_argument("-m MODEL is required");
  for (int64_t k : ks)
    if (k < 1 || k > static_cast<int64_t>(kMaxDraft)) throw std::invalid_argument("-k: draft lengths in [1, " + std::to_string(kMaxDraft) + "]");
  set_batch_invariant(true);

  auto model = Model::load(model_path);
  const int64_t n_vocab = model->n_vocab();
  cp.n_ctx = static_cast<uint32_t>(n_prompt + n + 64);
  Context ctx(*model, cp);
  std::vector<Token> prompt;
  for (int64_t i = 0; i < n_prompt / 2; ++i) prompt.push_back(synthetic_token(7, i, static_cast<int32_t>(n_vocab)));
  const std::vector<Token> half = prompt;
  prompt.insert(prompt.end(), half.begin(), half.end());
  Batch b;
  b.add_sequence(prompt.data(), prompt.size(), 0, 0, true);
  if (ctx.decode(b) != 0) throw Error("the prompt does not fit");
  const Token first = argmax_token(ctx.last_logits(), n_vocab);
  const SeqSnapshot start = SeqSnapshot::capture(ctx, -1);

  auto plain = [&] {
    start.restore(ctx, -1);
    SpecRun r;
    r.tokens = {first};
    const auto t0 = Clock::now();
    while (static_cast<int64_t>(r.tokens.size()) < n) {
      b.clear();
      b.add(r.tokens.back(), static_cast<MemoryPos>(prompt.size() + r.tokens.size() - 1), {0}, true);
      if (ctx.decode(b) != 0) throw Error("generation does not fit");
      r.tokens.push_back(argmax_token(ctx.last_logits(), n_vocab));
      ++r.passes;
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  };
  const SpecRun reference = plain();
  auto speculative = [&](const std::string& source, size_t k) {
    start.restore(ctx, -1);
    SpecRun r;
    r.tokens = {first};
    std::vector<Token> history = prompt;
    const auto t0 = Clock::now();
    while (static_cast<int64_t>(r.tokens.size()) < n) {
      std::vector<Token> drafts;
      if (source != "ngram") {
        const size_t right = source == "oracle" ? k : source == "half" ? k / 2 : 0;
        for (size_t j = r.tokens.size(); j < std::min<size_t>(static_cast<size_t>(n), r.tokens.size() + k); ++j) {
          const Token t = reference.tokens[j];
          drafts.push_back(j - r.tokens.size() < right ? t : static_cast<Token>((t + 1) % n_vocab));
        }
      } else {
        history.resize(prompt.size());
        history.insert(history.end(), r.tokens.begin(), r.tokens.end());
        drafts = ngram_draft(history, k);
      }
      const VerifiedStep step = verify_greedy(ctx, 0, r.tokens.back(), drafts);
      r.tokens.insert(r.tokens.end(), step.tokens.begin(), step.tokens.end());
      r.drafted += drafts.size();
      r.accepted += step.n_accepted;
      ++r.passes;
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.tokens.resize(static_cast<size_t>(n));
    if (r.tokens != reference.tokens) throw Error("speculative output differs from plain greedy decoding");
    return r;
  };

  std::printf("model %s, prompt %zu tokens (half repeated), %lld tokens greedy, %d runs each, batch-invariant numerics\n",
              model_path.c_str(), prompt.size(), static_cast<long long>(n), reps);
  std::printf("| source | k | t/s (median) | passes | drafts accepted | × plain |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
  struct Row {
    std::string source;
    int64_t k;
    std::vector<double> tps;
    SpecRun last;
  };
  std::vector<Row> rows = {{"plain", 0, {}, {}}};
  for (int64_t k : ks)
    for (const char* source : {"oracle", "wrong", "half", "ngram"}) rows.push_back({source, k, {}, {}});
  for (int rep = 0; rep < reps; ++rep)
    for (Row& row : rows) {
      row.last = row.source == "plain" ? plain() : speculative(row.source, static_cast<size_t>(row.k));
      row.tps.push_back(static_cast<double>(n - 1) / row.last.seconds);
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  const double base = median(rows[0].tps);
  for (const Row& row : rows) {
    const double tps = median(row.tps);
    std::printf("| %s | %lld | %.2f | %zu | %zu / %zu | %.2f |\n", row.source.c_str(), static_cast<long long>(row.k), tps,
                row.last.passes, row.last.accepted, row.last.drafted, tps / base);
  }
  return 0;
}

}  // namespace agentkv::tools
