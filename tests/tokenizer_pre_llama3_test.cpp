// The Llama 3 ("llama-bpe" and its aliases), Mistral tekken and gpt-4o (o200k: gpt-oss)
// pre-tokenizers: their splits, derived by hand from the regexes; the hand-written Llama 3
// splitter against the regex run by PCRE2; and whole tokenizations against llama.cpp. No Llama 3,
// tekken or gpt-oss vocabulary is at hand, so llama.cpp's GPT-2 test vocabulary stands in,
// retagged with tokenizer.ggml.pre = "llama-bpe" / "tekken" / "gpt-4o" (tests/vocab_fixtures.h);
// llama.cpp's ids for it are in tests/data/vocab (recorded by
// tests/reference/llama_vocab_ids.cpp, see tests/reference/README.md). Also the add_bos defaults
// llama.cpp gives these pre-tokenizers.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "agentkv/tokenizer.h"
#include "fixtures.h"
#include "tokenizer/pretokenizer.h"
#include "vocab_fixtures.h"

using agentkv::Token;
using agentkv::Tokenizer;
namespace tv = agentkv::test_vocab;
using Words = std::vector<std::string>;

namespace {

const std::string kGpt2Vocab = std::string(AGENTKV_FIXTURES_DIR) + "/vocab/ggml-vocab-gpt-2.gguf";
const std::string kDataDir = std::string(AGENTKV_SOURCE_DIR) + "/tests/data/vocab/";

constexpr const char* kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::unique_ptr<agentkv::tokenizer::PreTokenizer> pre(const char* name) {
  auto p = agentkv::tokenizer::PreTokenizer::create(name);
  EXPECT_TRUE(p) << name;
  return p;
}

TEST(Llama3PreTokenizer, SplitsAsTheRegexSays) {
  const auto p = pre("llama-bpe");
  // \p{N}{1,3}: digits in threes from the left (Qwen2 takes them one by one).
  EXPECT_EQ(p->split("12345"), (Words{"123", "45"}));
  EXPECT_EQ(p->split("1234567 x"), (Words{"123", "456", "7", " x"}));
  EXPECT_EQ(p->split("3.14"), (Words{"3", ".", "14"}));
  EXPECT_EQ(p->split("\xD0\x9F\xD1\x80\xD0\xB8" "123" "\xD0\xBC"), (Words{"\xD0\x9F\xD1\x80\xD0\xB8", "123", "\xD0\xBC"}));
  // Contractions in either case; a letter run takes one leading non-letter, non-digit.
  EXPECT_EQ(p->split("I'M YOU'RE don't"), (Words{"I", "'M", " YOU", "'RE", " don", "'t"}));
  EXPECT_EQ(p->split(".Net a+=b"), (Words{".Net", " a", "+=", "b"}));
  // Whitespace: a run before a word leaves its last space to the word; newlines end a run.
  EXPECT_EQ(p->split("    Hello\n    Hello"), (Words{"   ", " Hello", "\n", "   ", " Hello"}));
  EXPECT_EQ(p->split("x  !!\n\ny"), (Words{"x", " ", " !!\n\n", "y"}));
  EXPECT_EQ(p->split("a\r\n\r\nb"), (Words{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(p->split("\t\n"), (Words{"\t\n"}));
  EXPECT_EQ(p->split("end  "), (Words{"end", "  "}));
}

TEST(Llama3PreTokenizer, EveryLlamaCppAliasSelectsIt) {
  for (const char* name : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                           "jina-v5-nano"}) {
    const auto p = pre(name);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->split("12345"), (Words{"123", "45"})) << name;
    EXPECT_TRUE(p->clean_spaces()) << name;   // llama.cpp leaves clean_spaces on for llama3
    EXPECT_TRUE(p->ignore_merges()) << name;
  }
  EXPECT_FALSE(agentkv::tokenizer::PreTokenizer::create("mistral-bpe"));  // not a llama.cpp name
}

std::vector<std::string> random_texts(int count, uint32_t seed) {
  const std::vector<std::string> pool = {
      "a", "Z", "0", "7", "12", "345", " ", "  ", "\t", "\n", "\r", "'", "'s", "'T", "'re", "'LL", ".", "!", "+",
      "/", "\xC3\xA9", "\xD0\x96", "\xE4\xB8\xAD", "\xD9\xA3", "\xE2\x91\xA0", "\xCC\x81", "\xC2\xA0", "\xE3\x80\x80",
      "\xF0\x9F\xA6\x99", "\xFF", "\xE6\x97", std::string("\0", 1)};
  std::mt19937 rng(seed);
  std::vector<std::string> texts;
  for (int i = 0; i < count; ++i) {
    std::string t;
    const int len = 1 + int(rng() % 24);
    for (int k = 0; k < len; ++k) t += pool[rng() % pool.size()];
    texts.push_back(t);
  }
  return texts;
}

TEST(Llama3PreTokenizer, HandWrittenSplitterMatchesTheRegex) {
  const auto hand = agentkv::tokenizer::make_llama3_pretokenizer();
  const auto regex = agentkv::tokenizer::make_regex_pretokenizer({kLlama3Regex}, true);
  auto texts = random_texts(4000, 3);
  for (const auto& t : tv::read_texts(kDataDir + "texts.inp")) texts.push_back(t);
  for (const auto& t : texts) ASSERT_EQ(hand->split(t), regex->split(t)) << "text: '" << t << "'";
}

TEST(TekkenPreTokenizer, SplitsAsLlamaCppsAdaptedRegexSays) {
  const auto p = pre("tekken");
  EXPECT_FALSE(p->clean_spaces());
  EXPECT_TRUE(p->ignore_merges());
  // Upper-case letters then lower-case ones make a word; digits go one by one.
  EXPECT_EQ(p->split("CamelCaseWord iPhone"), (Words{"Camel", "Case", "Word", " i", "Phone"}));
  EXPECT_EQ(p->split("HTTPServer ABC def"), (Words{"HTTPServer", " ABC", " def"}));
  EXPECT_EQ(p->split("x123"), (Words{"x", "1", "2", "3"}));
  // Punctuation runs take following newlines and slashes.
  EXPECT_EQ(p->split("a/b/c"), (Words{"a", "/b", "/c"}));
  EXPECT_EQ(p->split("path/\nnext"), (Words{"path", "/\n", "next"}));
  // A non-ASCII letter is one collapsed class, "[^a-z]" and "[^A-Z]" alike: it ends an upper-case
  // run as a word of its own (llama.cpp's adaptation; Hugging Face would keep "ÄPFEL" whole).
  EXPECT_EQ(p->split("\xC3\x84PFEL"), (Words{"\xC3\x84", "PFEL"}));
}

// OpenAI's o200k (gpt-oss): tekken's case-shaped words, each with an optional contraction, and
// digits in threes; no clean_spaces, no ignore_merges (llama.cpp's GPT4O settings).
TEST(Gpt4oPreTokenizer, SplitsAsLlamaCppsAdaptedRegexSays) {
  for (const char* name : {"gpt-4o", "llama4", "kanana2", "talkie"}) {
    const auto p = pre(name);
    ASSERT_TRUE(p) << name;
    EXPECT_FALSE(p->clean_spaces()) << name;
    EXPECT_FALSE(p->ignore_merges()) << name;
  }
  const auto p = pre("gpt-4o");
  EXPECT_EQ(p->split("CamelCaseWord iPhone"), (Words{"Camel", "Case", "Word", " i", "Phone"}));
  EXPECT_EQ(p->split("HTTPServer ABC def"), (Words{"HTTPServer", " ABC", " def"}));
  // The contraction stays with its word, in either case; an upper-case word takes it too.
  EXPECT_EQ(p->split("I'm don't YOU'RE it's"), (Words{"I'm", " don't", " YOU'RE", " it's"}));
  EXPECT_EQ(p->split("'s"), (Words{"'s"}));
  // Digits in runs of up to three, not glued to letters.
  EXPECT_EQ(p->split("x12345 3.14"), (Words{"x", "123", "45", " ", "3", ".", "14"}));
  EXPECT_EQ(p->split("a/b/c path/\nnext"), (Words{"a", "/b", "/c", " path", "/\n", "next"}));
  EXPECT_EQ(p->split("    Hello\n\n  x"), (Words{"   ", " Hello", "\n\n", " ", " x"}));
  EXPECT_EQ(p->split("\xC3\x84PFEL"), (Words{"\xC3\x84", "PFEL"}));
  EXPECT_EQ(p->split("<|channel|>analysis"), (Words{"<|", "channel", "|>", "analysis"}));
}

// ---------------------------------------------------------------------------------------------
// Whole tokenizations against llama.cpp.

std::unique_ptr<Tokenizer> gpt2_vocab_as(const std::string& pre_name, std::unique_ptr<tv::VocabFile>& file,
                                         bool add_bos_key = false, bool add_bos_value = false) {
  auto w = tv::retagged_vocab(kGpt2Vocab, pre_name);
  if (add_bos_key) w.set_bool("tokenizer.ggml.add_bos_token", add_bos_value);
  file = tv::open_vocab_bytes(w.to_bytes(), "gpt-2 vocab as " + pre_name);
  return Tokenizer::from_gguf(*file->reader);
}

std::string ids_text(const std::vector<Token>& ids) {
  std::string s;
  for (Token t : ids) s += std::to_string(t) + " ";
  return s;
}

class RetaggedGpt2Vocab : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { AGENTKV_NEEDS_FIXTURES(); }
};

TEST_P(RetaggedGpt2Vocab, TokenizesAndDetokenizesAsLlamaCpp) {
  const std::string pre_name = GetParam();
  std::unique_ptr<tv::VocabFile> file;
  const auto t = gpt2_vocab_as(pre_name, file);
  const std::string base = kDataDir + "gpt2-as-" + pre_name;
  const auto cases = tv::read_cases(kDataDir + "texts.inp", base + ".texts.out");
  const auto decoded = tv::read_texts(base + ".texts.detok");
  ASSERT_EQ(decoded.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(ids_text(t->encode(cases[i].text, false, false)), ids_text(cases[i].ids)) << "text: '" << cases[i].text << "'";
    EXPECT_EQ(t->decode(cases[i].ids), decoded[i]) << "text: '" << cases[i].text << "'";
  }
  // llama.cpp's own GPT-2 test texts, and random ones (tests/reference/random_vocab_texts.py).
  for (const auto& [inp, out] : {std::pair{kGpt2Vocab + ".inp", base + ".fixture.out"},
                                 std::pair{kDataDir + "random.inp", base + ".random.out"}})
    for (const auto& c : tv::read_cases(inp, out))
      EXPECT_EQ(ids_text(t->encode(c.text, false, false)), ids_text(c.ids)) << "text: '" << c.text << "'";
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, RetaggedGpt2Vocab, ::testing::Values("llama-bpe", "tekken", "gpt-4o"),
                         [](const auto& info) {
                           const std::string p = info.param;
                           return p == "tekken" ? "Tekken" : p == "gpt-4o" ? "Gpt4o" : "LlamaBpe";
                         });

TEST(Llama3Tokenizer, AddsBosAsLlamaCppDoesWithoutTheKey) {
  AGENTKV_NEEDS_FIXTURES();
  std::unique_ptr<tv::VocabFile> file;
  const auto llama3 = gpt2_vocab_as("llama-bpe", file);
  EXPECT_TRUE(llama3->add_bos());
  EXPECT_EQ(llama3->bos(), 50256);
  for (const auto& c : tv::read_cases(kDataDir + "texts.inp", kDataDir + "gpt2-as-llama-bpe.texts.add-special.out"))
    EXPECT_EQ(ids_text(llama3->encode(c.text, true, false)), ids_text(c.ids)) << "text: '" << c.text << "'";
  std::unique_ptr<tv::VocabFile> file2;
  EXPECT_TRUE(gpt2_vocab_as("tekken", file2)->add_bos());
  EXPECT_FALSE(gpt2_vocab_as("llama-bpe", file2, true, false)->add_bos());  // the key wins
  EXPECT_FALSE(gpt2_vocab_as("gpt-2", file2)->add_bos());
  EXPECT_TRUE(gpt2_vocab_as("gpt-2", file2, true, true)->add_bos());
}

// ignore_merges: a word that is a token is taken whole, even where the merges cannot make it.
TEST(Llama3Tokenizer, WholeWordTokensSkipTheMerges) {
  agentkv::VocabData v;
  v.tokens = {"a", "b", "c", "ab", "abc"};
  v.types.assign(v.tokens.size(), agentkv::TokenType::Normal);
  v.merges = {"a b"};
  v.pre = "qwen2";
  EXPECT_EQ(Tokenizer(v).encode("abc"), (std::vector<Token>{3, 2}));
  v.pre = "llama-bpe";
  EXPECT_EQ(Tokenizer(v).encode("abc"), (std::vector<Token>{4}));
  EXPECT_EQ(Tokenizer(v).encode("abcab"), (std::vector<Token>{3, 2, 3}));  // not a token: merged
  v.pre = "tekken";
  EXPECT_EQ(Tokenizer(v).encode("abc"), (std::vector<Token>{4}));
}

// A Hugging Face tokenizer.json with Llama 3's split regex loads as "llama-bpe", and, its
// tokenizer_config.json naming a BOS but not add_bos_token, adds BOS as llama.cpp's default says.
TEST(Llama3Tokenizer, HfFilesWithTheLlama3RegexLoadAsLlamaBpe) {
  const std::string dir = ::testing::TempDir();
  const std::string tokenizer_json = dir + "/llama3_tokenizer.json", config_json = dir + "/llama3_config.json";
  std::ofstream(tokenizer_json) << R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "1": 3, "12": 4, "123": 5}, "merges": ["a b", "1 2", "12 3"]},
    "added_tokens": [{"id": 6, "content": "<|begin_of_text|>", "special": true}],
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
      {"type": "ByteLevel", "use_regex": false}]}})";
  std::ofstream(config_json) << R"({"bos_token": "<|begin_of_text|>"})";
  const auto t = Tokenizer::from_hf_files(tokenizer_json, config_json);
  EXPECT_EQ(t->data().pre, "llama-bpe");
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->encode("ab1231", true), (std::vector<Token>{6, 2, 5, 3}));
}

// gpt-oss's tokenizer.json (o200k's split regex, then ByteLevel without its own) loads as "gpt-4o".
TEST(Gpt4oTokenizer, HfFilesWithTheO200kRegexLoadAsGpt4o) {
  const std::string dir = ::testing::TempDir();
  const std::string tokenizer_json = dir + "/o200k_tokenizer.json";
  std::ofstream(tokenizer_json) << R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "1": 3, "12": 4, "123": 5}, "merges": ["a b", "1 2", "12 3"]},
    "added_tokens": [],
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "use_regex": false}]}})";
  const auto t = Tokenizer::from_hf_files(tokenizer_json);
  EXPECT_EQ(t->data().pre, "gpt-4o");
  EXPECT_FALSE(t->add_bos());
  EXPECT_EQ(t->encode("ab1231"), (std::vector<Token>{2, 5, 3}));
}

}  // namespace
