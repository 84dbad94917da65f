#include "model/preset_vocab.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agentkv/error.h"

namespace agentkv::mkmodel {
namespace fs = std::filesystem;

namespace {

// Meta's Llama 3.1 template, as llama.cpp keeps it for its tests (../shared/fixtures/templates/).
std::string llama31_chat_template() {
  const fs::path source_root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const fs::path file = source_root / ".." / "shared" / "fixtures" / "templates" /
                        "meta-llama-Llama-3.1-8B-Instruct.jinja";
  std::ifstream in(file);
  if (!in)
    throw Error("a Llama 3 preset carries Llama 3.1's chat template, read from " +
                file.lexically_normal().string() + ", which is missing");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

VocabData vocab_for_shape(const ModelShape& shape, VocabData v) {
  if (!shape.llama3_vocab) return v;
  auto add_control = [&](const std::string& text) {
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == text) return static_cast<Token>(i);
    v.tokens.push_back(text);
    v.types.push_back(TokenType::Control);
    return static_cast<Token>(v.tokens.size() - 1);
  };
  Token bos = -1, eot = -1;
  for (const char* text : kLlama3SpecialTokens) {
    const Token id = add_control(text);
    if (std::string(text) == "<|begin_of_text|>") bos = id;
    if (std::string(text) == "<|eot_id|>") eot = id;
  }
  if (static_cast<int64_t>(v.tokens.size()) > shape.n_vocab)
    throw Error("preset " + shape.name + ": the tokenizer leaves no room for Llama 3's special tokens");
  v.pre = "llama-bpe";
  v.bos = bos;
  v.eos = eot;  // Llama 3.x instruct GGUFs end a turn with <|eot_id|>
  v.eot = -1;
  v.pad = -1;
  v.add_bos = true;
  v.chat_template = llama31_chat_template();
  return v;
}

}  // namespace agentkv::mkmodel
