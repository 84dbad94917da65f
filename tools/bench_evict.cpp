// agentkv bench evict: what a context-shift eviction policy (agentkv/retention.h) costs in output
// quality at a KV budget, against the full cache, and what its scoring costs in time.
//
// Quality: for each window of -c tokens of the text, the first L = c - S tokens are the context
// and the last S (--score) are scored. All but the last context token are evaluated; then the
// policy drops positions until budget × (L - 1) remain (no eviction for the full cache); then the
// last context token and the scored tokens are evaluated, and every one of the S next-token
// distributions is compared with the full cache's (KL, top-1, PPL). Pass-key cases are answered
// the same way: the prompt but its last token, the eviction, then the answer. The scoring
// policies keep the first 4 positions and the newest half of what stays (at least the 32 of the
// observation window; agentkv/retention.h), positional keeps nothing at the front (llama-server's
// n_keep = 0), sinks the first 4.
//
// --oracle adds, per budget, snapkv scored with the queries of the scored tokens themselves (the
// window is evaluated whole first, then cut back), by raw attention (no pooling, no recent half):
// what an attention-score policy could reach if it knew the next queries — the ceiling the
// observable policies are measured against. It has no recall column (its answers would be the
// ones it is scored with).
//
// Cost (--cost-depth D): a D-token prefill of the text, timed, 32 decoded tokens (the observation
// window), then each policy's choice of D / 2 positions to drop, timed: the ratio of the two.
// docs/quality-bench.md, "Eviction".
#include <algorithm>
#include <bit>
#include <chrono>
#include <map>
#include <memory>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "agentkv/retention.h"
#include "agentkv/retrieval_heads.h"
#include "tools/args.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"
#include "tools/kv_flags.h"
#include "tools/quality_answer.h"
#include "tools/quality_divergence.h"
#include "tools/quality_passkey.h"
#include "tools/svg_plot.h"

namespace agentkv::tools {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

constexpr int kScoredKeep = 4;  // the scoring policies' front, as StreamingLLM's sinks

// One setting: a policy at a budget, or the full cache (no policy).
struct Setting {
  std::optional<EvictPolicy> policy;
  double budget = 1.0;
  bool oracle = false;  // snapkv scored with the scored tokens' own queries
  // Retrieval heads instead of a policy: a windowed cache whose tail keeps these KV heads' rows
  // (KvOptions::tail_heads), its window sized so that the rows held are `budget` of the
  // full cache's.
  int retrieval_heads = 0;
  std::string label() const {
    std::ostringstream o;
    if (retrieval_heads > 0) {
      o << "retrieval heads (" << retrieval_heads << ") @ " << static_cast<int>(std::lround(budget * 100)) << " %";
      return o.str();
    }
    if (!policy) return "full cache";
    o << evict_policy_name(*policy) << (oracle ? " (oracle)" : "") << " @ " << static_cast<int>(std::lround(budget * 100)) << " %";
    return o.str();
  }
  std::string name() const { return retrieval_heads > 0 ? "retrieval-heads" : policy ? evict_policy_name(*policy) : "full"; }
};

// The contexts of the retrieval-head settings: one per window size, all with the same kept heads.
class RetrievalHeadContexts {
 public:
  RetrievalHeadContexts(const Model& model, const ContextParams& base, std::vector<uint64_t> masks)
      : model_(model), base_(base), masks_(std::move(masks)) {
    for (uint64_t m : masks_) kept_ += std::popcount(m);
    const ModelConfig& cfg = model.config();
    total_ = cfg.n_attention_layers() * static_cast<int>(cfg.n_head_kv);
  }
  int kept() const { return kept_; }
  // A window exists for the budget: below the full cache, above what the kept heads alone hold.
  bool fits(double budget) const { return kept_ > 0 && budget < 1 && budget * total_ > kept_; }
  // The context whose window makes n positions cost `budget` of their full rows: W rows of every
  // head and n - W rows of the kept ones, W = n (budget H - k) / (H - k).
  Context& for_budget(double budget, int64_t n) {
    const double w = double(n) * (budget * total_ - kept_) / double(total_ - kept_);
    const auto hot = static_cast<uint32_t>(std::max<int64_t>(1, std::lround(w)));
    auto& slot = contexts_[hot];
    if (!slot) {
      ContextParams cp = base_;
      cp.kv.hot_cells = hot;
      cp.n_ubatch = std::min(cp.n_ubatch, std::max(1u, hot / 8));
      cp.kv.tail_type_k = cp.kv.type_k;
      cp.kv.tail_type_v = cp.kv.type_v;
      cp.kv.tail_heads = masks_;
      cp.kv.query_window = 0;
      slot = std::make_unique<Context>(model_, cp);
    }
    return *slot;
  }

 private:
  const Model& model_;
  ContextParams base_;
  std::vector<uint64_t> masks_;
  int kept_ = 0, total_ = 0;
  std::map<uint32_t, std::unique_ptr<Context>> contexts_;
};

// Drops positions of sequence 0 (holding [0, n_past)) by the setting until budget × n_past remain;
// returns what it then holds.
MemoryPos evict_to_budget(Context& ctx, const Setting& s, MemoryPos n_past) {
  if (!s.policy || s.retrieval_heads > 0) return n_past;
  EvictionRequest r;
  r.seq = 0;
  r.n_past = n_past;
  r.policy = *s.policy;
  const bool scored = r.policy == EvictPolicy::KeyDiff || r.policy == EvictPolicy::SnapKV;
  r.n_keep = scored ? kScoredKeep : 0;
  r.n_recent = scored ? static_cast<int>(kSnapKvWindow) : 0;
  r.n_discard = n_past - static_cast<int>(std::lround(s.budget * n_past));
  r.raw_attention = s.oracle;
  const std::vector<MemoryPos> dropped = choose_evictions(ctx, r);
  evict_positions(ctx, 0, dropped, n_past);
  return n_past - static_cast<MemoryPos>(dropped.size());
}

struct Row {
  Setting setting;
  double ppl = 0;
  DivergenceStats divergence;
  std::vector<double> recall;
};

// The S next-token log-probabilities (f16, renormalized) of one window under a setting, and the
// scored tokens' NLL added to *nll.
std::vector<uint16_t> score_window(Context& ctx, const Setting& s, std::span<const Token> window, int64_t n_score,
                                   double* nll) {
  const int64_t n_vocab = ctx.model().n_vocab();
  const int64_t L = static_cast<int64_t>(window.size()) - n_score;
  ctx.memory().clear();
  Batch b;
  // The oracle records the queries of the tokens it will score, then forgets their positions.
  b.add_sequence(window.data(), s.oracle ? window.size() - 1 : static_cast<size_t>(L - 1), 0, 0, false);
  if (ctx.decode(b) != 0) throw Error("a window does not fit in the context");
  if (s.oracle) ctx.memory().seq_rm(0, static_cast<MemoryPos>(L - 1), -1);
  const MemoryPos at = evict_to_budget(ctx, s, static_cast<MemoryPos>(L - 1));
  b.clear();
  for (int64_t j = 0; j < n_score; ++j) b.add(window[static_cast<size_t>(L - 1 + j)], at + static_cast<MemoryPos>(j), {0}, true);
  if (ctx.decode(b) != 0) throw Error("a window does not fit in the context");
  std::vector<uint16_t> out(static_cast<size_t>(n_score * n_vocab));
  for (int64_t j = 0; j < n_score; ++j) {
    const float* logits = ctx.logits(static_cast<int>(j));
    *nll += double(logprobs_f16(logits, n_vocab, out.data() + j * n_vocab)) - logits[window[static_cast<size_t>(L + j)]];
  }
  return out;
}

void print_table(const std::vector<Row>& rows, const std::vector<long long>& depths, double full_ppl) {
  std::printf("| setting | PPL | ΔPPL %% | mean KL | KL p99 | top-1 %% |");
  for (long long d : depths) std::printf(" recall @%lld |", d);
  std::printf("\n| --- | ---: | ---: | ---: | ---: | ---: |");
  for (size_t d = 0; d < depths.size(); ++d) std::printf(" ---: |");
  std::printf("\n");
  for (const Row& r : rows) {
    const bool ref = !r.setting.policy && r.setting.retrieval_heads == 0;
    std::printf("| %s | %.3f | %+.3f | %s | %s | %s |", r.setting.label().c_str(), r.ppl, 100.0 * (r.ppl / full_ppl - 1),
                ref ? "—" : std::to_string(r.divergence.mean_kl()).c_str(),
                ref ? "—" : std::to_string(r.divergence.kl_quantile(0.99)).c_str(),
                ref ? "—" : (std::to_string(100.0 * r.divergence.top1_agreement()).substr(0, 5)).c_str());
    for (size_t d = 0; d < depths.size(); ++d)
      d < r.recall.size() ? std::printf(" %.2f |", r.recall[d]) : std::printf(" — |");
    std::printf("\n");
  }
}

int measure_cost(Context& ctx, const std::vector<Token>& text, int64_t depth, const std::vector<EvictPolicy>& policies) {
  if (static_cast<int64_t>(text.size()) < depth + 32) throw std::invalid_argument("--cost-depth: the text is shorter");
  ctx.memory().clear();
  Batch b;
  b.add_sequence(text.data(), static_cast<size_t>(depth), 0, 0, false);
  const auto t0 = Clock::now();
  if (ctx.decode(b) != 0) throw Error("--cost-depth does not fit in -c");
  const double prefill_s = seconds_since(t0);
  for (int i = 0; i < 32; ++i) {  // the observation window
    b.clear();
    b.add(text[static_cast<size_t>(depth + i)], static_cast<MemoryPos>(depth + i), {0}, true);
    if (ctx.decode(b) != 0) throw Error("--cost-depth does not fit in -c");
  }
  const int n_past = static_cast<int>(depth + 32);
  std::printf("prefill of %lld tokens: %.2f s (%.1f t/s)\n\n| policy | choice of %d of %d positions | / prefill |\n| --- | ---: | ---: |\n",
              static_cast<long long>(depth), prefill_s, depth / prefill_s, n_past / 2, n_past);
  for (EvictPolicy p : policies) {
    EvictionRequest r;
    r.n_past = n_past;
    r.n_keep = kScoredKeep;
    r.n_recent = static_cast<int>(kSnapKvWindow);
    r.n_discard = n_past / 2;
    r.policy = p;
    const auto t1 = Clock::now();
    const auto dropped = choose_evictions(ctx, r);
    const double s = seconds_since(t1);
    std::printf("| %s | %.3f s | %.2f %% |\n", evict_policy_name(p), s, 100.0 * s / prefill_s);
    if (dropped.empty()) throw Error("cost: nothing chosen");
  }
  // Retrieval heads choose once, at context creation (the probe's own small context), not per shift.
  const auto t2 = Clock::now();
  const RetrievalHeadScores scores = find_retrieval_heads(ctx.model(), ctx.params().n_threads);
  const double probe_s = seconds_since(t2);
  std::printf("| retrieval-head probe (once per context) | %.3f s | %.2f %% |\n", probe_s, 100.0 * probe_s / prefill_s);
  if (scores.by_layer.empty()) throw Error("cost: no probe scores");
  return 0;
}

constexpr const char* kUsage =
    "usage: agentkv bench evict -m MODEL -f TEXT [-c 1024] [--chunks 12] [--score 64]\n"
    "         [--budgets 0.5,0.25] [--policies positional,sinks,keydiff,snapkv]\n"
    "         [--passkey-depths 512,1024] [--passkey-cases 4] [--seed 1] [-ctk f16 -ctv f16]\n"
    "         [--oracle] [--retrieval-heads 0.125] [-t 2] [--plot FILE.svg] [--json FILE] | [--cost-depth D]\n"
    "  quality: windows of -c tokens, the last --score scored after the eviction, against the full cache\n"
    "  --oracle: per budget, snapkv scored with the scored tokens' own queries (the ceiling)\n"
    "  --retrieval-heads F: per budget, a window whose tail keeps the probe's best F of the KV heads (0: none)\n"
    "  --cost-depth D: time each policy's choice at a D-token sequence against the D-token prefill\n"
    "  docs/quality-bench.md, \"Eviction\"";

}  // namespace

int bench_evict(Args& a) {
  if (a.flag("--help", "-h")) {
    std::puts(kUsage);
    return 0;
  }
  const std::string model_path = a.str("-m", "--model", "");
  const std::string text_path = a.str("-f", "--file", "");
  const int64_t n_ctx = a.num("-c", "--ctx-size", 1024);
  const int64_t chunks = a.num("--chunks", "", 12);
  const int64_t n_score = a.num("--score", "", 64);
  std::vector<double> budgets;
  for (const std::string& b : split_list(a.str("--budgets", "", "0.5,0.25"))) budgets.push_back(std::stod(b));
  std::vector<EvictPolicy> policies;
  for (const std::string& p : split_list(a.str("--policies", "", "positional,sinks,keydiff,snapkv"))) {
    const auto policy = parse_evict_policy(p);
    if (!policy) throw std::invalid_argument("--policies: " + p + " is not one of " + kEvictPolicyNames);
    policies.push_back(*policy);
  }
  const std::vector<long long> depths = a.nums("--passkey-depths", "", {512, 1024});
  const int64_t n_cases = a.num("--passkey-cases", "", 4);
  const uint64_t seed = static_cast<uint64_t>(a.num("--seed", "", 1));
  const int64_t cost_depth = a.num("--cost-depth", "", 0);
  const bool oracle = a.flag("--oracle");
  const double retrieval_fraction = std::stod(a.str("--retrieval-heads", "", "0.125"));
  const std::string plot_path = a.str("--plot", "", "");
  const std::string json_path = a.str("--json", "", "");
  ContextParams cp;
  cp.kv = read_kv_flags(a);
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  a.finish();
  if (model_path.empty() || text_path.empty()) throw std::invalid_argument("-m MODEL and -f TEXT are required");
  if (n_score < 1 || n_score >= n_ctx - 2) throw std::invalid_argument("--score must be in [1, -c - 3]");
  for (double b : budgets)
    if (!(b > 0 && b <= 1)) throw std::invalid_argument("--budgets: fractions in (0, 1]");

  auto model = Model::load(model_path);
  const std::string text = read_text_file(text_path);
  const std::vector<Token> tokens = model->tokenizer().encode(text, /*add_special=*/false, /*parse_special=*/false);
  int64_t max_len = std::max(n_ctx, cost_depth + 64);
  for (long long d : depths) max_len = std::max<int64_t>(max_len, d + kPasskeyAnswerTokens);
  cp.n_ctx = static_cast<uint32_t>(max_len);
  cp.kv.query_window = kSnapKvWindow;
  Context ctx(*model, cp);
  if (cost_depth > 0) return measure_cost(ctx, tokens, cost_depth, policies);
  std::optional<Context> oracle_ctx;  // its query window holds the scored tokens
  if (oracle) {
    ContextParams op = cp;
    op.kv.query_window = static_cast<uint32_t>(n_score);
    oracle_ctx.emplace(*model, op);
  }

  const int64_t n_windows = std::min<int64_t>(chunks, static_cast<int64_t>(tokens.size()) / n_ctx);
  if (n_windows < 1) throw std::invalid_argument("the text is shorter than one window of -c tokens");
  std::vector<PasskeyCase> cases;
  if (n_cases > 0) {
    PasskeyCaseBuilder builder(model->tokenizer(), text);
    for (long long d : depths)
      for (int64_t i = 0; i < n_cases; ++i) cases.push_back(builder.build(d, i, seed));
  }
  std::optional<RetrievalHeadContexts> retrieval;
  if (retrieval_fraction > 0) {
    const RetrievalHeadScores scores = find_retrieval_heads(*model, cp.n_threads);
    const std::vector<uint64_t> kept = top_retrieval_heads(scores, retrieval_fraction);
    retrieval.emplace(*model, cp, kept);
    std::printf("retrieval-head probe (per attention layer, per KV head; the kept ones starred):\n");
    for (size_t l = 0; l < scores.by_layer.size(); ++l) {
      if (scores.by_layer[l].empty()) continue;
      std::printf("  layer %zu:", l);
      for (size_t h = 0; h < scores.by_layer[l].size(); ++h) std::printf(" %.3f%s", scores.by_layer[l][h], (kept[l] >> h & 1) ? "*" : "");
      std::printf("\n");
    }
    std::printf("\n");
  }
  std::vector<Setting> settings = {Setting{}};
  for (double b : budgets) {
    for (EvictPolicy p : policies) settings.push_back(Setting{p, b});
    if (oracle) settings.push_back(Setting{EvictPolicy::SnapKV, b, true});
    if (retrieval && retrieval->fits(b)) {
      Setting r{std::nullopt, b};
      r.retrieval_heads = retrieval->kept();
      settings.push_back(r);
    }
  }

  const int64_t n_vocab = model->n_vocab();
  std::vector<std::vector<uint16_t>> reference(static_cast<size_t>(n_windows));
  std::vector<Row> rows;
  const auto t0 = Clock::now();
  for (const Setting& s : settings) {
    Row row;
    row.setting = s;
    double nll = 0;
    for (int64_t w = 0; w < n_windows; ++w) {
      const std::span<const Token> window(tokens.data() + w * n_ctx, static_cast<size_t>(n_ctx));
      Context& run_ctx = s.retrieval_heads > 0 ? retrieval->for_budget(s.budget, n_ctx - n_score - 1) : s.oracle ? *oracle_ctx : ctx;
      std::vector<uint16_t> run = score_window(run_ctx, s, window, n_score, &nll);
      if (!s.policy && s.retrieval_heads == 0) {
        reference[static_cast<size_t>(w)] = std::move(run);
        continue;
      }
      for (int64_t j = 0; j < n_score; ++j)
        row.divergence.add(compare_positions(reference[static_cast<size_t>(w)].data() + j * n_vocab, run.data() + j * n_vocab, n_vocab));
    }
    row.ppl = std::exp(nll / double(n_windows * n_score));
    if (!s.oracle) {  // the oracle's answers would be the queries it scores with
      std::vector<std::string> answers;
      for (const PasskeyCase& c : cases)
        answers.push_back(answer_passkey(
            s.retrieval_heads > 0 ? retrieval->for_budget(s.budget, static_cast<int64_t>(c.prompt.size()) - 1) : ctx, c,
            [&](Context& cx) { return evict_to_budget(cx, s, static_cast<MemoryPos>(c.prompt.size() - 1)); }));
      row.recall = recall_by_depth(cases, answers, depths);
    }
    std::fprintf(stderr, "%s: PPL %.3f (%.0f s)\n", s.label().c_str(), row.ppl, seconds_since(t0));
    rows.push_back(std::move(row));
  }
  std::printf("model %s, text %s: %lld windows of %lld tokens, the last %lld scored (%lld positions), KV %s/%s\n\n",
              model_path.c_str(), text_path.c_str(), static_cast<long long>(n_windows), static_cast<long long>(n_ctx),
              static_cast<long long>(n_score), static_cast<long long>(n_windows * n_score), std::string(ggml_type_name(cp.kv.type_k)).c_str(),
              std::string(ggml_type_name(cp.kv.type_v)).c_str());
  print_table(rows, n_cases > 0 ? depths : std::vector<long long>{}, rows.front().ppl);

  if (!plot_path.empty()) {
    LinePlot plot;
    plot.title = "KL vs the full cache by KV budget";
    plot.x_label = "KV budget (fraction of the context)";
    plot.y_label = "mean KL (nats)";
    // One line per policy (and the oracle's): its rows' KL by budget.
    const auto add_series = [&](const std::string& name, auto&& takes) {
      PlotSeries series;
      series.name = name;
      for (const Row& r : rows)
        if (takes(r.setting)) series.xs.push_back(r.setting.budget), series.ys.push_back(r.divergence.mean_kl());
      plot.series.push_back(series);
    };
    for (EvictPolicy p : policies)
      add_series(evict_policy_name(p), [&](const Setting& st) { return st.policy == p && !st.oracle; });
    if (oracle) add_series("snapkv (oracle)", [](const Setting& st) { return st.oracle; });
    if (retrieval && retrieval->kept() > 0) add_series("retrieval heads", [](const Setting& st) { return st.retrieval_heads > 0; });
    write_svg(plot_path, plot);
  }
  if (!json_path.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows)
      j.push_back({{"setting", r.setting.label()},
                   {"policy", r.setting.name()},
                   {"oracle", r.setting.oracle},
                   {"budget", r.setting.budget},
                   {"ppl", r.ppl},
                   {"mean_kl", r.setting.name() != "full" ? r.divergence.mean_kl() : 0.0},
                   {"top1", r.setting.name() != "full" ? r.divergence.top1_agreement() : 1.0},
                   {"recall", r.recall}});
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace agentkv::tools
