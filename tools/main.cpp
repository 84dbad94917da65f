// The `agentkv` command: dispatches to subcommands (run, serve, bench, mkmodel, info, logits, state).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/commands.h"

namespace {
void usage() {
  std::fprintf(stderr,
               "usage: agentkv <command> [options]\n"
               "commands:\n"
               "  run       generate text from a prompt or a chat\n"
               "  bench     llama-bench style prefill/decode figures\n"
               "  mkmodel   write a random-weight GGUF of a named shape\n"
               "  info      print a GGUF's metadata and tensors\n"
               "  logits    top-k logprobs and greedy tokens for a prompts file (JSON)\n"
               "  state     inspect and validate a saved state file (state info FILE)\n"
               "  serve     llama.cpp- and OpenAI-compatible HTTP server\n"
               "  kv-calibrate  fit the calibrated code of the tqc3 KV type to a model\n"
               "run 'agentkv <command> --help' for its options\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : agentkv::tools::commands())
    if (cmd == c.name) return c.fn(args);
  std::fprintf(stderr, "agentkv: unknown command '%s'\n", cmd.c_str());
  usage();
  return 1;
}
