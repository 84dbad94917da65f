// agentkv bench fakeprefix: how long an agent step's only-new prefill takes at depth L, measured
// with a fake prefix (metadata-only positions [0, L), zero K/V: no prefill of L needed), next to
// the llama-bench -d style estimate new / prefill_tps(L) and, optionally, the cold prefill of
// L + new. In-process (-m MODEL) or against `agentkv serve` (--server URL, request field
// n_fake_cached). A GUI agent's step may add a screenshot (in-process, --mmproj): its encode time
// is reported beside the language model's prefill of the image rows and the text.
// docs/measurement.md explains the figures and the plots.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/fake_prefix.h"
#include "agentkv/vision.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"
#include "tools/kv_flags.h"
#include "tools/svg_plot.h"

namespace agentkv::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Step {
  int64_t step = 0;
  int64_t depth = 0;  // as the trace (or grid) gives it
  int64_t L = 0;      // bucketed depth: the fake prefix and the real prefix both have L positions
  int64_t n_new = 0;
  std::string screenshot;  // the trace's "screenshot" (empty: text only)
  int64_t n_image = 0;     // the screenshot's rows in the language model (its merged tokens)
  int64_t rows() const { return n_image + n_new; }  // what the step appends: the image, then the text
};

struct StepResult {
  Step s;
  double measured_s = kNaN;  // only-new prefill after a fake prefix of L (the language model)
  double real_s = kNaN;      // the same rows after a real prefix of L (gives prefill_tps(L))
  double baseline_s = kNaN;  // cold prefill of L + the rows
  double encode_s = 0;       // the screenshot's decoding, preprocessing and projector (none: 0)
  int64_t keys_fake = -1, keys_real = -1;  // keys attention read (in-process only)
  double prefill_tps() const { return s.rows() / real_s; }
  double estimate_s() const { return s.rows() / prefill_tps(); }
  double ratio() const { return measured_s / estimate_s(); }
  double speedup() const { return baseline_s / measured_s; }
};

[[noreturn]] void only_new_failed(const Step& s, const std::string& what) {
  throw Error("step " + std::to_string(s.step) + " (L=" + std::to_string(s.L) + ", new=" + std::to_string(s.n_new) +
              "): the only-new path did not fire: " + what);
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;
  // Encodes the step's screenshot (timed); the next fake / real / baseline runs feed its rows.
  virtual double encode(const Step& s) = 0;
  virtual double fake(const Step& s, int64_t& keys) = 0;
  virtual double real(const Step& s, int64_t& keys) = 0;
  virtual double baseline(const Step& s) = 0;
};

// In-process: seq 0 holds a real prefix grown (untimed) to each step's L; the real measurement
// extends a copy of it (seq 1), the fake one a fake prefix (seq 2), the baseline a cold seq 2.
// Screenshots go through the projector (`mmproj`), the encoder cache off: each step encodes its own.
class InProcess : public Backend {
 public:
  // Fills each screenshot step's n_image (an untimed encode of each distinct screenshot, which also
  // warms the projector up) before sizing the context.
  InProcess(const std::string& model_path, const std::string& mmproj, ContextParams cp, std::vector<Step>& steps) {
    model_ = Model::load(model_path);
    if (!mmproj.empty()) {
      vision_ = VisionEncoder::load(mmproj, cp.n_threads);
      vision_->check_language_model(*model_);
      vision_->set_cache_bytes(0);
    }
    std::map<std::string, int64_t> image_rows;
    int64_t max_L = 0, max_rows = 0;
    for (Step& s : steps) {
      if (!s.screenshot.empty()) {
        if (!vision_) throw std::invalid_argument("step " + std::to_string(s.step) + " has a screenshot: give --mmproj");
        auto [it, fresh] = image_rows.try_emplace(s.screenshot, 0);
        if (fresh) it->second = encode_screenshot(s.screenshot).n_tokens;
        s.n_image = it->second;
      }
      max_L = std::max(max_L, s.L), max_rows = std::max(max_rows, s.rows());
    }
    // One KV stream per sequence (real prefix 0, its timed copy 1, fake prefix / baseline 2), as
    // llama-bench's depth runs: each timed run attends over its own L + N cells only. In one shared
    // stream the fake run would also span the real prefix's cells (masked, but still scanned).
    cp.n_seq_max = 3;
    cp.kv.unified = false;
    cp.n_ctx = static_cast<uint32_t>(max_L + max_rows + 256);
    ctx_ = std::make_unique<Context>(*model_, cp);
    // Fake-prefix cells are never written; without this they would read the shared zero page.
    prefault_kv(*ctx_);
    n_vocab_ = static_cast<int32_t>(model_->n_vocab());
    // Warm-up (page in weights, size the scratch) so the first step is not charged for it.
    Batch b;
    for (int i = 0; i < std::min<int64_t>(64, cp.n_ubatch); ++i) b.add(synthetic_token(99, i, n_vocab_), i, {2}, i == 63);
    decode_or_throw(b, "warm-up");
    ctx_->memory().seq_rm(2, -1, -1);
  }
  std::string describe() const override {
    return model_->config().arch_key + (vision_ ? " + projector" : "") + " in-process";
  }

  double encode(const Step& s) override {
    image_ = s.screenshot.empty() ? ImageEmbedding{} : encode_screenshot(s.screenshot);
    return image_.decode_seconds + image_.encode_seconds;
  }

  double fake(const Step& s, int64_t& keys) override {
    auto& mem = ctx_->memory();
    if (s.L > 0) seq_fake_prefix(*ctx_, 2, static_cast<MemoryPos>(s.L));
    const double t = time_new_tokens(s, 2, keys);
    if (ctx_->stats().n_tokens != s.rows())
      only_new_failed(s, "evaluated " + std::to_string(ctx_->stats().n_tokens) + " tokens, expected new=" +
                             std::to_string(s.rows()));
    if (mem.seq_pos_max(2) != s.L + s.rows() - 1)
      only_new_failed(s, "memory pos_max " + std::to_string(mem.seq_pos_max(2)) + ", expected L+new-1");
    mem.seq_rm(2, -1, -1);
    return t;
  }

  double real(const Step& s, int64_t& keys) override {
    grow_real_prefix(s.L);
    auto& mem = ctx_->memory();
    if (s.L > 0) mem.seq_cp(0, 1, -1, -1);
    const double t = time_new_tokens(s, 1, keys);
    if (mem.seq_pos_max(1) != s.L + s.rows() - 1) throw Error("real prefix measurement: unexpected positions");
    mem.seq_rm(1, -1, -1);
    return t;
  }

  double baseline(const Step& s) override {
    Batch b;
    for (int64_t i = 0; i < s.L; ++i) b.add(synthetic_token(0, i, n_vocab_), static_cast<MemoryPos>(i), {2}, false);
    add_step_rows(b, s, 2);
    ctx_->reset_stats();
    const auto t0 = Clock::now();
    decode_or_throw(b, "baseline");
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    ctx_->memory().seq_rm(2, -1, -1);
    return t;
  }

 private:
  void decode_or_throw(const Batch& b, const char* what) {
    if (ctx_->decode(b) != 0) throw Error(std::string(what) + ": the context has no room");
  }
  void grow_real_prefix(int64_t L) {
    auto& mem = ctx_->memory();
    if (L < real_len_) {  // a trace that goes back in depth (a new conversation): start over
      mem.seq_rm(0, -1, -1);
      real_len_ = 0;
    }
    const int64_t ub = ctx_->params().n_ubatch;
    Batch b;
    for (int64_t start = real_len_; start < L; start += ub) {
      b.clear();
      const int64_t end = std::min(L, start + ub);
      for (int64_t p = start; p < end; ++p)
        b.add(synthetic_token(0, p, n_vocab_), static_cast<MemoryPos>(p), {0}, p + 1 == end);
      decode_or_throw(b, "real prefix");
    }
    real_len_ = L;
  }
  ImageEmbedding encode_screenshot(const std::string& screenshot) const {
    int w = 0, h = 0;
    if (parse_screen_size(screenshot, w, h)) {
      const std::vector<uint8_t> rgb = synthetic_screen(w, h);
      return vision_->encode_rgb(rgb.data(), w, h);
    }
    std::ifstream in(screenshot, std::ios::binary);
    if (!in) throw Error("screenshot '" + screenshot + "': neither WIDTHxHEIGHT nor a readable image file");
    const std::vector<uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
    return vision_->encode(bytes.data(), bytes.size());
  }
  // The step's rows at positions L...: its screenshot's (image_, at the multi-axis rope positions
  // the model gives an image), then its text; logits for the last.
  void add_step_rows(Batch& b, const Step& s, MemorySeqId seq) {
    std::vector<Token> text;
    for (int64_t i = 0; i < s.n_new; ++i) text.push_back(synthetic_token(s.step + 1, i, n_vocab_));
    if (s.screenshot.empty()) {
      for (int64_t i = 0; i < s.n_new; ++i) b.add(text[i], static_cast<MemoryPos>(s.L + i), {seq}, i + 1 == s.n_new);
      return;
    }
    PromptCursor cursor{static_cast<MemoryPos>(s.L), static_cast<int32_t>(s.L)};
    add_image(b, image_, seq, cursor);
    add_text(b, text.data(), text.size(), seq, cursor, true);
  }
  // Times the step's new rows on `seq` (one batch: the engine splits it in micro-batches).
  double time_new_tokens(const Step& s, MemorySeqId seq, int64_t& keys) {
    Batch b;
    add_step_rows(b, s, seq);
    ctx_->reset_stats();
    const auto t0 = Clock::now();
    decode_or_throw(b, "new tokens");
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    keys = ctx_->stats().n_keys_attended;
    return t;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<VisionEncoder> vision_;
  std::unique_ptr<Context> ctx_;
  ImageEmbedding image_;  // the current step's screenshot (encode)
  int32_t n_vocab_ = 0;
  int64_t real_len_ = 0;
};

// Against `agentkv serve`: the fake step is one request {prompt: L + N tokens, n_fake_cached: L}
// on slot `fake_slot`; the real prefix lives on slot `real_slot` (grown, untimed, by a request of
// the L prefix tokens, then extended by the N new ones); the baseline is L + N with cache_prompt
// off. Times are the server's timings.prompt_ms.
class OverHttp : public Backend {
 public:
  OverHttp(const std::string& url, int real_slot, int fake_slot) : http_(url), real_slot_(real_slot), fake_slot_(fake_slot) {
    nlohmann::json models;
    if (http_.get("/v1/models", models) != 200 || !models.contains("data") || models["data"].empty())
      throw Error("--server " + url + ": GET /v1/models did not describe a model");
    n_vocab_ = models["data"][0]["meta"].value("n_vocab", 0);
    if (n_vocab_ <= 0) throw Error("--server " + url + ": no n_vocab in /v1/models");
    model_ = models["data"][0].value("id", std::string("?"));
  }
  std::string describe() const override { return model_ + " via " + http_.url(); }

  double encode(const Step&) override { return 0; }  // screenshot steps are refused before (in-process only)

  double fake(const Step& s, int64_t& keys) override {
    keys = -1;
    // The prompt names all L + N positions; the server treats the first L as a fake prefix
    // (metadata only, never read from or written to a real cache) and evaluates the last N.
    auto prompt = tokens(0, 0, s.L);
    const auto extra = tokens(s.step + 1, 0, s.n_new);
    prompt.insert(prompt.end(), extra.begin(), extra.end());
    nlohmann::json body = request(prompt, fake_slot_, false);
    if (s.L > 0) {
      body.erase("cache_prompt");  // n_fake_cached implies cache_prompt=false (and refuses true)
      body["n_fake_cached"] = s.L;
    }
    const auto t = timings(http_.post_ok("/completion", body));
    if (t.value("prompt_n", -1) != s.n_new || t.value("cache_n", -1) != s.L)
      only_new_failed(s, "server reported prompt_n=" + t.value("prompt_n", nlohmann::json(-1)).dump() + " cache_n=" +
                             t.value("cache_n", nlohmann::json(-1)).dump() + " (expected prompt_n == new, cache_n == L)");
    return t.value("prompt_ms", 0.0) / 1000;
  }

  double real(const Step& s, int64_t& keys) override {
    keys = -1;
    auto prefix = tokens(0, 0, s.L);
    if (s.L > 0) http_.post_ok("/completion", request(prefix, real_slot_, true));
    auto prompt = prefix;
    const auto extra = tokens(s.step + 1, 0, s.n_new);
    prompt.insert(prompt.end(), extra.begin(), extra.end());
    const auto t = timings(http_.post_ok("/completion", request(prompt, real_slot_, true)));
    if (t.value("prompt_n", -1) != s.n_new || t.value("cache_n", -1) != s.L)
      throw Error("step " + std::to_string(s.step) + ": the real-prefix request did not reuse the prefix (prompt_n=" +
                  t["prompt_n"].dump() + ", cache_n=" + t["cache_n"].dump() + ")");
    return t.value("prompt_ms", 0.0) / 1000;
  }

  double baseline(const Step& s) override {
    auto prompt = tokens(0, 0, s.L);
    const auto extra = tokens(s.step + 1, 0, s.n_new);
    prompt.insert(prompt.end(), extra.begin(), extra.end());
    const auto t = timings(http_.post_ok("/completion", request(prompt, fake_slot_, false)));
    if (t.value("prompt_n", -1) != s.L + s.n_new) throw Error("baseline request reused a cache (cache_prompt=false)");
    return t.value("prompt_ms", 0.0) / 1000;
  }

 private:
  std::vector<int32_t> tokens(int64_t stream, int64_t from, int64_t n) const {
    std::vector<int32_t> t;
    for (int64_t i = from; i < from + n; ++i) t.push_back(synthetic_token(stream, i, n_vocab_));
    return t;
  }
  static nlohmann::json request(const std::vector<int32_t>& prompt, int slot, bool cache) {
    return {{"prompt", prompt}, {"n_predict", 1}, {"temperature", 0}, {"cache_prompt", cache}, {"id_slot", slot}};
  }
  static nlohmann::json timings(const nlohmann::json& answer) {
    if (!answer.contains("timings")) throw Error("server answer has no timings");
    return answer["timings"];
  }

  BenchHttpClient http_;
  int real_slot_, fake_slot_;
  int32_t n_vocab_ = 0;
  std::string model_;
};

std::string fmt(double v, const char* f = "%.4f") {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string csv_of(const std::vector<StepResult>& rs) {
  std::ostringstream o;
  o << "step,depth,L,new_tokens,measured_s,real_s,prefill_tps_L,estimate_s,ratio_measured_estimate,baseline_s,"
       "speedup_baseline_measured,keys_attended_fake,keys_attended_real,image_tokens,encode_s\n";
  for (const auto& r : rs)
    o << r.s.step << ',' << r.s.depth << ',' << r.s.L << ',' << r.s.n_new << ',' << fmt(r.measured_s, "%.6f") << ','
      << fmt(r.real_s, "%.6f") << ',' << fmt(r.prefill_tps(), "%.2f") << ',' << fmt(r.estimate_s(), "%.6f") << ','
      << fmt(r.ratio()) << ',' << fmt(r.baseline_s, "%.6f") << ',' << fmt(r.speedup()) << ','
      << (r.keys_fake >= 0 ? std::to_string(r.keys_fake) : "") << ','
      << (r.keys_real >= 0 ? std::to_string(r.keys_real) : "") << ',' << r.s.n_image << ','
      << fmt(r.encode_s, "%.6f") << '\n';
  return o.str();
}

nlohmann::json json_num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json json_of(const std::vector<StepResult>& rs, const nlohmann::json& meta) {
  nlohmann::json j = meta;
  auto arr = nlohmann::json::array();
  for (const auto& r : rs) {
    nlohmann::json x{{"step", r.s.step},
                     {"depth", r.s.depth},
                     {"L", r.s.L},
                     {"new_tokens", r.s.n_new},
                     {"measured_s", json_num(r.measured_s)},
                     {"real_s", json_num(r.real_s)},
                     {"prefill_tps_L", json_num(r.prefill_tps())},
                     {"estimate_s", json_num(r.estimate_s())},
                     {"ratio_measured_estimate", json_num(r.ratio())},
                     {"baseline_s", json_num(r.baseline_s)},
                     {"speedup_baseline_measured", json_num(r.speedup())}};
    if (r.keys_fake >= 0) x["keys_attended_fake"] = r.keys_fake, x["keys_attended_real"] = r.keys_real;
    if (!r.s.screenshot.empty())
      x["screenshot"] = r.s.screenshot, x["image_tokens"] = r.s.n_image, x["encode_s"] = json_num(r.encode_s);
    arr.push_back(x);
  }
  j["steps"] = arr;
  return j;
}

// Summary: a grid gets one row per (L, new); a trace one row per depth range (L up to 1024, then
// powers of two), with totals.
std::string summary_of(const std::vector<StepResult>& rs, bool baseline, bool per_step) {
  struct Group {
    std::string name;
    int64_t steps = 0, tokens = 0, image_tokens = 0;
    double measured = 0, estimate = 0, base = 0, base_measured = 0;  // speed-up over steps with a baseline
    double encode = 0;
  };
  const bool images = std::any_of(rs.begin(), rs.end(), [](const StepResult& r) { return r.s.n_image > 0; });
  std::map<int64_t, Group> groups;
  Group total{"**all**"};
  for (size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    int64_t key = static_cast<int64_t>(i);
    std::string name = "L=" + std::to_string(r.s.L) + " new=" + std::to_string(r.s.n_new);
    if (!per_step) {
      int64_t hi = 1024;
      while (hi < r.s.L) hi *= 2;
      key = hi;
      name = "L " + std::to_string(hi == 1024 ? 0 : hi / 2 + 1) + ".." + std::to_string(hi);
    }
    groups[key].name = name;
    for (Group* g : {&groups[key], &total}) {
      g->steps++, g->tokens += r.s.n_new, g->image_tokens += r.s.n_image, g->encode += r.encode_s;
      g->measured += r.measured_s, g->estimate += r.estimate_s();
      if (std::isfinite(r.baseline_s)) g->base += r.baseline_s, g->base_measured += r.measured_s;
    }
  }
  std::ostringstream o;
  // With screenshots: their tokens and encode time, beside the language model's prefill of every
  // new row (image and text), which is what measured and estimate time.
  o << "| steps of | steps | new tokens |" << (images ? " image tokens | encode s |" : "")
    << " measured s | estimate s | measured/estimate |" << (baseline ? " baseline s | speed-up |" : "")
    << "\n| --- | ---: | ---: |" << (images ? " ---: | ---: |" : "") << " ---: | ---: | ---: |"
    << (baseline ? " ---: | ---: |" : "") << "\n";
  auto row = [&](const Group& g) {
    o << "| " << g.name << " | " << g.steps << " | " << g.tokens << " | ";
    if (images) o << g.image_tokens << " | " << fmt(g.encode, "%.3f") << " | ";
    o << fmt(g.measured, "%.3f") << " | "
      << fmt(g.estimate, "%.3f") << " | " << fmt(g.measured / g.estimate, "%.3f") << " |";
    if (baseline && g.base_measured > 0) o << ' ' << fmt(g.base, "%.3f") << " | " << fmt(g.base / g.base_measured, "%.2f") << "x |";
    else if (baseline) o << "  |  |";
    o << '\n';
  };
  for (const auto& [key, g] : groups) row(g);
  row(total);
  return o.str();
}

// Results back from a report's steps.json (for --replot).
std::vector<StepResult> results_from_json(const nlohmann::json& j, const std::string& path) {
  auto num = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : kNaN; };
  std::vector<StepResult> rs;
  if (!j.contains("steps") || !j["steps"].is_array()) throw Error(path + ": no \"steps\" array");
  for (const auto& x : j["steps"]) {
    if (!x.is_object() || !x.contains("L") || !x.contains("new_tokens") || !x["L"].is_number_integer() ||
        !x["new_tokens"].is_number_integer())
      throw Error(path + ": a step without integer \"L\" and \"new_tokens\"");
    StepResult r{Step{x.value("step", int64_t{0}), x.value("depth", int64_t{0}), x["L"].get<int64_t>(),
                      x["new_tokens"].get<int64_t>()}};
    r.measured_s = num(x.value("measured_s", nlohmann::json()));
    r.real_s = num(x.value("real_s", nlohmann::json()));
    r.baseline_s = num(x.value("baseline_s", nlohmann::json()));
    r.keys_fake = x.value("keys_attended_fake", int64_t{-1}), r.keys_real = x.value("keys_attended_real", int64_t{-1});
    r.s.screenshot = x.value("screenshot", std::string());
    r.s.n_image = x.value("image_tokens", int64_t{0});
    r.encode_s = x.contains("encode_s") ? num(x["encode_s"]) : 0;
    rs.push_back(r);
  }
  return rs;
}

void write_plots(const std::vector<StepResult>& rs, bool baseline, const std::string& dir, const std::string& label) {
  // One series per distinct N when there are few (a grid); a trace mixes N, so one series.
  std::map<int64_t, std::vector<const StepResult*>> by_n;
  for (const auto& r : rs) by_n[r.s.n_new].push_back(&r);
  const bool per_n = by_n.size() <= 4;
  if (!per_n) {
    std::vector<const StepResult*> all;
    for (const auto& r : rs) all.push_back(&r);
    by_n = {{0, all}};
  }
  LinePlot times{"Only-new prefill per new token: measured vs estimate (" + label + ")", "depth L (tokens)",
                 "ms per new token", {}, true, {}};
  LinePlot ratio{"measured / estimate (" + label + ")", "depth L (tokens)", "ratio", {}, true, {1.0}};
  LinePlot speed{"speed-up of only-new prefill over cold prefill of L+new (" + label + ")", "depth L (tokens)",
                 "baseline / measured", {}, true, {1.0}};
  for (auto& [n, list] : by_n) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->s.L < b->s.L; });
    const std::string suffix = per_n ? " N=" + std::to_string(n) : "";
    PlotSeries m{"measured" + suffix, {}, {}, false}, e{"estimate" + suffix, {}, {}, true}, q{"ratio" + suffix, {}, {}},
        sp{"speed-up" + suffix, {}, {}};
    for (const auto* r : list) {
      const double x = std::max<double>(1, r->s.L);
      m.xs.push_back(x), m.ys.push_back(1000 * r->measured_s / r->s.n_new);
      e.xs.push_back(x), e.ys.push_back(1000 * r->estimate_s() / r->s.n_new);
      q.xs.push_back(x), q.ys.push_back(r->ratio());
      sp.xs.push_back(x), sp.ys.push_back(r->speedup());
    }
    for (PlotSeries* ps : {&m, &e, &q, &sp}) ps->points_only = !per_n;
    times.series.push_back(m), times.series.push_back(e);
    ratio.series.push_back(q), speed.series.push_back(sp);
  }
  write_svg(dir + "/measured-vs-estimate.svg", times);
  write_svg(dir + "/ratio.svg", ratio);
  if (baseline) write_svg(dir + "/speedup.svg", speed);
}

}  // namespace

// Prints the summary table and, with out_dir, writes steps.csv/json, summary.md and the plots.
void write_report(const std::vector<StepResult>& results, const nlohmann::json& meta, const std::string& out_dir) {
  const std::string backend = meta.value("backend", std::string("?"));
  const std::string source = meta.value("source", std::string("grid"));
  const bool baseline = meta.value("baseline", false);
  const int64_t bucket = meta.value("bucket", int64_t{256});
  const int64_t reps = meta.value("repetitions", int64_t{1});
  const std::string summary = summary_of(results, baseline, source == "grid");
  std::cout << "\nfakeprefix: " << backend << ", " << results.size() << " steps, L = depth rounded up to a multiple of "
            << bucket << "\n\n" << summary;
  if (out_dir.empty()) return;
  make_output_dir(out_dir);
  write_text_file(out_dir + "/steps.csv", csv_of(results));
  write_text_file(out_dir + "/steps.json", json_of(results, meta).dump(1) + "\n");
  write_text_file(out_dir + "/summary.md", "# fakeprefix: " + backend + "\n\nsource: " + source + ", bucket " +
                                               std::to_string(bucket) + ", repetitions " + std::to_string(reps) + "\n\n" +
                                               summary +
                                               "\n![measured vs estimate](measured-vs-estimate.svg)\n\n![ratio](ratio.svg)\n" +
                                               (baseline ? "\n![speed-up](speedup.svg)\n" : ""));
  write_plots(results, baseline, out_dir, backend);
  std::cout << "\nwrote " << out_dir << "/{steps.csv,steps.json,summary.md,measured-vs-estimate.svg,ratio.svg"
            << (baseline ? ",speedup.svg" : "") << "}\n";
}

// --replot DIR: the report of DIR/steps.json written again (table, summary, plots), nothing measured.
int replot(const std::string& dir) {
  const std::string path = dir + "/steps.json";
  std::ifstream f(path);
  if (!f) throw Error("cannot read " + path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a JSON object");
  const auto results = results_from_json(j, path);
  j.erase("steps");
  write_report(results, j, dir);
  return 0;
}

int bench_fakeprefix(Args& a) {
  if (a.flag("--help", "-h")) {
    std::puts(
        "usage: agentkv bench fakeprefix (-m MODEL [--mmproj P] | --server URL) (-L 1024,4096 --new 256,1024 | --trace FILE)\n"
        "         [--bucket 256] [-r 1] [--baseline [--baseline-every K] [--baseline-reps 1]] [--out DIR] [--max-steps K] [--max-depth D]\n"
        "         [-t 2] [-ub 512] [-ctk f16] [-ctv f16]            (in-process)\n"
        "         [--real-slot 0] [--fake-slot 1]                   (--server)\n"
        "       agentkv bench fakeprefix --replot DIR   (the report of DIR/steps.json again, nothing measured)\n"
        "  Per step: the only-new prefill after a fake prefix of L (checked: only the new tokens are\n"
        "  evaluated), prefill_tps(L) after a real prefix of L, estimate = new / prefill_tps(L),\n"
        "  optional cold prefill of L + new (--baseline). L = depth rounded up to a multiple of --bucket.\n"
        "  A trace step's \"screenshot\" (WIDTHxHEIGHT or an image file) is encoded by --mmproj's projector\n"
        "  (timed apart) and its rows prefilled before the step's text.\n"
        "  --out writes steps.csv, steps.json, summary.md and SVG plots. See docs/measurement.md.");
    return 0;
  }
  const std::string replot_dir = a.str("--replot", "", "");
  if (!replot_dir.empty()) {
    a.finish();
    return replot(replot_dir);
  }
  const std::string model_path = a.str("-m", "--model", "");
  const std::string mmproj = a.str("--mmproj", "-mm", "");
  const std::string server = a.str("--server", "", "");
  const std::string trace_path = a.str("--trace", "", "");
  const auto grid_L = a.nums("-L", "--depths", {});
  const auto grid_new = a.nums("--new", "", {});
  const int64_t bucket = a.num("--bucket", "", 256);
  const int reps = static_cast<int>(a.num("-r", "--repetitions", 1));
  const bool baseline = a.flag("--baseline");
  const int64_t baseline_every = a.num("--baseline-every", "", 1);
  // The cold baseline is the expensive part and only feeds the speed-up, not the checked ratio.
  const int baseline_reps = static_cast<int>(a.num("--baseline-reps", "", 1));
  const std::string out_dir = a.str("--out", "-o", "");
  const int64_t max_steps = a.num("--max-steps", "", -1);
  const int64_t max_depth = a.num("--max-depth", "", -1);
  const int real_slot = static_cast<int>(a.num("--real-slot", "", 0));
  const int fake_slot = static_cast<int>(a.num("--fake-slot", "", 1));
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  cp.n_ubatch = static_cast<uint32_t>(a.num("-ub", "--ubatch-size", 512));
  cp.kv = read_kv_flags(a);
  a.finish();

  if (model_path.empty() == server.empty()) throw std::invalid_argument("give exactly one of -m MODEL or --server URL");
  if (trace_path.empty() == grid_L.empty()) throw std::invalid_argument("give either --trace FILE or -L ... --new ...");
  if (!grid_L.empty() && grid_new.empty()) throw std::invalid_argument("-L needs --new N1,N2,...");
  if (reps < 1) throw std::invalid_argument("-r must be at least 1");
  if (baseline_every < 1) throw std::invalid_argument("--baseline-every must be at least 1");
  if (baseline_reps < 1) throw std::invalid_argument("--baseline-reps must be at least 1");
  if (bucket < 1) throw std::invalid_argument("--bucket must be at least 1");
  if (!mmproj.empty() && model_path.empty()) throw std::invalid_argument("--mmproj is in-process only (with -m MODEL)");

  std::vector<Step> steps;
  if (!trace_path.empty()) {
    for (const auto& t : read_agent_trace(trace_path))
      steps.push_back({t.step, t.depth, bucket_depth(t.depth, bucket), t.new_tokens, t.screenshot});
  } else {
    int64_t i = 0;
    for (auto L : grid_L)
      for (auto n : grid_new) {
        if (L < 0 || n < 1) throw std::invalid_argument("-L values must be >= 0 and --new values >= 1");
        steps.push_back({i++, L, bucket_depth(L, bucket), n});
      }
  }
  if (max_depth >= 0) std::erase_if(steps, [&](const Step& s) { return s.L > max_depth; });
  if (max_steps >= 0 && static_cast<int64_t>(steps.size()) > max_steps) steps.resize(static_cast<size_t>(max_steps));
  if (steps.empty()) throw std::invalid_argument("no steps left to measure (check --max-depth / --max-steps)");

  for (const Step& s : steps)
    if (!server.empty() && !s.screenshot.empty())
      throw std::invalid_argument("step " + std::to_string(s.step) +
                                  " has a screenshot: screenshot steps are measured in-process (-m MODEL --mmproj P)");

  std::unique_ptr<Backend> backend;
  if (!server.empty()) backend = std::make_unique<OverHttp>(server, real_slot, fake_slot);
  else backend = std::make_unique<InProcess>(model_path, mmproj, cp, steps);

  std::vector<StepResult> results;
  std::fprintf(stderr, "fakeprefix: %zu steps, %s, bucket %lld\n", steps.size(), backend->describe().c_str(),
               static_cast<long long>(bucket));
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const bool with_baseline = baseline && i % static_cast<size_t>(baseline_every) == 0;
    StepResult r{s};
    std::vector<double> fake_t, real_t, base_t, encode_t;
    for (int k = 0; k < reps; ++k) {
      encode_t.push_back(backend->encode(s));
      real_t.push_back(backend->real(s, r.keys_real));
      fake_t.push_back(backend->fake(s, r.keys_fake));
      if (with_baseline && k < baseline_reps) base_t.push_back(backend->baseline(s));
    }
    if (r.keys_fake >= 0 && r.keys_fake != r.keys_real)
      only_new_failed(s, "attention read " + std::to_string(r.keys_fake) + " keys after the fake prefix but " +
                             std::to_string(r.keys_real) + " after the real one");
    r.measured_s = median(fake_t), r.real_s = median(real_t), r.encode_s = median(encode_t);
    if (with_baseline) r.baseline_s = median(base_t);
    results.push_back(r);
    const std::string image =
        s.n_image > 0 ? " image " + std::to_string(s.n_image) + " tokens encoded in " + fmt(r.encode_s) + " s," : "";
    std::fprintf(stderr, "  step %lld L=%lld new=%lld%s measured %.4f s estimate %.4f s%s\n",
                 static_cast<long long>(s.step), static_cast<long long>(s.L), static_cast<long long>(s.n_new),
                 image.c_str(), r.measured_s, r.estimate_s(),
                 with_baseline ? (" baseline " + fmt(r.baseline_s) + " s").c_str() : "");
  }

  nlohmann::json meta{{"backend", backend->describe()},
                      {"source", trace_path.empty() ? std::string("grid") : trace_path},
                      {"bucket", bucket},
                      {"bucket_rule", "L = depth rounded up to a multiple of bucket"},
                      {"repetitions", reps},
                      {"baseline", baseline}};
  if (server.empty()) meta["threads"] = cp.n_threads, meta["n_ubatch"] = cp.n_ubatch;
  if (!mmproj.empty()) meta["mmproj"] = mmproj;
  write_report(results, meta, out_dir);
  return 0;
}

}  // namespace agentkv::tools
