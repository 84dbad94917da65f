// Copies a vocabulary-only GGUF with tokenizer.ggml.pre set to another value (e.g. llama.cpp's
// GPT-2 test vocabulary as "llama-bpe" or "tekken"), so that llama.cpp's ids for that
// pre-tokenizer can be recorded with llama_vocab_ids (no Llama 3 / Tekken vocabulary is at hand).
// tests/tokenizer_pre_llama3_test.cpp builds the same file in memory (tests/vocab_fixtures.h).
// Built with agentkv's own GGUF reader and writer: see README.md beside it.
#include <cstdio>
#include <exception>

#include "../vocab_fixtures.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s IN.gguf PRE OUT.gguf\n", argv[0]);
    return 1;
  }
  try {
    agentkv::test_vocab::retagged_vocab(argv[1], argv[2]).write(argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
