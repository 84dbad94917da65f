// The chat vocabularies preset models carry over the base tokenizer (src/model/preset_vocab.h):
// each family's special tokens, BOS / EOS, pre-tokenizer and template, and what the tokenizer
// and the template make of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "agentkv/chat_template.h"
#include "agentkv/error.h"
#include "agentkv/model_presets.h"
#include "agentkv/tokenizer.h"
#include "fixture_models.h"
#include "fixtures.h"
#include "model/preset_vocab.h"

namespace agentkv {
namespace {

using Json = nlohmann::ordered_json;
using mkmodel::ModelShape;

ModelShape shape_with(ModelShape::ChatVocab vocab) {
  ModelShape s = mkmodel::find_preset("llama-micro");
  s.chat_vocab = vocab;
  return s;
}

Token id_of(const Tokenizer& tok, const std::string& text) {
  const auto id = tok.find_token(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

std::string render(const std::string& source, Json messages, bool add_generation_prompt, const std::string& bos) {
  ChatTemplateInputs in;
  in.messages = std::move(messages);
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = bos;
  return ChatTemplate(source).render(in);
}

TEST(PresetVocab, Gemma3TokensBosEosAndPreTokenizer) {
  AGENTKV_NEEDS_FIXTURES();
  const VocabData base = testing_support::fixture_vocab();
  const VocabData v = mkmodel::vocab_for_shape(shape_with(ModelShape::ChatVocab::Gemma3), base);
  EXPECT_EQ(v.pre, base.pre);  // Gemma's own vocabulary is SentencePiece: the BPE base keeps its splitter
  EXPECT_TRUE(v.add_bos);
  const Tokenizer tok(v);
  for (const char* t : mkmodel::kGemma3SpecialTokens) EXPECT_TRUE(tok.is_control(id_of(tok, t))) << t;
  EXPECT_EQ(tok.bos(), id_of(tok, "<bos>"));
  EXPECT_EQ(tok.eos(), id_of(tok, "<end_of_turn>"));
  EXPECT_TRUE(tok.is_eog(id_of(tok, "<end_of_turn>")));
  EXPECT_TRUE(tok.is_eog(id_of(tok, "<eos>")));  // llama.cpp ends generation on it by name too
  EXPECT_FALSE(tok.is_eog(id_of(tok, "<start_of_turn>")));
  EXPECT_EQ(tok.encode("hi", /*add_special=*/true).front(), tok.bos());
}

TEST(PresetVocab, Gemma3TemplateFoldsTheSystemMessageAndAlternatesRoles) {
  const std::string source = mkmodel::gemma3_chat_template();
  const Json chat = Json::parse(R"([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": " Hi \n"}, {"role": "assistant", "content": "Hello!"},
      {"role": "user", "content": [{"type": "text", "text": "Bye "}]}])");
  EXPECT_EQ(render(source, chat, true, "<bos>"),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render(source, Json::parse(R"([{"role": "user", "content": "Hi"}])"), false, "<bos>"),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n");
  // Two user turns in a row, or a conversation that starts with the model: Gemma's template raises.
  EXPECT_THROW(render(source, Json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"),
                      true, "<bos>"),
               Error);
  EXPECT_THROW(render(source, Json::parse(R"([{"role": "assistant", "content": "a"}])"), true, "<bos>"), Error);
}

TEST(PresetVocab, Gemma3PromptTokenizesIntoItsControlTokens) {
  AGENTKV_NEEDS_FIXTURES();
  const Tokenizer tok(mkmodel::vocab_for_shape(shape_with(ModelShape::ChatVocab::Gemma3), testing_support::fixture_vocab()));
  const std::string prompt =
      render(tok.chat_template(), Json::parse(R"([{"role": "user", "content": "Hi"}])"), true, "<bos>");
  const std::vector<Token> ids = tok.encode(prompt);
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids[0], tok.bos());
  EXPECT_EQ(ids[1], id_of(tok, "<start_of_turn>"));
  EXPECT_EQ(tok.decode(ids), prompt);
}

TEST(PresetVocab, HarmonyTokensAsLlamaCppLoadsThem) {
  AGENTKV_NEEDS_FIXTURES();
  const VocabData v = mkmodel::vocab_for_shape(shape_with(ModelShape::ChatVocab::Harmony), testing_support::fixture_vocab());
  EXPECT_EQ(v.pre, "gpt-4o");
  EXPECT_FALSE(v.add_bos);  // the template writes no BOS and the converter no add_bos_token
  for (const char* t : mkmodel::kHarmonySpecialTokens) {
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), t);
    ASSERT_NE(it, v.tokens.end()) << t;
    EXPECT_EQ(v.types[size_t(it - v.tokens.begin())], TokenType::Control) << t;  // as the GGUF holds them
  }
  const Tokenizer tok(v);
  EXPECT_EQ(tok.bos(), id_of(tok, "<|startoftext|>"));
  EXPECT_EQ(tok.eos(), id_of(tok, "<|return|>"));
  // llama.cpp's harmony rules: <|return|>, <|call|> (and <|endoftext|>) end the generation, <|end|>
  // ends a message only; the framing tokens are always rendered (user-defined), so the output
  // parser sees them with or without `special`.
  for (const char* t : {"<|return|>", "<|call|>", "<|endoftext|>"}) EXPECT_TRUE(tok.is_eog(id_of(tok, t))) << t;
  for (const char* t : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"}) {
    EXPECT_FALSE(tok.is_eog(id_of(tok, t))) << t;
    EXPECT_FALSE(tok.is_control(id_of(tok, t))) << t;
    EXPECT_EQ(tok.token_to_piece(id_of(tok, t), /*special=*/false), t);
  }
  const std::string framing = "<|start|>assistant<|channel|>final<|message|>Hi<|end|>";
  const std::vector<Token> ids = tok.encode(framing, false, /*parse_special=*/false);  // user-defined: matched anyway
  EXPECT_EQ(ids.front(), id_of(tok, "<|start|>"));
  EXPECT_EQ(ids.back(), id_of(tok, "<|end|>"));
  EXPECT_EQ(tok.decode(ids, /*special=*/false), framing);
}

}  // namespace
}  // namespace agentkv
