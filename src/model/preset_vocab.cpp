#include "model/preset_vocab.h"

#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>

#include "agentkv/error.h"

namespace agentkv::mkmodel {
namespace fs = std::filesystem;

namespace {

// A real model's template, as llama.cpp keeps it for its tests (../shared/fixtures/templates/).
std::string fixture_chat_template(const std::string& family, const std::string& file_name) {
  const fs::path source_root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const fs::path file = source_root / ".." / "shared" / "fixtures" / "templates" / file_name;
  std::ifstream in(file);
  if (!in)
    throw Error("a " + family + " preset carries " + file_name + "'s chat template, read from " +
                file.lexically_normal().string() + ", which is missing");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ChatFamily {
  const char* name;
  std::span<const char* const> special_tokens;
  const char* bos;
  const char* eos;  // what ends an instruct turn
  const char* pre;  // nullptr: the base vocabulary's
  bool add_bos;
  const char* template_file;  // in the fixtures; nullptr: builtin_template
  std::string (*builtin_template)();
};

ChatFamily family_of(ModelShape::ChatVocab vocab) {
  switch (vocab) {
    case ModelShape::ChatVocab::Llama3:
      return {"Llama 3", kLlama3SpecialTokens, "<|begin_of_text|>", "<|eot_id|>", "llama-bpe", true,
              "meta-llama-Llama-3.1-8B-Instruct.jinja", nullptr};
    case ModelShape::ChatVocab::Harmony:
      return {"gpt-oss", kHarmonySpecialTokens, "<|startoftext|>", "<|return|>", "gpt-4o", false,
              "openai-gpt-oss-120b.jinja", nullptr};
    case ModelShape::ChatVocab::Gemma3:
      return {"Gemma 3", kGemma3SpecialTokens, "<bos>", "<end_of_turn>", nullptr, true, nullptr, gemma3_chat_template};
    default:
      return {"Mistral", kMistralSpecialTokens, "<s>", "</s>", "tekken", true,
              "Mistral-Small-3.2-24B-Instruct-2506.jinja", nullptr};
  }
}

}  // namespace

std::string gemma3_chat_template() {
  // Verbatim (the newlines inside the quoted strings are the JSON file's "\n" escapes, decoded).
  return R"({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
)";
}

VocabData vocab_for_shape(const ModelShape& shape, VocabData v) {
  if (shape.chat_vocab == ModelShape::ChatVocab::Base) return v;
  const ChatFamily family = family_of(shape.chat_vocab);
  auto add_control = [&](const std::string& text) {
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == text) return static_cast<Token>(i);
    v.tokens.push_back(text);
    v.types.push_back(TokenType::Control);
    return static_cast<Token>(v.tokens.size() - 1);
  };
  Token bos = -1, eos = -1;
  for (const char* text : family.special_tokens) {
    const Token id = add_control(text);
    if (std::string(text) == family.bos) bos = id;
    if (std::string(text) == family.eos) eos = id;
  }
  if (static_cast<int64_t>(v.tokens.size()) > shape.n_vocab)
    throw Error("preset " + shape.name + ": the tokenizer leaves no room for " + family.name + "'s special tokens");
  if (family.pre) v.pre = family.pre;
  v.bos = bos;
  v.eos = eos;
  v.eot = -1;
  v.pad = -1;
  v.add_bos = family.add_bos;
  v.chat_template =
      family.template_file ? fixture_chat_template(family.name, family.template_file) : family.builtin_template();
  return v;
}

}  // namespace agentkv::mkmodel
