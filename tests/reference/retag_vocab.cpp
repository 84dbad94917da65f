// Copies a vocabulary-only GGUF with tokenizer.ggml.pre set to another value (e.g. llama.cpp's
// GPT-2 test vocabulary as "llama-bpe", "tekken" or "gpt-4o"), and optionally
// tokenizer.ggml.add_space_prefix set (llama.cpp's SentencePiece test vocabulary as Gemma's
// converter writes it: false), so that llama.cpp's ids for them can be recorded with
// llama_vocab_ids (no Llama 3 / Tekken / gpt-oss / Gemma vocabulary is at hand). PRE "-" keeps the
// file's. tests/tokenizer_pre_llama3_test.cpp and tests/tokenizer_spm_test.cpp build the same files
// in memory (tests/vocab_fixtures.h). Built with agentkv's own GGUF reader and writer: see
// README.md beside it.
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "../vocab_fixtures.h"

int main(int argc, char** argv) {
  std::optional<bool> add_space_prefix;
  if (argc == 5 && std::strcmp(argv[4], "--add-space-prefix=false") == 0) add_space_prefix = false;
  if (argc == 5 && std::strcmp(argv[4], "--add-space-prefix=true") == 0) add_space_prefix = true;
  if (argc != 4 && !(argc == 5 && add_space_prefix)) {
    std::fprintf(stderr, "usage: %s IN.gguf PRE|- OUT.gguf [--add-space-prefix=true|false]\n", argv[0]);
    return 1;
  }
  try {
    const std::string pre = std::strcmp(argv[2], "-") == 0 ? "" : argv[2];
    agentkv::test_vocab::retagged_vocab(argv[1], pre, add_space_prefix).write(argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
