// The program that makes the llama.cpp reference outputs the fidelity tests compare against (the
// format of ../shared/fixtures/reference/, read by tests/fidelity_common.h). It links llama.cpp's
// libllama and is never part of agentkv's build: build llama.cpp d32676d7 in a scratch folder and
// compile this file against it (tests/reference/README.md has the exact commands).
//
//   llama_reference MODEL.gguf PROMPTS.txt N_UBATCH N_THREADS > OUT.json
//
// For every prompt of PROMPTS.txt (prompts separated by a line "@@@@"): its tokens (no BOS added,
// special tokens parsed); the 10 most likely next tokens at every prompt position as [id, logprob]
// (log-softmax over the whole vocabulary), from one batch with every position's logits (teacher
// forcing); then 32 greedy tokens with the top 10 at each step. Each prompt runs in a fresh memory.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "llama.h"

namespace {

constexpr int kTop = 10;
constexpr int kGenerate = 32;

std::vector<std::string> read_prompts(const char* path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path);
    std::exit(1);
  }
  std::vector<std::string> prompts(1);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line == "@@@@") {
      prompts.emplace_back();
      first = true;
      continue;
    }
    if (!first) prompts.back() += "\n";
    prompts.back() += line;
    first = false;
  }
  prompts.erase(std::remove(prompts.begin(), prompts.end(), std::string()), prompts.end());
  return prompts;
}

// The top kTop tokens of a logits row as [id, logprob] JSON, log-softmax over the vocabulary.
std::string top_json(const float* logits, int n_vocab, int* argmax) {
  double max = logits[0];
  for (int i = 1; i < n_vocab; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  std::vector<int> ids(static_cast<size_t>(n_vocab));
  for (int i = 0; i < n_vocab; ++i) ids[static_cast<size_t>(i)] = i;
  std::partial_sort(ids.begin(), ids.begin() + kTop, ids.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (argmax) *argmax = ids[0];
  std::ostringstream out;
  out << "[";
  for (int k = 0; k < kTop; ++k) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s[%d, %.6f]", k ? ", " : "", ids[static_cast<size_t>(k)],
                  static_cast<double>(logits[ids[static_cast<size_t>(k)]]) - log_z);
    out << buf;
  }
  out << "]";
  return out.str();
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void decode_or_die(llama_context* ctx, llama_batch& batch) {
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama_decode failed\n");
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPTS.txt N_UBATCH N_THREADS > OUT.json\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> prompts = read_prompts(argv[2]);
  const int n_ubatch = std::atoi(argv[3]);
  const int n_threads = std::atoi(argv[4]);

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 4096;
  cp.n_batch = 4096;
  cp.n_ubatch = static_cast<uint32_t>(n_ubatch);
  cp.n_threads = n_threads;
  cp.n_threads_batch = n_threads;
  cp.n_seq_max = 1;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;

  std::printf("{\"cases\": [");
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    const std::string& text = prompts[pi];
    std::vector<llama_token> tokens(text.size() + 16);
    const int n = llama_tokenize(vocab, text.c_str(), static_cast<int32_t>(text.size()), tokens.data(),
                                 static_cast<int32_t>(tokens.size()), /*add_special=*/false, /*parse_special=*/true);
    if (n <= 0) return 1;
    tokens.resize(static_cast<size_t>(n));
    llama_memory_clear(llama_get_memory(ctx), true);

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
      batch.token[i] = tokens[static_cast<size_t>(i)];
      batch.pos[i] = i;
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    decode_or_die(ctx, batch);
    std::printf("%s{\"prompt\": %s, \"prompt_tokens\": [", pi ? ", " : "", json_string(text).c_str());
    for (int i = 0; i < n; ++i) std::printf("%s%d", i ? ", " : "", tokens[static_cast<size_t>(i)]);
    std::printf("], \"prompt_top\": [");
    for (int i = 0; i < n; ++i)
      std::printf("%s%s", i ? ", " : "", top_json(llama_get_logits_ith(ctx, i), n_vocab, nullptr).c_str());
    llama_batch_free(batch);

    // generated_top[i] is the distribution generated[i] was taken from (its first one is the last
    // prompt position's).
    std::vector<llama_token> generated;
    std::vector<std::string> generated_top;
    llama_batch one = llama_batch_init(1, 0, 1);
    const float* logits = llama_get_logits_ith(ctx, n - 1);
    for (int step = 0; step < kGenerate; ++step) {
      int next = 0;
      generated_top.push_back(top_json(logits, n_vocab, &next));
      generated.push_back(next);
      if (step + 1 == kGenerate) break;
      one.token[0] = next;
      one.pos[0] = n + step;
      one.n_seq_id[0] = 1;
      one.seq_id[0][0] = 0;
      one.logits[0] = 1;
      one.n_tokens = 1;
      decode_or_die(ctx, one);
      logits = llama_get_logits_ith(ctx, 0);
    }
    llama_batch_free(one);
    std::printf("], \"generated\": [");
    for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? ", " : "", generated[i]);
    std::printf("], \"generated_top\": [");
    for (size_t i = 0; i < generated_top.size(); ++i) std::printf("%s%s", i ? ", " : "", generated_top[i].c_str());
    std::printf("]}");
  }
  std::printf("]}\n");
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
