// agentkv logits -m M.gguf --prompts prompts.txt [--top 10] [--n-gen 32] [-t 2] [-ub 512] [-c N] [-ctk T -ctv T]
// Prints a JSON report in the fixtures' format so any GGUF can be compared with llama.cpp.
#include <cstdio>
#include <iostream>

#include "agentkv/error.h"
#include "agentkv/logits_report.h"
#include "tools/args.h"
#include "tools/kv_flags.h"
#include "tools/commands.h"

namespace agentkv::tools {
namespace {

int cmd_logits(const std::vector<std::string>& argv) {
  Args a(argv);
  if (a.flag("--help", "-h")) {
    std::puts("usage: agentkv logits -m MODEL --prompts FILE [--top 10] [--n-gen 32] [-t 2] [-ub 512] [-c 4096]\n"
              "                     [-ctk f16] [-ctv f16] [--kv-rotation auto|on|off] [--kv-rotation-seed N]");
    return 0;
  }
  const std::string model_path = a.str("-m", "--model", "");
  const std::string prompts_path = a.str("--prompts", "", "");
  const int top = static_cast<int>(a.num("--top", "", 10));
  const int n_gen = static_cast<int>(a.num("--n-gen", "", 32));
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  cp.n_ubatch = static_cast<uint32_t>(a.num("-ub", "--ubatch-size", 512));
  cp.n_ctx = static_cast<uint32_t>(a.num("-c", "--ctx-size", 4096));
  cp.kv = read_kv_flags(a);
  a.finish();
  if (model_path.empty() || prompts_path.empty()) throw std::invalid_argument("-m and --prompts are required");

  auto model = Model::load(model_path);
  Context ctx(*model, cp);
  std::vector<LogitsCase> cases;
  for (const auto& p : read_prompts_file(prompts_path)) cases.push_back(compute_logits_case(ctx, p, top, n_gen));
  std::cout << to_json(cases).dump() << "\n";
  return 0;
}

Registrar reg("logits", [](const std::vector<std::string>& args) {
  try {
    return cmd_logits(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv logits: %s\n", e.what());
    return 1;
  }
});

}  // namespace
}  // namespace agentkv::tools
