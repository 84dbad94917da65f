// agentkv run: generate text from a prompt (or a one-message chat), streaming it to stdout.
//   agentkv run [-m M.gguf] -p TEXT [-n 64] [--chat] [--system TEXT] [-c 4096] [-t 2]
//               [--temp 0.8] [--top-k 40] [--top-p 0.95] [--min-p 0.05] [--repeat-penalty 1]
//               [--seed N] [--stop STR] [-ctk f16 -ctv f16] [-ub 512]
#include <chrono>
#include <cstdio>
#include <iostream>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/sampling.h"
#include "agentkv/chat_template.h"
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
              "Without -m, models/default.gguf (generated if absent).");
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
  a.finish();
  if (prompt.empty()) throw std::invalid_argument("-p TEXT is required");

  const auto t_load = Clock::now();
  auto model = Model::load(resolve_model_path(model_arg));
  Context ctx(*model, cp);
  const Tokenizer& tok = model->tokenizer();
  std::fprintf(stderr, "loaded %s (%s, %d layers) in %.0f ms\n", model->config().name.c_str(),
               model->config().arch_key.c_str(), model->config().n_layer, ms_since(t_load));

  if (chat) {
    const std::string& tmpl = tok.chat_template();
    if (tmpl.empty()) throw Error("the model has no chat template (tokenizer.chat_template)");
    ChatTemplateInputs in;
    if (!system.empty()) in.messages.push_back({{"role", "system"}, {"content", system}});
    in.messages.push_back({{"role", "user"}, {"content", prompt}});
    in.add_generation_prompt = true;
    prompt = ChatTemplate(tmpl).render(in);
  }
  std::vector<Token> tokens = tok.encode(prompt, /*add_special=*/true, /*parse_special=*/chat);
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
    b.add_sequence(tokens.data() + start, n, static_cast<MemoryPos>(start), 0, start + n == tokens.size());
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
  std::fputs(chat ? "" : prompt.c_str(), stdout);
  for (; n_generated < n_predict; ++n_generated) {
    const Token next = sampler.sample(ctx.last_logits(), model->n_vocab(), history);
    if (tok.is_eog(next)) break;
    history.push_back(next);
    const auto step = stopper.push(tok.token_to_piece(next, /*special=*/false));
    std::fputs(step.text.c_str(), stdout);
    std::fflush(stdout);
    if (step.stopped) { ++n_generated; break; }
    Batch b;
    b.add(next, static_cast<MemoryPos>(history.size() - 1), {0}, true);
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
