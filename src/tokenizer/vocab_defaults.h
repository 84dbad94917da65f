// What llama.cpp's vocabulary loader assumes when a GGUF leaves a tokenizer key out: the special
// token ids and the add_bos / add_space_prefix flags that follow from tokenizer.ggml.model and
// tokenizer.ggml.pre (llama_vocab::impl::load). The file's own keys override every one of them.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace agentkv::tokenizer {

enum class VocabKind { Bpe, Spm };

struct VocabDefaults {
  VocabKind kind = VocabKind::Bpe;
  int32_t bos = -1, eos = -1, unk = -1;  // -1: none
  bool add_bos = false;
  // SentencePiece prepends a space to the text (and decoding drops it again).
  bool add_space_prefix = false;
};

// nullopt for a tokenizer.ggml.model agentkv does not implement ("gpt2" = byte-level BPE,
// "llama" = SentencePiece). `pre` matters only for BPE: llama.cpp turns add_bos on for the
// Llama 3 family and tekken.
std::optional<VocabDefaults> vocab_defaults(std::string_view model, std::string_view pre);

}  // namespace agentkv::tokenizer
