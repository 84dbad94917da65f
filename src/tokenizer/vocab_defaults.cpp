#include "tokenizer/vocab_defaults.h"

#include "tokenizer/pretokenizer.h"

namespace agentkv::tokenizer {

std::optional<VocabDefaults> vocab_defaults(std::string_view model, std::string_view pre) {
  VocabDefaults d;
  if (model == "llama") {
    d.kind = VocabKind::Spm;
    d.bos = 1;
    d.eos = 2;
    d.unk = 0;
    d.add_bos = true;
    d.add_space_prefix = true;
    return d;
  }
  if (model == "gpt2") {
    d.kind = VocabKind::Bpe;
    d.bos = 11;  // llama.cpp's gpt2 defaults, whatever token that is
    d.eos = 11;
    d.add_bos = is_llama3_pre(pre) || pre == "tekken";
    return d;
  }
  return std::nullopt;
}

}  // namespace agentkv::tokenizer
