// agentkv run: generate text from a prompt (or a one-message chat), streaming it to stdout.
//   agentkv run [-m M.gguf] -p TEXT [-n 64] [--chat] [--system TEXT] [-c 4096] [-t 2]
//               [--temp 0.8] [--top-k 40] [--top-p 0.95] [--min-p 0.05] [--repeat-penalty 1]
//               [--seed N] [--stop STR] [-ctk f16 -ctv f16] [-ub 512] [--mmproj P.gguf --image IMG ...]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/sampling.h"
#include "agentkv/chat_template.h"
#include "agentkv/vision.h"
#include "tools/args.h"
#include "tools/kv_flags.h"
#include "tools/commands.h"
#include "tools/default_model.h"

namespace agentkv::tools {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int cmd_run(const std::vector<std::string>& argv) {
  Args a(argv);
  if (a.flag("--help", "-h")) {
    std::puts("usage: agentkv run [-m MODEL] -p TEXT [-n 64] [--chat] [--system TEXT] [-c 4096] [-t 2]\n"
              "                   [--temp 0.8] [--top-k 40] [--top-p 0.95] [--min-p 0.05]\n"
              "                   [--repeat-penalty 1.0] [--seed N] [--stop STR] [-ctk f16] [-ctv f16] [-ub 512]\n"
              "                   [--kv-rotation auto|on|off] [--kv-rotation-seed N]\n"
              "                   [--mmproj PROJECTOR.gguf --image FILE [--image FILE ...]]\n"
              "Without -m, models/default.gguf (generated if absent). Each <__media__> in the prompt is the\n"
              "next --image (PNG or JPEG); without markers the images come first.");
    return 0;
  }
  const std::string model_arg = a.str("-m", "--model", "");
  std::string prompt = a.str("-p", "--prompt", "");
  const int n_predict = static_cast<int>(a.num("-n", "--n-predict", 64));
  const bool chat = a.flag("--chat");
  const std::string system = a.str("--system", "", "");
  const std::string stop = a.str("--stop", "", "");
  ContextParams cp;
  cp.n_ctx = static_cast<uint32_t>(a.num("-c", "--ctx-size", 4096));
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  cp.n_ubatch = static_cast<uint32_t>(a.num("-ub", "--ubatch-size", 512));
  cp.kv = read_kv_flags(a);
  SamplerParams sp;
  sp.temperature = static_cast<float>(a.real("--temp", "", 0.8));
  sp.top_k = static_cast<int32_t>(a.num("--top-k", "", 40));
  sp.top_p = static_cast<float>(a.real("--top-p", "", 0.95));
  sp.min_p = static_cast<float>(a.real("--min-p", "", 0.05));
  sp.repeat_penalty = static_cast<float>(a.real("--repeat-penalty", "", 1.0));
  sp.seed = static_cast<uint32_t>(a.num("--seed", "-s", static_cast<long long>(Clock::now().time_since_epoch().count() & 0xffffffff)));
  const std::string mmproj = a.str("--mmproj", "", "");
  std::vector<std::string> image_files;
  for (std::string f; !(f = a.str("--image", "", "")).empty();) image_files.push_back(f);
  a.finish();
  if (!image_files.empty() && mmproj.empty()) throw std::invalid_argument("--image needs --mmproj (the model's vision projector)");
  if (prompt.empty()) throw std::invalid_argument("-p TEXT is required");

  const auto t_load = Clock::now();
  auto model = Model::load(resolve_model_path(model_arg));
  Context ctx(*model, cp);
  const Tokenizer& tok = model->tokenizer();
  std::fprintf(stderr, "loaded %s (%s, %d layers) in %.0f ms\n", model->config().name.c_str(),
               model->config().arch_key.c_str(), model->config().n_layer, ms_since(t_load));
  std::vector<ImageEmbedding> images;
  if (!mmproj.empty()) {
    auto vision = VisionEncoder::load(mmproj, cp.n_threads);
    vision->check_language_model(*model);
    for (const auto& f : image_files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) throw Error(f + ": cannot open");
      const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
      images.push_back(vision->encode(bytes.data(), bytes.size()));
      const auto& e = images.back();
      std::fprintf(stderr, "image %s: %lldx%lld -> %lldx%lld pixels, %lld tokens, encoded in %.0f ms\n", f.c_str(),
                   static_cast<long long>(e.source_x), static_cast<long long>(e.source_y),
                   static_cast<long long>(e.pixels_x), static_cast<long long>(e.pixels_y),
                   static_cast<long long>(e.n_tokens), e.encode_seconds * 1e3);
    }
  }
  if (!images.empty() && prompt.find(kMediaMarker) == std::string::npos) {
    std::string markers;
    for (size_t i = 0; i < images.size(); ++i) markers += kMediaMarker;
    prompt = markers + prompt;
  }

  if (chat) {
    const std::string& tmpl = tok.chat_template();
    if (tmpl.empty()) throw Error("the model has no chat template (tokenizer.chat_template)");
    ChatTemplateInputs in;
    if (!system.empty()) in.messages.push_back({{"role", "system"}, {"content", system}});
    in.messages.push_back({{"role", "user"}, {"content", prompt}});
    in.add_generation_prompt = true;
    prompt = ChatTemplate(tmpl).render(in);
  }
  // The prompt as text pieces between images, each image between the vision start and end tokens.
  Batch prompt_batch;
  PromptCursor cursor;
  std::vector<Token> tokens;
  {
    const std::vector<std::string> pieces = images.empty() ? std::vector<std::string>{prompt} : text_pieces_around_images(prompt);
    if (pieces.size() - 1 > images.size()) throw Error("the prompt has more <__media__> markers than --image files");
    if (pieces.size() - 1 < images.size()) throw Error("more --image files than <__media__> markers in the prompt");
    for (size_t k = 0; k < pieces.size(); ++k) {
      const std::vector<Token> t = tok.encode(pieces[k], /*add_special=*/k == 0, /*parse_special=*/chat || !images.empty());
      add_text(prompt_batch, t.data(), t.size(), 0, cursor, false);
      tokens.insert(tokens.end(), t.begin(), t.end());
      if (k == images.size()) break;
      add_image(prompt_batch, images[k], 0, cursor);
      tokens.insert(tokens.end(), prompt_batch.tokens.end() - images[k].n_tokens, prompt_batch.tokens.end());
    }
  }
  if (tokens.empty()) throw Error("the prompt tokenizes to nothing");
  if (tokens.size() + static_cast<size_t>(std::max(n_predict, 0)) > cp.n_ctx)
    throw Error("prompt (" + std::to_string(tokens.size()) + " tokens) plus -n exceeds the context (" +
                std::to_string(cp.n_ctx) + "); raise -c");

  // Prefill in micro-batch sized pieces so a progress line can be shown for long prompts.
  const auto t_prompt = Clock::now();
  const bool show_progress = tokens.size() > 2 * cp.n_ubatch;
  for (size_t start = 0; start < tokens.size(); start += cp.n_ubatch) {
    const size_t n = std::min<size_t>(cp.n_ubatch, tokens.size() - start);
    Batch b;
    for (size_t i = start; i < start + n; ++i) {
      const int32_t row = prompt_batch.embd_row[i];
      b.add_multimodal(prompt_batch.tokens[i], prompt_batch.pos[i], 0, i + 1 == tokens.size(), prompt_batch.rope[i],
                       row >= 0 ? prompt_batch.embd.data() + row * model->n_embd_input() : nullptr,
                       static_cast<size_t>(model->n_embd_input()));
    }
    if (images.empty()) {  // text only: every model takes plain positions
      b.rope.clear();
      b.embd_row.clear();
    }
    if (ctx.decode(b) != 0) throw Error("the prompt does not fit in the context");
    if (show_progress)
      std::fprintf(stderr, "\rprompt: %zu / %zu tokens (%.0f tok/s)", start + n, tokens.size(),
                   (start + n) / (ms_since(t_prompt) / 1e3));
  }
  if (show_progress) std::fprintf(stderr, "\n");
  const double prompt_ms = ms_since(t_prompt);

  Sampler sampler(sp);
  StopChecker stopper(stop.empty() ? std::vector<std::string>{} : std::vector<std::string>{stop});
  std::vector<Token> history = tokens;
  const auto t_gen = Clock::now();
  int n_generated = 0;
  std::fputs(chat || !images.empty() ? "" : prompt.c_str(), stdout);
  for (; n_generated < n_predict; ++n_generated) {
    const Token next = sampler.sample(ctx.last_logits(), model->n_vocab(), history);
    if (tok.is_eog(next)) break;
    history.push_back(next);
    const auto step = stopper.push(tok.token_to_piece(next, /*special=*/false));
    std::fputs(step.text.c_str(), stdout);
    std::fflush(stdout);
    if (step.stopped) { ++n_generated; break; }
    Batch b;
    add_text(b, &next, 1, 0, cursor, true);
    if (images.empty()) {  // text only: every model takes plain positions
      b.rope.clear();
      b.embd_row.clear();
    }
    if (ctx.decode(b) != 0) throw Error("the context is full");
  }
  if (!stopper.stopped()) std::fputs(stopper.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  const double gen_ms = ms_since(t_gen);
  std::fprintf(stderr, "prompt: %zu tokens in %.1f ms (%.1f tok/s) | generation: %d tokens in %.1f ms (%.1f tok/s)\n",
               tokens.size(), prompt_ms, tokens.size() / (prompt_ms / 1e3), n_generated, gen_ms,
               n_generated ? n_generated / (gen_ms / 1e3) : 0.0);
  return 0;
}

Registrar reg("run", [](const std::vector<std::string>& args) {
  try {
    return cmd_run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv run: %s\n", e.what());
    return 1;
  }
});

}  // namespace
}  // namespace agentkv::tools
