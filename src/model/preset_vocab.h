// The vocabulary a preset model carries: the base tokenizer (Qwen3's by default), plus, for
// presets of other families, that family's chat tokens, pre-tokenizer, BOS rule and template — so
// a random-weight llama-micro chats as a Llama 3 model does, mistral-micro as Mistral Small 3.2,
// gemma3-micro as Gemma 3 and gpt-oss-micro as gpt-oss (harmony).
#pragma once
#include <string>

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

// Gemma 3's control tokens, in the order of its vocabulary (<pad> 0, <eos> 1, <bos> 2, ...,
// <start_of_turn> 105, <end_of_turn> 106, ..., the image markers). Its <unk> and <mask> are left
// out: Qwen3's BPE base has an ordinary "<unk>" token, and neither reaches a chat.
inline constexpr const char* kGemma3SpecialTokens[] = {
    "<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"};

// gpt-oss's special tokens (o200k_harmony) as its GGUF holds them, in vocabulary order
// (<|startoftext|> 199998 ... <|endofprompt|> 200018; the reserved ones between are left out), all
// control tokens in the file. Loading gives them llama.cpp's harmony attributes: <|start|>,
// <|channel|>, <|message|>, <|constrain|> and <|end|> are always rendered and <|end|> does not end
// the generation; <|return|>, <|call|> and <|endoftext|> do.
inline constexpr const char* kHarmonySpecialTokens[] = {
    "<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
    "<|message|>",     "<|call|>",      "<|endofprompt|>"};

// Gemma 3's chat template (google/gemma-3-*-it, tokenizer_config.json's chat_template; the
// fixtures hold Gemma 2's and Gemma 4's only): the system message folded into the first user
// turn after "\n\n", roles user / model, `<start_of_turn>ROLE\n...<end_of_turn>\n`, the
// generation prompt `<start_of_turn>model\n`; it raises on roles that do not alternate and
// knows no tools.
std::string gemma3_chat_template();

// `base` unchanged for ChatVocab::Base. Otherwise the family's special tokens are appended (after
// the base tokens, inside the preset's vocabulary size; a token the base already has is reused)
// as control tokens, with the family's pre-tokenizer ("llama-bpe" / "tekken" / "gpt-4o"; Gemma 3
// keeps the base's: its own vocabulary is SentencePiece, which a BPE base cannot become), BOS
// (<|begin_of_text|> / <s> / <bos>, added; gpt-oss's <|startoftext|>, not added), EOS (what ends
// an instruct turn: <|eot_id|> / </s> / <end_of_turn> / <|return|>) and chat template (Llama
// 3.1's / Mistral Small 3.2's / gpt-oss's harmony, read from the fixtures beside this source tree,
// agentkv::Error when they are absent; Gemma 3's, above).
VocabData vocab_for_shape(const ModelShape& shape, VocabData base);

}  // namespace agentkv::mkmodel
