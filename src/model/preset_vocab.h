// The vocabulary a preset model carries: the base tokenizer (Qwen3's by default), plus, for
// presets of other families, that family's chat tokens, pre-tokenizer, BOS rule and template — so
// a random-weight llama-micro chats as a Llama 3 model does.
#pragma once
#include "agentkv/model_presets.h"
#include "agentkv/tokenizer.h"

namespace agentkv::mkmodel {

// Llama 3's special tokens as the Llama 3.x GGUFs hold them (control tokens).
inline constexpr const char* kLlama3SpecialTokens[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eom_id|>",      "<|eot_id|>",                "<|python_tag|>"};

// `base` unchanged unless shape.llama3_vocab: then Llama 3's special tokens are appended (after
// the base tokens, inside the preset's vocabulary size), tokenizer.ggml.pre is "llama-bpe", BOS is
// <|begin_of_text|> and added, EOS is <|eot_id|>, and the chat template is Llama 3.1's (read from
// the fixtures beside this source tree; agentkv::Error when they are absent).
VocabData vocab_for_shape(const ModelShape& shape, VocabData base);

}  // namespace agentkv::mkmodel
