// agentkv prefill [-m MODEL] -p TEXT -o STATE [-c N] [-t N] [-ub 512] [-ctk f16] [-ctv f16]
// Evaluates a prompt and writes the sequence's state (docs/state-format.md) with its tokens, the
// last token's logits and, for hybrid models, a checkpoint at the end of the prompt. A server
// adopts it (POST /slots/{id}?action=adopt, docs/server.md) and answers that prompt, or any
// extension of it, without evaluating it again: prefill and decode can run in separate processes.
// The server must use the same model and cache types (-ctk / -ctv).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "agentkv/ggml_type.h"
#include "agentkv/context.h"
#include "agentkv/seq_snapshot.h"
#include "agentkv/session_state.h"
#include "tools/args.h"
#include "tools/kv_flags.h"
#include "tools/commands.h"
#include "tools/default_model.h"

namespace agentkv::tools {
namespace {

const char* const kUsage =
    "usage: agentkv prefill [-m MODEL] -p TEXT -o STATE [options]\n"
    "  -m, --model PATH      GGUF model (default: the built-in models/default.gguf)\n"
    "  -p, --prompt TEXT     prompt (tokenized as the server does: BOS if the vocabulary wants it,\n"
    "                        special tokens parsed)\n"
    "  -o, --output PATH     state file to write\n"
    "  -c, --ctx-size N      KV cells (default: the prompt length + 1)\n"
    "  -t, --threads N       compute threads (default 2)\n"
    "  -ub, --ubatch-size N  tokens per forward pass (default 512)\n"
    "  -ctk, -ctv T          cache types (default f16; must match the server's)\n"
    "  --kv-rotation M, --kv-rotation-seed N   KV rotation (must match the server's)\n";

int cmd_prefill(const std::vector<std::string>& argv) {
  Args a(argv);
  if (a.flag("--help", "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string model_arg = a.str("-m", "--model", "");
  const std::string prompt = a.str("-p", "--prompt", "");
  const std::string output = a.str("-o", "--output", "");
  const long long n_ctx = a.num("-c", "--ctx-size", 0);
  const long long n_threads = a.num("-t", "--threads", 2);
  const long long n_ubatch = a.num("-ub", "--ubatch-size", 512);
  const KvOptions kv = read_kv_flags(a);
  a.finish();
  if (prompt.empty()) throw std::invalid_argument("-p TEXT is required");
  if (output.empty()) throw std::invalid_argument("-o STATE is required");
  if (n_ctx < 0 || n_threads < 1 || n_ubatch < 1) throw std::invalid_argument("-c, -t and -ub must be positive");

  auto model = Model::load(resolve_model_path(model_arg));
  const std::vector<Token> tokens = model->tokenizer().encode(prompt, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.empty()) throw std::invalid_argument("the prompt tokenizes to nothing");
  ContextParams cp;
  cp.n_ctx = static_cast<uint32_t>(std::max<long long>(n_ctx, static_cast<long long>(tokens.size()) + 1));
  cp.n_ubatch = static_cast<uint32_t>(n_ubatch);
  cp.n_threads = static_cast<int>(n_threads);
  cp.kv = kv;
  Context ctx(*model, cp);
  for (size_t done = 0; done < tokens.size();) {
    const size_t take = std::min<size_t>(tokens.size() - done, cp.n_ubatch);
    Batch batch;
    batch.add_sequence(tokens.data() + done, take, static_cast<MemoryPos>(done), 0, done + take == tokens.size());
    if (ctx.decode(batch) != 0) throw std::runtime_error("no room in memory for the prompt");
    done += take;
  }
  SaveOptions o;
  o.with_tokens = true;
  o.tokens = tokens;
  o.logits = {ctx.last_logits(), static_cast<size_t>(model->n_vocab())};
  SeqSnapshot end_of_prompt;
  if (ctx.needs_snapshots()) {
    end_of_prompt = SeqSnapshot::capture(ctx, 0, /*recurrent_only=*/true);
    o.checkpoints.push_back({static_cast<MemoryPos>(tokens.size()) - 1, &end_of_prompt});
  }
  const std::vector<uint8_t> blob = save_seq(ctx, 0, o);
  write_state_file(output, blob);
  std::fprintf(stderr, "prefill: %zu tokens evaluated, state written to %s (%zu bytes)\n", tokens.size(),
               output.c_str(), blob.size());
  return 0;
}

Registrar reg("prefill", [](const std::vector<std::string>& args) {
  try {
    return cmd_prefill(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv prefill: %s\n", e.what());
    return 1;
  }
});

}  // namespace
}  // namespace agentkv::tools
