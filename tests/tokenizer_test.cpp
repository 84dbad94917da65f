// Byte-level BPE tokenizer: llama.cpp's Qwen2 test vectors and the reference prompts' token ids,
// from both the Hugging Face files and the GGUF fixture; special tokens, decoding, errors, speed.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "agentkv/tokenizer.h"
#include "tokenizer/unicode.h"
#include "fixtures.h"

using agentkv::Token;
using agentkv::Tokenizer;

namespace {

const std::string kFixtures = AGENTKV_FIXTURES_DIR;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& text, const std::string& sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t next = text.find(sep, pos);
    if (next == std::string::npos) {
      parts.push_back(text.substr(pos));
      break;
    }
    parts.push_back(text.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return parts;
}

struct VocabCase {
  std::string text;
  std::vector<Token> ids;
};

// llama.cpp's tests/test-tokenizer-0 format: texts end with "\n__ggml_vocab_test__\n", one line of
// ids per text.
std::vector<VocabCase> vocab_cases() {
  const auto texts = split(read_file(kFixtures + "/tokenizer/qwen2-vocab-test.inp"), "\n__ggml_vocab_test__\n");
  std::ifstream out(kFixtures + "/tokenizer/qwen2-vocab-test.out");
  std::vector<VocabCase> cases;
  std::string line;
  for (const auto& t : texts) {
    EXPECT_TRUE(std::getline(out, line));
    VocabCase c{t, {}};
    std::istringstream ids(line);
    for (Token id; ids >> id;) c.ids.push_back(id);
    cases.push_back(c);
  }
  return cases;
}

struct ReferencePrompt {
  std::string text;
  std::vector<Token> ids;
};

std::vector<ReferencePrompt> reference_prompts() {
  const auto prompts = split(read_file(kFixtures + "/reference/prompts.txt"), "\n@@@@\n");
  const auto ref = nlohmann::json::parse(read_file(kFixtures + "/reference/qwen3-micro.json"));
  std::vector<ReferencePrompt> out;
  EXPECT_EQ(prompts.size(), ref.at("cases").size());
  for (size_t i = 0; i < prompts.size() && i < ref["cases"].size(); ++i) {
    EXPECT_EQ(prompts[i], ref["cases"][i]["prompt"].get<std::string>()) << "prompt " << i;
    out.push_back({prompts[i], ref["cases"][i]["prompt_tokens"].get<std::vector<Token>>()});
  }
  return out;
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!::agentkv::testing_support::fixtures_present()) return;  // SetUp() skips each test
    ::agentkv::testing_support::run_suite_setup([] {
      hf_ = Tokenizer::from_hf_files(kFixtures + "/tokenizer/qwen3-tokenizer.json",
                                     kFixtures + "/tokenizer/qwen3-tokenizer_config.json")
                .release();
      reader_ = agentkv::gguf::Reader::open(kFixtures + "/models/qwen3-micro.gguf").release();
      gguf_ = Tokenizer::from_gguf(*reader_).release();
    }, setup_error_);
  }
  void SetUp() override {
    AGENTKV_NEEDS_FIXTURES();
    AGENTKV_SUITE_SETUP_OK(setup_error_);
  }
  static inline std::string setup_error_;
  static void TearDownTestSuite() {
    delete hf_;
    delete gguf_;
    delete reader_;
  }
  static const Tokenizer& hf() { return *hf_; }
  static const Tokenizer& gguf() { return *gguf_; }

  static Tokenizer* hf_;
  static Tokenizer* gguf_;
  static agentkv::gguf::Reader* reader_;
};
Tokenizer* TokenizerTest::hf_ = nullptr;
Tokenizer* TokenizerTest::gguf_ = nullptr;
agentkv::gguf::Reader* TokenizerTest::reader_ = nullptr;

TEST_F(TokenizerTest, HfVocabularyMatchesTheGgufConverterOutput) {
  const auto& h = hf().data();
  const auto& g = gguf().data();
  EXPECT_EQ(hf().n_vocab(), 151669);   // the HF files' own size
  EXPECT_EQ(gguf().n_vocab(), 151936);  // padded by the converter with [PADn]
  ASSERT_LE(h.tokens.size(), g.tokens.size());
  for (size_t i = 0; i < h.tokens.size(); ++i) {
    ASSERT_EQ(h.tokens[i], g.tokens[i]) << "token " << i;
    ASSERT_EQ(h.types[i], g.types[i]) << "token type " << i;
  }
  for (size_t i = h.tokens.size(); i < g.tokens.size(); ++i) {
    ASSERT_EQ(g.tokens[i], "[PAD" + std::to_string(i) + "]");
    ASSERT_EQ(g.types[i], agentkv::TokenType::Unused);
  }
  EXPECT_EQ(h.merges, g.merges);
  EXPECT_EQ(h.pre, "qwen2");
  EXPECT_EQ(g.pre, "qwen2");
  EXPECT_EQ(h.eos, g.eos);
  EXPECT_EQ(h.pad, g.pad);
  EXPECT_EQ(h.add_bos, g.add_bos);
  EXPECT_EQ(h.chat_template, g.chat_template);
  EXPECT_EQ(g.eos, 151645);
  EXPECT_EQ(g.pad, 151643);
  EXPECT_EQ(g.bos, 151643);
  EXPECT_EQ(h.bos, -1);  // only config.json names it
}

// The tokenizer keeps its vocabulary in compact tables; data() must give back the file's lists
// byte for byte, and the tables must stay small (Qwen's 152k tokens and 151k merges).
TEST_F(TokenizerTest, DataRebuildsTheGgufListsFromTheCompactTables) {
  const auto& d = gguf().data();
  EXPECT_EQ(d.tokens, reader_->metadata().get_string_array("tokenizer.ggml.tokens").value());
  EXPECT_EQ(d.merges, reader_->metadata().get_string_array("tokenizer.ggml.merges").value());
  const auto types = reader_->metadata().get_int_array("tokenizer.ggml.token_type").value();
  ASSERT_EQ(d.types.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) ASSERT_EQ(int64_t(d.types[i]), types[i]) << i;
  EXPECT_EQ(&gguf().data(), &d);  // built once
  EXPECT_EQ(gguf().chat_template(), d.chat_template);
  EXPECT_FALSE(gguf().chat_template().empty());
  EXPECT_LT(hf().memory_bytes(), size_t(10) << 20);
}

TEST_F(TokenizerTest, ModelConfigSuppliesTheBos) {
  const std::string config = ::testing::TempDir() + "/tokenizer_test_config.json";
  std::ofstream(config) << R"({"bos_token_id": 151643, "eos_token_id": 151645, "vocab_size": 151936})";
  auto t = Tokenizer::from_hf_files(kFixtures + "/tokenizer/qwen3-tokenizer.json",
                                    kFixtures + "/tokenizer/qwen3-tokenizer_config.json", config);
  EXPECT_EQ(t->bos(), 151643);
  EXPECT_EQ(t->eos(), 151645);  // tokenizer_config.json's eos wins
}

TEST_F(TokenizerTest, LlamaCppVocabTestVectorsFromHf) {
  const auto cases = vocab_cases();
  ASSERT_EQ(cases.size(), 46u);
  for (const auto& c : cases) EXPECT_EQ(hf().encode(c.text, false, false), c.ids) << "text: '" << c.text << "'";
}

TEST_F(TokenizerTest, LlamaCppVocabTestVectorsFromGguf) {
  for (const auto& c : vocab_cases())
    EXPECT_EQ(gguf().encode(c.text, false, false), c.ids) << "text: '" << c.text << "'";
}

TEST_F(TokenizerTest, ReferencePromptsTokenizeLikeLlamaCpp) {
  const auto prompts = reference_prompts();
  ASSERT_EQ(prompts.size(), 6u);
  for (const auto& p : prompts) {
    EXPECT_EQ(gguf().encode(p.text, false, true), p.ids) << p.text;
    EXPECT_EQ(hf().encode(p.text, false, true), p.ids) << p.text;
    EXPECT_EQ(gguf().decode(p.ids), p.text);
    EXPECT_EQ(gguf().decode(gguf().encode(p.text)), p.text);
  }
}

TEST_F(TokenizerTest, VocabVectorsDecodeBack) {
  for (const auto& c : vocab_cases()) EXPECT_EQ(gguf().decode(c.ids), c.text);
}

TEST_F(TokenizerTest, SpecialTokensAreParsed) {
  const auto hi = gguf().find_token("hi");
  ASSERT_TRUE(hi.has_value());
  const std::vector<Token> expected = {151644, 872, 198, *hi, 151645};  // <|im_start|> user \n hi <|im_end|>
  EXPECT_EQ(gguf().encode("<|im_start|>user\nhi<|im_end|>"), expected);
  EXPECT_EQ(hf().encode("<|im_start|>user\nhi<|im_end|>"), expected);
  // Without parse_special, control tokens are plain text; user-defined ones are still matched.
  const auto plain = gguf().encode("<|im_start|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(gguf().decode(plain), "<|im_start|>");
  EXPECT_EQ(gguf().encode("<think>", false, false), std::vector<Token>{151667});
  EXPECT_EQ(gguf().encode("a<think>b", false, true).at(1), 151667);
  // llama.cpp turns FIM tokens into control tokens at load time (the GGUF says user-defined).
  EXPECT_GT(gguf().encode("<|fim_prefix|>", false, false).size(), 1u);
  EXPECT_EQ(gguf().encode("<|fim_prefix|>", false, true), std::vector<Token>{151659});
  // Adjacent and repeated special tokens.
  EXPECT_EQ(gguf().encode("<|im_end|><|im_end|>\n<|im_end|>"), (std::vector<Token>{151645, 151645, 198, 151645}));
}

TEST_F(TokenizerTest, BosOnlyWhenTheVocabularyAsksForIt) {
  EXPECT_EQ(gguf().encode("hi", true), gguf().encode("hi", false));  // add_bos_token = false
  agentkv::VocabData v = gguf().data();
  v.add_bos = true;
  const Tokenizer with_bos(std::move(v));
  const auto ids = with_bos.encode("hi", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 151643);
  EXPECT_EQ(std::vector<Token>(ids.begin() + 1, ids.end()), gguf().encode("hi"));
}

TEST_F(TokenizerTest, PiecesAndDecoding) {
  EXPECT_EQ(gguf().token_to_piece(151644, true), "<|im_start|>");
  EXPECT_EQ(gguf().token_to_piece(151644, false), "");
  EXPECT_EQ(gguf().token_to_piece(151667, false), "<think>");  // user-defined: always rendered
  EXPECT_EQ(gguf().token_to_piece(151700, true), "");          // [PAD151700], unused
  EXPECT_EQ(gguf().token_to_piece(220), " ");                  // "Ġ"
  EXPECT_EQ(gguf().token_to_piece(198), "\n");                 // "Ċ"
  const std::vector<Token> chat = {151644, 872, 198, 151645};
  EXPECT_EQ(gguf().decode(chat, true), "<|im_start|>user\n<|im_end|>");
  EXPECT_EQ(gguf().decode(chat, false), "user\n");
  // Pieces of one multi-byte character split over tokens concatenate back to it.
  const std::string llama = " \xF0\x9F\xA6\x99";  // " 🦙": 11162 99 247 in the test vectors
  const auto ids = gguf().encode(llama);
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(gguf().decode(ids), llama);
  // Negative ids are image rows (agentkv/vision.h): no text, in a piece or inside a decode.
  EXPECT_EQ(gguf().token_to_piece(-1), "");
  std::vector<Token> with_image = ids;
  with_image.insert(with_image.begin() + 1, -12345);
  EXPECT_EQ(gguf().decode(with_image), llama);
  EXPECT_THROW(gguf().token_to_piece(gguf().n_vocab()), agentkv::Error);
}

TEST_F(TokenizerTest, EndOfGenerationTokens) {
  for (Token t : {151643, 151645, 151662, 151663, 151664}) EXPECT_TRUE(gguf().is_eog(t)) << t;
  for (Token t : {151644, 151667, 872, -1}) EXPECT_FALSE(gguf().is_eog(t)) << t;
  EXPECT_EQ(gguf().eot(), 151645);
  EXPECT_EQ(gguf().eos(), 151645);
  EXPECT_TRUE(gguf().is_control(151644));
  EXPECT_TRUE(gguf().is_control(151659));  // <|fim_prefix|>
  EXPECT_FALSE(gguf().is_control(151667));
  EXPECT_FALSE(gguf().is_control(872));
  EXPECT_EQ(gguf().find_token("<|im_end|>"), 151645);
  EXPECT_EQ(gguf().find_token("Ġ"), 220);
  EXPECT_FALSE(gguf().find_token("no such token").has_value());
}

TEST_F(TokenizerTest, InvalidUtf8BecomesReplacementCharacters) {
  // llama.cpp decodes each byte that does not start a complete sequence as U+FFFD.
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(gguf().encode("\xFF"), gguf().encode(fffd));
  EXPECT_EQ(gguf().encode("a\x80" "b"), gguf().encode("a" + fffd + "b"));
  EXPECT_EQ(gguf().encode("x\xE6\x97"), gguf().encode("x" + fffd + fffd));  // truncated 3-byte form
  EXPECT_EQ(gguf().encode(std::string("\xC0\x80", 2)), gguf().encode(std::string("\0", 1)));  // overlong NUL
}

TEST_F(TokenizerTest, ConcurrentEncodesAgree) {
  const auto prompts = reference_prompts();
  std::vector<std::vector<Token>> results(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (const auto& p : prompts) {
          auto ids = gguf().encode(p.text);
          results[t].insert(results[t].end(), ids.begin(), ids.end());
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(results[0], results[1]);
}

TEST_F(TokenizerTest, LongPromptsAreFast) {
  // ~100k tokens of mixed text, then one 100 kB "word" that the word cache cannot help with.
  std::string text;
  const auto cases = vocab_cases();
  for (int rep = 0; text.size() < 400000; ++rep)
    for (const auto& c : cases) text += c.text + " " + std::to_string(rep) + "\n";
  auto t0 = std::chrono::steady_clock::now();
  const auto ids = gguf().encode(text);
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_GT(ids.size(), 100000u);
  EXPECT_EQ(gguf().decode(ids), text);
  std::mt19937 rng(7);
  std::string word;
  for (int i = 0; i < 100000; ++i) word.push_back(char('a' + rng() % 26));
  const auto word_ids = gguf().encode(word);
  auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(gguf().decode(word_ids), word);
  const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
  const double word_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("encode: %zu tokens in %.3f s; 100 kB word in %.3f s\n", ids.size(), prompt_s, word_s);
  EXPECT_LT(prompt_s, 5.0);  // generous: a quadratic BPE takes minutes here
  EXPECT_LT(word_s, 5.0);
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers: the hand-written Qwen2 splitter must agree with the regex run the way
// llama.cpp runs it (std::regex semantics over collapsed text; PCRE2 here).

std::vector<std::string> random_texts(int count, uint32_t seed) {
  const std::vector<std::string> pool = {
      " ", " ", "  ", "\t", "\n", "\r\n", "\r", "\v", "\f", "'", "'s", "'S", "'re", "'LL", "'d", "a", "Z", "hello",
      "World", "0", "7", "42", "!", "?", ".", ",", "(", ")", "<", ">", "~", "$", "_", "-", "=",
      "\xC3\xA9",          // é
      "\xC3\xA4",          // ä
      "e\xCC\x81",         // e + combining acute
      "\xCC\x81",          // lone combining acute
      "\xE0\xA4\xBF",      // Devanagari vowel sign (mark)
      "\xE6\x97\xA5",      // 日
      "\xE3\x81\xAE",      // の
      "\xD0\xBD",          // н
      "\xD9\xA3",          // Arabic-Indic digit three
      "\xC2\xB2",          // superscript two (No)
      "\xE2\x85\xA0",      // Roman numeral one (Nl)
      "\xC2\xA0",          // no-break space
      "\xE3\x80\x80",      // ideographic space
      "\xC2\x85",          // next line (whitespace)
      "\xE2\x80\x8B",      // zero width space (Cf)
      "\xF0\x9F\xA6\x99",  // 🦙
      "\xF0\x9F\x98\x81",  // 😁
      "\xE2\x9C\x85",      // ✅
      "\xEF\xBF\xBD",      // U+FFFD
      "\xFF", "\x80", "\xE6\x97",  // invalid bytes
      std::string("\0", 1), "\x01", "\x7F",
  };
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

void expect_same_split(const agentkv::tokenizer::PreTokenizer& a, const agentkv::tokenizer::PreTokenizer& b,
                       const std::vector<std::string>& texts) {
  for (const auto& t : texts) ASSERT_EQ(a.split(t), b.split(t)) << "text: '" << t << "'";
}

TEST(PreTokenizer, Qwen2MatchesTheRegex) {
  AGENTKV_NEEDS_FIXTURES();
  auto hand = agentkv::tokenizer::make_qwen2_pretokenizer(false);
  auto regex = agentkv::tokenizer::make_regex_pretokenizer(
      {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
      false);
  std::vector<std::string> texts;
  for (const auto& c : vocab_cases()) texts.push_back(c.text);
  for (const auto& p : reference_prompts()) texts.push_back(p.text);
  expect_same_split(*hand, *regex, texts);
  expect_same_split(*hand, *regex, random_texts(3000, 1));
}

TEST(PreTokenizer, Qwen35MatchesTheRegex) {
  auto hand = agentkv::tokenizer::make_qwen2_pretokenizer(true);
  auto regex = agentkv::tokenizer::make_regex_pretokenizer(
      {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
       "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
      false);
  expect_same_split(*hand, *regex, random_texts(3000, 2));
  // Combining marks stay with their letters only in qwen35.
  const std::string text = "ne\xCC\x81" "e";  // "née" with a combining acute
  EXPECT_EQ(hand->split(text), std::vector<std::string>{text});
  // qwen2: the mark is not a letter, so it becomes the optional prefix of the next word.
  EXPECT_EQ(agentkv::tokenizer::make_qwen2_pretokenizer(false)->split(text),
            (std::vector<std::string>{"ne", "\xCC\x81" "e"}));
}

TEST(PreTokenizer, UnicodeClassesAreLlamaCpps) {
  using agentkv::unicode::Category;
  using agentkv::unicode::category;
  EXPECT_EQ(category(0x2EBF0), Category::Letter);     // CJK Extension I (Unicode 15.1)
  EXPECT_EQ(category(0x11F00), Category::Mark);       // Kawi (15.0)
  EXPECT_EQ(category(0x1C89), Category::Undefined);   // Unicode 16, not in llama.cpp's tables
  EXPECT_EQ(category(0x00B2), Category::Number);      // superscript two
  EXPECT_EQ(category(0x00AD), Category::Control);     // soft hyphen (Cf)
  EXPECT_TRUE(agentkv::unicode::is_whitespace(0x85));
  EXPECT_TRUE(agentkv::unicode::is_whitespace(0x3000));
  EXPECT_FALSE(agentkv::unicode::is_whitespace(0x200B));
  EXPECT_EQ(category(0x110000), Category::Undefined);
}

TEST(PreTokenizer, Qwen2Words) {
  auto pre = agentkv::tokenizer::make_qwen2_pretokenizer(false);
  using V = std::vector<std::string>;
  EXPECT_EQ(pre->split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pre->split("I'll 2026!!\n\n  x  "), (V{"I", "'ll", " ", "2", "0", "2", "6", "!!\n\n", " ", " x", "  "}));
  EXPECT_EQ(pre->split("    Hello\n    Hello"), (V{"   ", " Hello", "\n", "   ", " Hello"}));
  EXPECT_EQ(pre->split("\t\n"), (V{"\t\n"}));
}

TEST(PreTokenizer, DefaultAppliesLlamaCppsFourRegexes) {
  auto pre = agentkv::tokenizer::PreTokenizer::create("default");
  ASSERT_TRUE(pre);
  using V = std::vector<std::string>;
  // Punctuation runs first, then GPT-2 words, then digit runs, then digit triples.
  EXPECT_EQ(pre->split("Hello, world!!"), (V{"Hello", ",", " world", "!!"}));
  EXPECT_EQ(pre->split("x 12345"), (V{"x", " ", "123", "45"}));
  EXPECT_TRUE(pre->clean_spaces());
  EXPECT_FALSE(agentkv::tokenizer::PreTokenizer::create("qwen2")->clean_spaces());
  EXPECT_FALSE(agentkv::tokenizer::PreTokenizer::create("deepseek-llm"));  // not implemented
}

// ---------------------------------------------------------------------------------------------
// Refused input.

agentkv::VocabData tiny_vocab() {
  agentkv::VocabData v;
  v.pre = "qwen2";
  v.tokens = {"a", "b", "ab", "<|end|>"};
  v.types = {agentkv::TokenType::Normal, agentkv::TokenType::Normal, agentkv::TokenType::Normal,
             agentkv::TokenType::Control};
  v.merges = {"a b"};
  v.eos = 3;
  return v;
}

TEST(TokenizerErrors, RefusesBadVocabularies) {
  EXPECT_NO_THROW(Tokenizer{tiny_vocab()});
  auto expect_error = [](agentkv::VocabData v, const std::string& needle) {
    try {
      Tokenizer t(std::move(v), "test.gguf");
      ADD_FAILURE() << "no error, expected one mentioning " << needle;
    } catch (const agentkv::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("test.gguf"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  auto v = tiny_vocab();
  v.model = "bert";
  expect_error(v, "tokenizer.ggml.model");
  v = tiny_vocab();
  v.pre = "no-such-pre";
  expect_error(v, "tokenizer.ggml.pre");
  v = tiny_vocab();
  v.tokens[1] = "a";
  expect_error(v, "duplicate token 'a'");
  v = tiny_vocab();
  v.types.pop_back();
  expect_error(v, "tokenizer.ggml.token_type");
  v = tiny_vocab();
  v.add_bos = true;
  expect_error(v, "bos_token_id");
  v = tiny_vocab();
  v.tokens.clear();
  v.types.clear();
  expect_error(v, "tokenizer.ggml.tokens");
}

TEST(TokenizerErrors, TinyVocabularyMergesAndDropsUnknownBytes) {
  const Tokenizer t(tiny_vocab());
  EXPECT_EQ(t.encode("ab"), (std::vector<Token>{2}));
  EXPECT_EQ(t.encode("ba"), (std::vector<Token>{1, 0}));
  EXPECT_EQ(t.encode("a c"), (std::vector<Token>{0}));  // ' ', 'c' have no token: dropped like llama.cpp
  EXPECT_EQ(t.encode("ab<|end|>"), (std::vector<Token>{2, 3}));
  EXPECT_TRUE(t.is_eog(3));
}

// Odd merge lists: a repeated pair (the first, lower rank wins), a line without a space, a line
// with an empty right side, and an empty token text; data() gives all of it back unchanged.
TEST(TokenizerCompactTables, OddMergeListsKeepLlamaCppSemanticsAndRoundTrip) {
  agentkv::VocabData v;
  v.pre = "qwen2";
  v.tokens = {"a", "b", "c", "ab", "bc", "", "z"};
  v.types.assign(v.tokens.size(), agentkv::TokenType::Normal);
  v.merges = {"b c", "a b", "b c", "abc", "z ", "a bc"};
  const agentkv::VocabData given = v;
  const Tokenizer t(std::move(v));
  // "b c" (rank 0) before "a b" (rank 1); then "a bc" (rank 5) makes a text that is no token,
  // so its bytes are looked up one by one.
  EXPECT_EQ(t.encode("abc"), (std::vector<Token>{0, 1, 2}));
  EXPECT_EQ(t.encode("bc"), (std::vector<Token>{4}));
  EXPECT_EQ(t.encode("ab"), (std::vector<Token>{3}));
  EXPECT_EQ(t.find_token("[EMPTY_5]"), std::optional<Token>(5));
  EXPECT_EQ(t.find_token(""), std::nullopt);
  EXPECT_EQ(t.find_token("bc"), std::optional<Token>(4));
  EXPECT_EQ(t.find_token("cb"), std::nullopt);
  EXPECT_EQ(t.data().tokens, given.tokens);
  EXPECT_EQ(t.data().merges, given.merges);
  EXPECT_EQ(t.data().types, given.types);
}

TEST(TokenizerErrors, GgufWithAnotherTokenizerModel) {
  agentkv::gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "bert");
  w.set_array_string("tokenizer.ggml.tokens", {"a", "b"});
  const auto bytes = w.to_bytes();
  auto reader = agentkv::gguf::Reader::from_memory(bytes, "wpm.gguf");
  try {
    Tokenizer::from_gguf(*reader);
    ADD_FAILURE() << "no error";
  } catch (const agentkv::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("wpm.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
  }
  agentkv::gguf::Writer w2;
  w2.set_string("tokenizer.ggml.model", "gpt2");
  w2.set_array_string("tokenizer.ggml.tokens", {"a", "b"});
  const auto bytes2 = w2.to_bytes();
  auto reader2 = agentkv::gguf::Reader::from_memory(bytes2, "nomerges.gguf");
  EXPECT_THROW(Tokenizer::from_gguf(*reader2), agentkv::Error);
}

TEST(TokenizerErrors, HfFilesThatCannotBeRead) {
  EXPECT_THROW(Tokenizer::from_hf_files("/nonexistent/tokenizer.json"), agentkv::Error);
  const std::string bad = ::testing::TempDir() + "/tokenizer_test_bad.json";
  std::ofstream(bad) << "{\"model\": {\"type\": \"Unigram\"}}";
  EXPECT_THROW(Tokenizer::from_hf_files(bad), agentkv::Error);
  std::ofstream(bad) << "{not json";
  EXPECT_THROW(Tokenizer::from_hf_files(bad), agentkv::Error);
}

}  // namespace
