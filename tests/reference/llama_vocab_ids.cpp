// Prints llama.cpp's token ids for each text of a test-tokenizer-0 style .inp file (texts separated
// by "\n__ggml_vocab_test__\n"), one line per text, as llama.cpp's own .out files hold them
// (add_special = false, parse_special = false; --add-special / --parse-special set them). With --detok F,
// F gets each text's detokenization (special = true, as common_detokenize), separated as in the .inp.
// Not part of agentkv's build: see README.md beside it for the command that builds it.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

static std::vector<std::string> read_texts(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string raw = ss.str(), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return texts;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf TEXTS.inp [--add-special] [--parse-special] [--detok OUT.detok]\n", argv[0]);
    return 1;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  bool add_special = false, parse_special = false;
  FILE* detok = nullptr;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--add-special") add_special = true;
    if (arg == "--parse-special") parse_special = true;
    if (arg == "--detok" && i + 1 < argc) detok = std::fopen(argv[++i], "wb");
  }
  for (const std::string& text : read_texts(argv[2])) {
    std::vector<llama_token> ids(text.size() + 8);
    int n = llama_tokenize(vocab, text.data(), int(text.size()), ids.data(), int(ids.size()), add_special, parse_special);
    if (n < 0) {
      ids.resize(-n);
      n = llama_tokenize(vocab, text.data(), int(text.size()), ids.data(), int(ids.size()), add_special, parse_special);
    }
    ids.resize(n);
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
    if (detok) {
      std::string out(text.size() * 4 + 64, '\0');
      int m = llama_detokenize(vocab, ids.data(), int(ids.size()), out.data(), int(out.size()), false, true);
      if (m < 0) {
        out.resize(-m);
        m = llama_detokenize(vocab, ids.data(), int(ids.size()), out.data(), int(out.size()), false, true);
      }
      out.resize(m);
      std::fwrite(out.data(), 1, out.size(), detok);
      std::fputs("\n__ggml_vocab_test__\n", detok);
    }
  }
  if (detok) std::fclose(detok);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
