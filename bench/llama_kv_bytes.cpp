// llama.cpp's KV-cache sizes for a model at a context size, with and without --swa-full: the
// figures BENCHMARKS.md's "sliding-window memory" table sets beside agentkv's. Creates the
// context only (no token is evaluated) and prints llama.cpp's own log lines about its caches.
// Build against a scratch llama.cpp (d32676d7):
//   g++ -O2 -std=c++17 bench/llama_kv_bytes.cpp -I $L/include -I $L/ggml/include -L $L/build/bin \
//       -lllama -lggml -lggml-base -Wl,-rpath,$L/build/bin -o /tmp/llama_kv_bytes
// Run: /tmp/llama_kv_bytes MODEL.gguf N_CTX N_SEQ SWA_FULL(0|1)
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL N_CTX N_SEQ SWA_FULL\n", argv[0]);
    return 2;
  }
  llama_log_set([](ggml_log_level, const char* text, void*) {
    if (std::strstr(text, "kv_cache") || std::strstr(text, "KV") || std::strstr(text, "SWA")) std::fputs(text, stdout);
  }, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(std::atoi(argv[2]));
  cp.n_seq_max = static_cast<uint32_t>(std::atoi(argv[3]));
  cp.swa_full = std::atoi(argv[4]) != 0;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
