// agentkv bench quality: what a KV cache setting costs in output quality, for a model and a text
// file — perplexity over sliding windows (as llama-perplexity), the KL divergence and top-1
// agreement of every scored position against a reference run (saved once, as llama-perplexity's
// --kl-divergence-base), and pass-key recall at chosen depths. One table row per KV setting.
// docs/quality-bench.md describes the measurement, the options and the reference-file format.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/kv_status.h"
#include "agentkv/session_state.h"
#include "tools/args.h"
#include "tools/kv_flags.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"
#include "tools/quality_answer.h"
#include "tools/quality_divergence.h"
#include "tools/quality_passkey.h"
#include "tools/quality_reference.h"
#include "tools/svg_plot.h"

namespace agentkv::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct KvSetting {
  GgmlType k = GgmlType::F16;
  GgmlType v = GgmlType::F16;
  KvRotationMode rotation = KvRotationMode::Auto;  // --kv-rotation, or the entry's @auto/@on/@off
  std::optional<GgmlType> tail;  // "T:TAIL": a window of --kv-hot cells of T, older rows in TAIL
  std::string label() const {
    std::string s = std::string(ggml_type_name(k)) + "/" + std::string(ggml_type_name(v));
    if (tail) s += " + " + std::string(ggml_type_name(*tail)) + " tail";
    if (rotation != KvRotationMode::Auto) s += std::string(" rot ") + kv_rotation_mode_name(rotation);
    return s;
  }
};

// The KV cache types agentkv has (memory/kv_cache.cpp), f16 first: the reference of `all`.
const std::vector<std::string> kKvCacheTypes = {"f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "tq4", "tq3"};

// One KV cache type, checked before any work (the cache would refuse it only when its row runs).
GgmlType kv_cache_type(const std::string& name) { return parse_kv_cache_type(name, "--kv-types"); }

// --kv-types: "all" (every KV cache type for both K and V, f16 first: the in-process reference),
// or a list of "T" (K and V of type T) and "TK/TV" entries, each optionally with "@auto", "@on" or
// "@off" (its KV rotation; default --kv-rotation), or "T:TAIL": a windowed cache (--kv-hot cells of
// T, older positions in a TAIL tail, memory/kv_cache.h). Empty: the -ctk / -ctv pair.
std::vector<KvSetting> parse_kv_settings(const std::string& list, const KvOptions& flags) {
  std::vector<std::string> names;
  if (list == "all") names = kKvCacheTypes;
  else
    for (std::stringstream ss(list); !list.empty() && ss.good();) {
      std::string item;
      std::getline(ss, item, ',');
      names.push_back(item);
    }
  if (names.empty()) return {{flags.type_k, flags.type_v, flags.rotation}};
  std::vector<KvSetting> out;
  for (std::string n : names) {
    KvRotationMode rotation = flags.rotation;
    if (const auto at = n.find('@'); at != std::string::npos) {
      rotation = parse_kv_rotation_mode(n.substr(at + 1));
      n = n.substr(0, at);
    }
    std::optional<GgmlType> tail;
    if (const auto colon = n.find(':'); colon != std::string::npos) {
      tail = kv_cache_type(n.substr(colon + 1));
      n = n.substr(0, colon);
    }
    const auto slash = n.find('/');
    out.push_back({kv_cache_type(n.substr(0, slash)), kv_cache_type(slash == std::string::npos ? n : n.substr(slash + 1)),
                   rotation, tail});
  }
  return out;
}

// The sliding windows: window w covers text tokens [w * stride, w * stride + n_ctx) and scores its
// last `stride` tokens (each predicted with at least n_ctx - stride tokens of context), so the
// windows score the contiguous tokens [n_ctx - stride, n_ctx - stride + n_windows * stride).
struct WindowPlan {
  int64_t n_ctx = 0;
  int64_t stride = 0;
  int64_t n_windows = 0;
  int64_t first_scored() const { return n_ctx - stride; }
  int64_t n_scored() const { return n_windows * stride; }
};

WindowPlan plan_windows(int64_t n_text_tokens, int64_t n_ctx, int64_t stride, int64_t max_windows) {
  if (n_ctx < 2) throw std::invalid_argument("-c must be at least 2");
  if (stride < 1 || stride >= n_ctx) throw std::invalid_argument("--stride must be in [1, -c - 1]");
  if (n_text_tokens < n_ctx)
    throw Error("the text has " + std::to_string(n_text_tokens) + " tokens, fewer than one window (-c " +
                std::to_string(n_ctx) + ")");
  WindowPlan p{n_ctx, stride, (n_text_tokens - n_ctx) / stride + 1};
  if (max_windows >= 0) p.n_windows = std::min(p.n_windows, max_windows);
  return p;
}

// Where the scored distributions go: written as the reference, compared with one, or neither.
struct ReferenceLink {
  ReferenceWriter* writer = nullptr;
  ReferenceReader* reader = nullptr;
};

struct PerplexityResult {
  double ppl = 0;
  std::optional<DivergenceStats> divergence;  // when compared with a reference
};

PerplexityResult measure_perplexity(Context& ctx, const std::vector<Token>& text, const WindowPlan& plan,
                                    ReferenceLink link) {
  const int64_t n_vocab = ctx.model().n_vocab();
  std::vector<uint16_t> run(static_cast<size_t>(n_vocab)), ref(link.reader ? n_vocab : 0);
  PerplexityResult r;
  if (link.reader) r.divergence.emplace();
  double nll = 0;
  Batch b;
  for (int64_t w = 0; w < plan.n_windows; ++w) {
    ctx.memory().clear();
    b.clear();
    const int64_t start = w * plan.stride;
    // Logits at window position j predict token j + 1: outputs from first_scored() - 1 on.
    for (int64_t j = 0; j < plan.n_ctx; ++j)
      b.add(text[start + j], static_cast<MemoryPos>(j), {0}, j >= plan.first_scored() - 1 && j < plan.n_ctx - 1);
    if (ctx.decode(b) != 0) throw Error("a window does not fit in the context");
    for (int i = 0; i < ctx.n_outputs(); ++i) {
      const float* logits = ctx.logits(i);
      const Token next = text[start + plan.first_scored() + i];
      nll += double(logprobs_f16(logits, n_vocab, run.data())) - logits[next];
      if (link.writer) link.writer->append(run.data());
      if (link.reader) {
        link.reader->read(ref.data());
        r.divergence->add(compare_positions(ref.data(), run.data(), n_vocab));
      }
    }
  }
  r.ppl = std::exp(nll / plan.n_scored());
  return r;
}

// The greedy answer to each case, in the order of `cases`.
std::vector<std::string> answer_passkey_cases(Context& ctx, const std::vector<PasskeyCase>& cases) {
  std::vector<std::string> answers;
  for (const PasskeyCase& c : cases) answers.push_back(answer_passkey(ctx, c));
  return answers;
}

// The Hadamard blocks a cache's rows are rotated in (0: not rotated) and the signs' seed.
struct RowRotation {
  uint32_t k_block = 0, v_block = 0;
  uint64_t seed = 0;
};

// "K128 V64" for the blocks a cache's rows are rotated in, "—" for none.
std::string rotation_text(const RowRotation& r) {
  if (!r.k_block && !r.v_block) return "—";
  std::string s;
  if (r.k_block) s += "K" + std::to_string(r.k_block);
  if (r.v_block) s += std::string(s.empty() ? "" : " ") + "V" + std::to_string(r.v_block);
  if (r.seed) s += " s" + std::to_string(r.seed);
  return s;
}

struct SettingResult {
  KvSetting kv;
  RowRotation rotation;  // what the cache stored its rows under
  bool is_reference = false;  // this row's run is the reference the others are compared with
  std::optional<PerplexityResult> perplexity;
  std::vector<std::string> passkey_answers;  // per case
  std::vector<double> recall;                 // per depth
  double seconds = 0;
};

// The in-process reference (no --reference, no --save-reference, several settings) goes to a
// temporary file, removed at the end: one code path for both kinds of reference, and memory
// bounded by one window whatever the text's length.
class TempReferencePath {
 public:
  TempReferencePath()
      : path_((std::filesystem::temp_directory_path() /
               ("agentkv-quality-reference-" + std::to_string(::getpid()) + ".bin")).string()) {}
  ~TempReferencePath() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Report {
  std::string model_path, text_path, arch, reference_source;  // reference_source: "file", "in-process", "none"
  std::string reference_path;
  KvSetting reference_kv;
  double reference_ppl = 0;
  int64_t n_vocab = 0, n_text_tokens = 0;
  std::optional<WindowPlan> plan;
  std::vector<long long> depths;
  int64_t passkey_cases = 0;
  uint64_t seed = 0;
  std::vector<PasskeyCase> cases;
  std::vector<SettingResult> rows;

  double ppl_delta_pct(const SettingResult& r) const {
    return reference_source == "none" ? 0 : 100.0 * (r.perplexity->ppl / reference_ppl - 1);
  }
};

nlohmann::json to_json(const Report& rep) {
  nlohmann::json j;
  j["model"] = rep.model_path;
  j["arch"] = rep.arch;
  j["n_vocab"] = rep.n_vocab;
  j["text"] = rep.text_path;
  j["text_tokens"] = rep.n_text_tokens;
  if (rep.plan)
    j["perplexity"] = {{"n_ctx", rep.plan->n_ctx}, {"stride", rep.plan->stride}, {"n_windows", rep.plan->n_windows},
                       {"n_scored", rep.plan->n_scored()}, {"first_scored_token", rep.plan->first_scored()}};
  j["reference"] = {{"source", rep.reference_source}};
  if (rep.reference_source != "none") {
    j["reference"]["type_k"] = std::string(ggml_type_name(rep.reference_kv.k));
    j["reference"]["type_v"] = std::string(ggml_type_name(rep.reference_kv.v));
    j["reference"]["ppl"] = rep.reference_ppl;
    if (!rep.reference_path.empty()) j["reference"]["path"] = rep.reference_path;
  }
  j["passkey"] = {{"depths", rep.depths}, {"cases", rep.passkey_cases}, {"seed", rep.seed}};
  auto rows = nlohmann::json::array();
  for (const SettingResult& r : rep.rows) {
    nlohmann::json row{{"kv_rotation", {{"k_block", r.rotation.k_block}, {"v_block", r.rotation.v_block},
                                        {"seed", r.rotation.seed}}},
                       {"type_k", std::string(ggml_type_name(r.kv.k))},
                       {"type_v", std::string(ggml_type_name(r.kv.v))},
                       {"is_reference", r.is_reference},
                       {"seconds", r.seconds}};
    for (const char* key : {"ppl", "ppl_delta_pct", "n_scored", "kl_mean", "kl_p99", "kl_max", "top1_agreement",
                            "mean_abs_dlogprob_top1"})
      row[key] = nullptr;
    if (r.perplexity) {
      row["ppl"] = r.perplexity->ppl;
      row["n_scored"] = rep.plan->n_scored();
      if (rep.reference_source != "none") row["ppl_delta_pct"] = rep.ppl_delta_pct(r);
      if (const auto& d = r.perplexity->divergence) {
        row["kl_mean"] = d->mean_kl();
        row["kl_p99"] = d->kl_quantile(0.99);
        row["kl_max"] = d->max_kl();
        row["top1_agreement"] = d->top1_agreement();
        row["mean_abs_dlogprob_top1"] = d->mean_abs_dlogprob_top1();
      }
    }
    nlohmann::json recall = nlohmann::json::object();
    for (size_t d = 0; d < r.recall.size(); ++d) recall[std::to_string(rep.depths[d])] = r.recall[d];
    row["recall"] = recall;
    auto answers = nlohmann::json::array();  // what the model said: the first thing to read when recall is low
    for (size_t i = 0; i < r.passkey_answers.size(); ++i) {
      const PasskeyCase& c = rep.cases[i];
      answers.push_back({{"depth", c.depth}, {"case", c.case_index}, {"key", c.key}, {"needle_at", c.needle_at},
                         {"answer", r.passkey_answers[i]}, {"recalled", passkey_recalled(r.passkey_answers[i], c.key)}});
    }
    row["passkey_answers"] = answers;
    rows.push_back(row);
  }
  j["results"] = rows;
  return j;
}

void print_markdown(const Report& rep) {
  std::printf("model: %s (%s, %lld vocabulary entries); text: %s (%lld tokens)\n", rep.model_path.c_str(),
              rep.arch.c_str(), static_cast<long long>(rep.n_vocab), rep.text_path.c_str(),
              static_cast<long long>(rep.n_text_tokens));
  if (rep.plan)
    std::printf("perplexity: %lld windows of %lld tokens, stride %lld: %lld scored tokens\n",
                static_cast<long long>(rep.plan->n_windows), static_cast<long long>(rep.plan->n_ctx),
                static_cast<long long>(rep.plan->stride), static_cast<long long>(rep.plan->n_scored()));
  if (rep.reference_source == "file")
    std::printf("reference: %s (%s KV, PPL %.4f)\n", rep.reference_path.c_str(), rep.reference_kv.label().c_str(),
                rep.reference_ppl);
  else if (rep.reference_source == "in-process")
    std::printf("reference: the first row (%s KV)%s\n", rep.reference_kv.label().c_str(),
                rep.reference_path.empty() ? "" : (", saved to " + rep.reference_path).c_str());
  if (rep.passkey_cases > 0)
    std::printf("pass-key: %lld cases per depth, seed %llu\n", static_cast<long long>(rep.passkey_cases),
                static_cast<unsigned long long>(rep.seed));
  std::printf("\n| KV (K/V) | rotated | PPL | ΔPPL %% | mean KL | KL p99 | top-1 %% |");
  for (long long d : rep.depths) std::printf(" recall @%lld |", d);
  std::printf("\n| --- | --- | ---: | ---: | ---: | ---: | ---: |");
  for (size_t d = 0; d < rep.depths.size(); ++d) std::printf(" ---: |");
  std::printf("\n");
  for (const SettingResult& r : rep.rows) {
    std::printf("| %s%s | %s |", r.kv.label().c_str(), r.is_reference ? " (ref)" : "", rotation_text(r.rotation).c_str());
    if (!r.perplexity) std::printf(" — | — | — | — | — |");
    else {
      std::printf(" %.3f |", r.perplexity->ppl);
      if (rep.reference_source == "none") std::printf(" — |");
      else std::printf(" %+.3f |", rep.ppl_delta_pct(r));
      if (const auto& d = r.perplexity->divergence)
        std::printf(" %.6f | %.6f | %.2f |", d->mean_kl(), d->kl_quantile(0.99), 100 * d->top1_agreement());
      else std::printf(" — | — | — |");
    }
    for (double x : r.recall) std::printf(" %.2f |", x);
    std::printf("\n");
  }
}

void write_recall_plot(const std::string& path, const Report& rep) {
  LinePlot plot;
  plot.title = "Pass-key recall vs depth";
  plot.x_label = "depth (tokens)";
  plot.y_label = "recall";
  plot.log_x = true;  // depths double
  plot.y_reference = {1.0};
  for (const SettingResult& r : rep.rows) {
    PlotSeries s;
    s.name = r.kv.label();
    for (size_t d = 0; d < r.recall.size(); ++d) s.xs.push_back(double(rep.depths[d])), s.ys.push_back(r.recall[d]);
    s.dashed = plot.series.size() >= 7;  // the palette has 7 colours
    plot.series.push_back(s);
  }
  write_svg(path, plot);
}

// What this run's reference rows depend on (the KV types are filled in by the run that writes them).
ReferenceHeader reference_header(const Model& model, const std::string& text, const std::vector<Token>& text_tokens,
                                 const WindowPlan& plan) {
  ReferenceHeader h;
  h.n_vocab = static_cast<uint32_t>(model.n_vocab());
  h.fingerprint = {model_fingerprint(model), text_fingerprint(text), static_cast<uint32_t>(plan.n_ctx),
                   static_cast<uint32_t>(plan.stride), static_cast<uint64_t>(plan.n_windows)};
  h.tokens.assign(text_tokens.begin() + plan.first_scored(), text_tokens.begin() + plan.first_scored() + plan.n_scored());
  return h;
}

// The reference: the --reference file (checked before any work), or the first setting's run,
// written to --save-reference or, when other settings are to be compared with it, to a temporary
// file. Fills rep's reference fields; returns the file the rows go to or come from ("" for none).
std::string choose_reference(Report& rep, const ReferenceHeader& header, const std::string& reference,
                             const std::string& save_reference, const std::vector<KvSetting>& settings,
                             std::optional<TempReferencePath>& temp) {
  if (!reference.empty()) {
    const ReferenceReader check(reference);
    check.require_matches(header.fingerprint, header.n_vocab, header.tokens);
    rep.reference_source = "file";
    rep.reference_path = reference;
    rep.reference_kv = {check.header().type_k, check.header().type_v};
    rep.reference_ppl = check.header().ppl;
    return reference;
  }
  if (save_reference.empty() && settings.size() < 2) {
    rep.reference_source = "none";
    return "";
  }
  rep.reference_source = "in-process";
  rep.reference_kv = settings.front();
  rep.reference_path = save_reference;
  if (!save_reference.empty()) return save_reference;
  temp.emplace();
  return temp->path();
}

constexpr const char* kUsage =
    "usage: agentkv bench quality -m MODEL -f TEXT [-c 512] [--stride N/2] [--chunks K]\n"
    "         [--save-reference FILE | --reference FILE] [--passkey-depths 512,1024,2048,4096]\n"
    "         [--passkey-cases 10] [--seed 1] [-ctk f16 -ctv f16 | --kv-types all|T,TK/TV[@off|@on],...]\n"
    "         [--kv-rotation auto|on|off] [--kv-rotation-seed N]\n"
    "         [-t 2] [-ub 512] [-o md|json] [--plot FILE.svg]\n"
    "  perplexity: windows of -c tokens stepping by --stride, each scoring its last --stride tokens;\n"
    "              --chunks limits the windows (0: no perplexity / KL)\n"
    "  KL, top-1: against --reference FILE, or (several --kv-types) against the first setting's run\n"
    "  --kv-types: an entry's @auto/@on/@off sets its KV rotation (default --kv-rotation); T:TAIL keeps\n"
    "              --kv-hot N cells of T and older positions in a TAIL tail (windowed residency)\n"
    "  --passkey-cases 0: no pass-key recall.  docs/quality-bench.md";

}  // namespace

int bench_quality(Args& a) {
  if (a.flag("--help", "-h")) {
    std::puts(kUsage);
    return 0;
  }
  Report rep;
  rep.model_path = a.str("-m", "--model", "");
  rep.text_path = a.str("-f", "--file", "");
  const int64_t n_ctx = a.num("-c", "--ctx-size", 512);
  const int64_t stride = a.num("--stride", "", n_ctx / 2);
  const int64_t chunks = a.num("--chunks", "", -1);
  const std::string save_reference = a.str("--save-reference", "", "");
  const std::string reference = a.str("--reference", "", "");
  rep.depths = a.nums("--passkey-depths", "", {512, 1024, 2048, 4096});
  rep.passkey_cases = a.num("--passkey-cases", "", 10);
  rep.seed = static_cast<uint64_t>(a.num("--seed", "", 1));
  const KvOptions kv_flags = read_kv_flags(a);
  const std::vector<KvSetting> settings = parse_kv_settings(a.str("--kv-types", "", ""), kv_flags);
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  cp.n_ubatch = static_cast<uint32_t>(a.num("-ub", "--ubatch-size", 512));
  const std::string out_fmt = a.str("-o", "--output", "md");
  const std::string plot_path = a.str("--plot", "", "");
  a.finish();
  if (rep.model_path.empty() || rep.text_path.empty()) throw std::invalid_argument("-m MODEL and -f TEXT are required");
  if (!save_reference.empty() && !reference.empty())
    throw std::invalid_argument("--save-reference and --reference exclude each other");
  if (out_fmt != "md" && out_fmt != "json") throw std::invalid_argument("-o must be md or json");
  if (rep.passkey_cases < 0) throw std::invalid_argument("--passkey-cases must be >= 0");
  if (rep.passkey_cases == 0) rep.depths.clear();
  for (size_t i = 0; i < rep.depths.size(); ++i)
    if (rep.depths[i] < 1 || rep.depths[i] > (1 << 24) ||
        std::find(rep.depths.begin(), rep.depths.begin() + i, rep.depths[i]) != rep.depths.begin() + i)
      throw std::invalid_argument("--passkey-depths must be distinct depths in [1, 2^24]");

  auto model = Model::load(rep.model_path);
  rep.arch = model->config().arch_key;
  rep.n_vocab = model->n_vocab();
  const std::string text = read_text_file(rep.text_path);
  const std::vector<Token> text_tokens = model->tokenizer().encode(text, /*add_special=*/false, /*parse_special=*/false);
  rep.n_text_tokens = static_cast<int64_t>(text_tokens.size());
  if (chunks != 0) rep.plan = plan_windows(rep.n_text_tokens, n_ctx, stride, chunks);
  if (!rep.plan && (!save_reference.empty() || !reference.empty()))
    throw std::invalid_argument("--chunks 0 scores nothing: no reference to save or compare");

  const PasskeyCaseBuilder builder(model->tokenizer(), text);
  for (long long d : rep.depths)
    for (int64_t i = 0; i < rep.passkey_cases; ++i) rep.cases.push_back(builder.build(d, i, rep.seed));

  ReferenceHeader ref_header;
  std::optional<TempReferencePath> temp_reference;
  std::string reference_file;
  if (rep.plan) {
    ref_header = reference_header(*model, text, text_tokens, *rep.plan);
    reference_file = choose_reference(rep, ref_header, reference, save_reference, settings, temp_reference);
  } else {
    rep.reference_source = "none";
  }

  int64_t max_len = rep.plan ? rep.plan->n_ctx : 1;
  for (long long d : rep.depths) max_len = std::max<int64_t>(max_len, d + kPasskeyAnswerTokens);
  cp.n_ctx = static_cast<uint32_t>(max_len);

  for (size_t s = 0; s < settings.size(); ++s) {
    SettingResult row;
    row.kv = settings[s];
    row.is_reference = rep.reference_source == "in-process" && s == 0;
    const auto t0 = Clock::now();
    cp.kv.type_k = row.kv.k;
    cp.kv.type_v = row.kv.v;
    cp.kv.rotation = row.kv.rotation;
    cp.kv.rotation_seed = kv_flags.rotation_seed;
    cp.kv.code = kv_flags.code;
    cp.kv.hot_cells = row.kv.tail ? kv_flags.hot_cells : 0;
    if (row.kv.tail) {
      if (kv_flags.hot_cells == 0) throw std::invalid_argument("--kv-types " + row.kv.label() + " needs --kv-hot N");
      cp.kv.tail_type_k = cp.kv.tail_type_v = *row.kv.tail;
    }
    Context ctx(*model, cp);
    const KvStatus cache = kv_status(ctx);
    row.rotation = {cache.rotation_k_block, cache.rotation_v_block, cache.rotation_seed};
    if (rep.plan) {
      std::unique_ptr<ReferenceWriter> writer;
      std::unique_ptr<ReferenceReader> reader;
      if (row.is_reference) {
        ref_header.type_k = row.kv.k;
        ref_header.type_v = row.kv.v;
        writer = std::make_unique<ReferenceWriter>(reference_file, ref_header);
      } else if (rep.reference_source != "none") {
        reader = std::make_unique<ReferenceReader>(reference_file);
      }
      row.perplexity = measure_perplexity(ctx, text_tokens, *rep.plan, {writer.get(), reader.get()});
      if (writer) {
        writer->finish(row.perplexity->ppl);
        rep.reference_ppl = row.perplexity->ppl;
      }
      std::fprintf(stderr, "bench quality: %s: PPL %.4f over %lld tokens (%.1f s)\n", row.kv.label().c_str(),
                   row.perplexity->ppl, static_cast<long long>(rep.plan->n_scored()), seconds_since(t0));
    }
    if (!rep.cases.empty()) {
      const auto t1 = Clock::now();
      row.passkey_answers = answer_passkey_cases(ctx, rep.cases);
      row.recall = recall_by_depth(rep.cases, row.passkey_answers, rep.depths);
      std::fprintf(stderr, "bench quality: %s: pass-key, %zu cases (%.1f s)\n", row.kv.label().c_str(),
                   rep.cases.size(), seconds_since(t1));
    }
    row.seconds = seconds_since(t0);
    rep.rows.push_back(std::move(row));
  }

  // Answers are raw token pieces, possibly cut inside a UTF-8 character: replace, do not throw.
  if (out_fmt == "json") std::cout << to_json(rep).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else print_markdown(rep);
  if (!plot_path.empty()) write_recall_plot(plot_path, rep);
  return 0;
}

}  // namespace agentkv::tools
