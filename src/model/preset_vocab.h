// The vocabulary a preset model carries: the base tokenizer (Qwen3's by default), plus, for
// presets of other families, that family's chat tokens, pre-tokenizer, BOS rule and template — so
// a random-weight llama-micro chats as a Llama 3 model does, and mistral-micro as Mistral Small 3.2.
#pragma once
#include "agentkv/model_presets.h"
#include "agentkv/tokenizer.h"

namespace agentkv::mkmodel {

// Llama 3's special tokens as the Llama 3.x GGUFs hold them (control tokens).
inline constexpr const char* kLlama3SpecialTokens[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eom_id|>",      "<|eot_id|>",                "<|python_tag|>"};

// Mistral's (tekken) control tokens that Mistral Small 3.2's template writes.
inline constexpr const char* kMistralSpecialTokens[] = {
    "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[TOOL_CONTENT]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
    "[IMG]"};

// `base` unchanged for ChatVocab::Base. Otherwise the family's special tokens are appended (after
// the base tokens, inside the preset's vocabulary size) as control tokens, with the family's
// pre-tokenizer ("llama-bpe" / "tekken"), BOS (<|begin_of_text|> / <s>, added), EOS (<|eot_id|> /
// </s>) and chat template (Llama 3.1's / Mistral Small 3.2's, read from the fixtures beside this
// source tree; agentkv::Error when they are absent).
VocabData vocab_for_shape(const ModelShape& shape, VocabData base);

}  // namespace agentkv::mkmodel
