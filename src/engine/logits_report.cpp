#include "agentkv/logits_report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "agentkv/error.h"
#include "kernels/ops.h"

namespace agentkv {

std::vector<std::string> read_prompts_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open prompts file");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string sep = "\n@@@@\n";
  std::vector<std::string> prompts;
  size_t start = 0;
  for (;;) {
    size_t at = text.find(sep, start);
    if (at == std::string::npos) {
      prompts.push_back(text.substr(start));
      break;
    }
    prompts.push_back(text.substr(start, at - start));
    start = at + sep.size();
  }
  return prompts;
}

namespace {

TopList top_of(const float* logits, int64_t n_vocab, int k) {
  std::vector<int32_t> ids(k);
  std::vector<float> lp(k);
  const int n = top_k_logprobs(logits, n_vocab, k, ids.data(), lp.data());
  TopList out;
  for (int i = 0; i < n; ++i) out.emplace_back(ids[i], lp[i]);
  return out;
}


// Decodes the prompt rows in `batch` (each an output), then n_gen greedy (or forced) steps, each
// token added by add_next: the one loop of text and image prompts.
template <typename AddNext>
void decode_and_generate(Context& ctx, Batch& batch, int top_k, int n_gen, const std::vector<Token>* forced, LogitsCase& c,
                         AddNext&& add_next) {
  const int64_t n_vocab = ctx.model().n_vocab();
  if (ctx.decode(batch) != 0) throw Error("prompt does not fit in the context");
  for (int i = 0; i < ctx.n_outputs(); ++i) c.prompt_top.push_back(top_of(ctx.logits(i), n_vocab, top_k));
  for (int step = 0; step < n_gen; ++step) {
    c.generated_top.push_back(step == 0 ? c.prompt_top.back() : top_of(ctx.last_logits(), n_vocab, top_k));
    const Token next = forced ? (*forced)[static_cast<size_t>(step)] : c.generated_top.back().front().first;
    c.generated.push_back(next);
    if (step + 1 == n_gen) break;
    batch.clear();
    add_next(batch, next);
    if (ctx.decode(batch) != 0) throw Error("generation does not fit in the context");
  }
}
}  // namespace

LogitsCase compute_logits_case(Context& ctx, const std::string& prompt, int top_k, int n_gen,
                               const std::vector<Token>* forced) {
  LogitsCase c;
  c.prompt = prompt;
  c.prompt_tokens = ctx.model().tokenizer().encode(prompt, /*add_special=*/false, /*parse_special=*/true);
  if (c.prompt_tokens.empty()) throw Error("prompt tokenizes to nothing");
  ctx.memory().seq_rm(0, -1, -1);
  Batch batch;
  for (size_t i = 0; i < c.prompt_tokens.size(); ++i) batch.add(c.prompt_tokens[i], static_cast<MemoryPos>(i), {0}, true);
  auto pos = static_cast<MemoryPos>(c.prompt_tokens.size());
  decode_and_generate(ctx, batch, top_k, n_gen, forced, c, [&](Batch& b, Token t) { b.add(t, pos++, {0}, true); });
  return c;
}

namespace {
nlohmann::json top_json(const TopList& t) {
  auto a = nlohmann::json::array();
  for (const auto& [id, lp] : t) a.push_back({id, lp});
  return a;
}
TopList top_from_json(const nlohmann::json& j) {
  TopList t;
  for (const auto& e : j) t.emplace_back(e.at(0).get<Token>(), e.at(1).get<float>());
  return t;
}
}  // namespace

LogitsCase compute_image_logits_case(Context& ctx, const VisionEncoder& vision, const std::string& prompt,
                                     const std::vector<std::vector<uint8_t>>& images, int top_k, int n_gen) {
  const Model& model = ctx.model();
  LogitsCase c;
  c.prompt = prompt;
  ctx.memory().seq_rm(0, -1, -1);
  const std::vector<std::string> pieces = text_pieces_around_images(prompt);
  if (pieces.size() - 1 != images.size())
    throw Error("the prompt has " + std::to_string(pieces.size() - 1) + " image markers for " +
                std::to_string(images.size()) + " images");
  Batch batch;
  PromptCursor cursor;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const auto text = model.tokenizer().encode(pieces[k], /*add_special=*/false, /*parse_special=*/true);
    add_text(batch, text.data(), text.size(), 0, cursor, false);
    c.prompt_tokens.insert(c.prompt_tokens.end(), text.begin(), text.end());
    if (k == images.size()) break;
    const ImageEmbedding image = vision.encode(images[k].data(), images[k].size());
    add_image(batch, image, 0, cursor);  // copies the rows
    for (int64_t r = 0; r < image.n_tokens; ++r) c.prompt_tokens.push_back(image_row_token(image.content_hash, r));
  }
  if (c.prompt_tokens.empty()) throw Error("prompt tokenizes to nothing");
  std::fill(batch.output.begin(), batch.output.end(), true);
  decode_and_generate(ctx, batch, top_k, n_gen, nullptr, c,
                      [&](Batch& b, Token t) { add_text(b, &t, 1, 0, cursor, true); });
  return c;
}

nlohmann::json to_json(const std::vector<LogitsCase>& cases) {
  auto arr = nlohmann::json::array();
  for (const auto& c : cases) {
    nlohmann::json j;
    j["prompt"] = c.prompt;
    j["prompt_tokens"] = c.prompt_tokens;
    auto pt = nlohmann::json::array();
    for (const auto& t : c.prompt_top) pt.push_back(top_json(t));
    j["prompt_top"] = pt;
    j["generated"] = c.generated;
    auto gt = nlohmann::json::array();
    for (const auto& t : c.generated_top) gt.push_back(top_json(t));
    j["generated_top"] = gt;
    arr.push_back(j);
  }
  return {{"cases", arr}};
}

std::vector<LogitsCase> logits_cases_from_json(const nlohmann::json& j) {
  std::vector<LogitsCase> out;
  for (const auto& cj : j.at("cases")) {
    LogitsCase c;
    c.prompt = cj.value("prompt", "");
    c.prompt_tokens = cj.at("prompt_tokens").get<std::vector<Token>>();
    for (const auto& t : cj.at("prompt_top")) c.prompt_top.push_back(top_from_json(t));
    c.generated = cj.at("generated").get<std::vector<Token>>();
    for (const auto& t : cj.at("generated_top")) c.generated_top.push_back(top_from_json(t));
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<LogitsCase> load_logits_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  try {
    return logits_cases_from_json(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not a logits report: " + e.what());
  }
}

namespace {
void accumulate(const TopList& a, const TopList& ref, LogitsDistance& d, double& sum, int& n_pairs) {
  d.n_positions += 1;
  if (!a.empty() && !ref.empty() && a.front().first == ref.front().first) d.top1_agree += 1;
  for (const auto& [id, lp] : a)
    for (const auto& [rid, rlp] : ref)
      if (id == rid) {
        const double diff = std::fabs(static_cast<double>(lp) - rlp);
        d.max_abs = std::max(d.max_abs, diff);
        sum += diff;
        n_pairs += 1;
      }
}
}  // namespace

LogitsDistance logits_distance(const std::vector<LogitsCase>& a, const std::vector<LogitsCase>& ref) {
  if (a.size() != ref.size()) throw Error("logits reports have different numbers of cases");
  LogitsDistance d;
  double sum = 0;
  int n_pairs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& x = a[i];
    const auto& r = ref[i];
    if (x.prompt_top.size() != r.prompt_top.size() || x.generated_top.size() != r.generated_top.size())
      throw Error("case " + std::to_string(i) + ": reports have different lengths");
    for (size_t p = 0; p < x.prompt_top.size(); ++p) accumulate(x.prompt_top[p], r.prompt_top[p], d, sum, n_pairs);
    for (size_t p = 0; p < x.generated_top.size(); ++p) accumulate(x.generated_top[p], r.generated_top[p], d, sum, n_pairs);
    for (size_t p = 0; p < x.generated.size() && p < r.generated.size(); ++p) {
      d.greedy_total += 1;
      d.greedy_equal += x.generated[p] == r.generated[p] ? 1 : 0;
    }
  }
  d.mean_abs = n_pairs ? sum / n_pairs : 0;
  return d;
}

}  // namespace agentkv
