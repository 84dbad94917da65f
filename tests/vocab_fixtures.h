// llama.cpp's vocabulary-only test GGUFs (../shared/fixtures/vocab/ggml-vocab-*.gguf) and their
// test-tokenizer-0 texts (.inp) and ids (.out), for the tokenizer tests and tests/reference tools.
#pragma once
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "gguf/gguf.h"

namespace agentkv::test_vocab {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A vocabulary GGUF held in memory (llama.cpp's vocab-only files end right after the metadata,
// which the reader accepts for a file without tensors).
struct VocabFile {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::Reader> reader;
};

inline std::unique_ptr<VocabFile> open_vocab_bytes(std::vector<uint8_t> bytes, const std::string& name) {
  auto f = std::make_unique<VocabFile>();
  f->bytes = std::move(bytes);
  f->reader = gguf::Reader::from_memory(f->bytes, name);
  return f;
}

inline std::unique_ptr<VocabFile> open_vocab(const std::string& path) {
  const std::string raw = read_bytes(path);
  return open_vocab_bytes(std::vector<uint8_t>(raw.begin(), raw.end()), path);
}

// The vocabulary at `path` with tokenizer.ggml.pre set to `pre` ("" keeps the file's) and, when
// given, tokenizer.ggml.add_space_prefix set (added after the other keys when the file has none;
// SentencePiece vocabularies such as Gemma's say false); every other key as it was.
inline gguf::Writer retagged_vocab(const std::string& path, const std::string& pre,
                                   std::optional<bool> add_space_prefix = std::nullopt) {
  const auto f = open_vocab(path);
  gguf::Writer w;
  for (const auto& [key, value] : f->reader->metadata().entries()) {
    if (key == "tokenizer.ggml.pre" && !pre.empty())
      w.set_string(key, pre);
    else
      w.set_value(key, value);
  }
  if (add_space_prefix) w.set_bool("tokenizer.ggml.add_space_prefix", *add_space_prefix);
  return w;
}

// One text of a test-tokenizer-0 file and llama.cpp's ids for it.
struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// The texts of a test-tokenizer-0 .inp file: each ends with "\n__ggml_vocab_test__\n".
inline std::vector<std::string> read_texts(const std::string& inp_path) {
  const std::string raw = read_bytes(inp_path), sep = "\n__ggml_vocab_test__\n";
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

// The texts and, from the .out file, one line of ids per text.
inline std::vector<Case> read_cases(const std::string& inp_path, const std::string& out_path) {
  std::vector<Case> cases;
  for (std::string& text : read_texts(inp_path)) cases.push_back({std::move(text), {}});
  std::istringstream out(read_bytes(out_path));
  std::string line;
  for (Case& c : cases) {
    if (!std::getline(out, line)) throw Error(out_path + ": fewer lines than " + inp_path + " has texts");
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

}  // namespace agentkv::test_vocab
