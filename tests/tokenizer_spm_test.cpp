// SentencePiece vocabularies (tokenizer.ggml.model = "llama"): llama.cpp's own test vectors for
// its Llama 2 / Phi-3 test vocabularies (../shared/fixtures/vocab: every text, ids compared
// exactly, then decoded back), more texts and random ones with llama.cpp's ids and
// detokenizations recorded by tests/reference/llama_vocab_ids.cpp (tests/data/vocab), and the
// space-prefix / BOS / rstrip rules.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/tokenizer.h"
#include "fixtures.h"
#include "gguf/gguf.h"
#include "vocab_fixtures.h"

using agentkv::Token;
using agentkv::Tokenizer;
namespace tv = agentkv::test_vocab;

namespace {

const std::string kVocabDir = std::string(AGENTKV_FIXTURES_DIR) + "/vocab/";
const std::string kDataDir = std::string(AGENTKV_SOURCE_DIR) + "/tests/data/vocab/";

struct LoadedVocab {
  std::unique_ptr<tv::VocabFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

LoadedVocab load(const std::string& name) {
  LoadedVocab v;
  v.file = tv::open_vocab(kVocabDir + "ggml-vocab-" + name + ".gguf");
  v.tokenizer = Tokenizer::from_gguf(*v.file->reader);
  return v;
}

std::string ids_text(const std::vector<Token>& ids) {
  std::string s;
  for (Token t : ids) s += std::to_string(t) + " ";
  return s;
}

// llama.cpp's test-tokenizer-0: add_special = false, parse_special = false.
void expect_llama_cpp_ids(const Tokenizer& t, const std::vector<tv::Case>& cases) {
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases)
    EXPECT_EQ(ids_text(t.encode(c.text, false, false)), ids_text(c.ids)) << "text: '" << c.text << "'";
}

class SpmTokenizer : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { AGENTKV_NEEDS_FIXTURES(); }
};

TEST_P(SpmTokenizer, EncodesLlamaCppsTestTextsExactly) {
  const auto v = load(GetParam());
  const std::string base = kVocabDir + "ggml-vocab-" + GetParam() + ".gguf";
  expect_llama_cpp_ids(*v.tokenizer, tv::read_cases(base + ".inp", base + ".out"));
}

TEST_P(SpmTokenizer, DecodesLlamaCppsTestTextsBackToThemselves) {
  const auto v = load(GetParam());
  const std::string base = kVocabDir + "ggml-vocab-" + GetParam() + ".gguf";
  for (const auto& c : tv::read_cases(base + ".inp", base + ".out")) {
    EXPECT_EQ(v.tokenizer->decode(c.ids), c.text);
    // After BOS the text's space prefix stays, as in llama.cpp's detokenize.
    EXPECT_EQ(v.tokenizer->decode(v.tokenizer->encode(c.text, true, false)),
              c.text.empty() ? std::string("<s>") : "<s> " + c.text);
  }
}

// Newlines, tabs, CJK, combining marks, other digits and spaces, invalid UTF-8: llama.cpp's ids
// and its detokenization of them (which keeps a byte-fallback "▁" as its three bytes).
TEST_P(SpmTokenizer, MoreTextsMatchLlamaCppBothWays) {
  const auto v = load(GetParam());
  const std::string name = GetParam();
  const auto cases = tv::read_cases(kDataDir + "texts.inp", kDataDir + name + ".texts.out");
  expect_llama_cpp_ids(*v.tokenizer, cases);
  const auto decoded = tv::read_texts(kDataDir + name + ".texts.detok");
  ASSERT_EQ(decoded.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(v.tokenizer->decode(cases[i].ids), decoded[i]) << i;
}

// Random texts (tests/reference/random_vocab_texts.py): plain, and with special-token texts
// parsed and BOS added (Phi-3's rstrip included).
TEST_P(SpmTokenizer, RandomTextsMatchLlamaCpp) {
  const auto v = load(GetParam());
  const std::string name = GetParam();
  expect_llama_cpp_ids(*v.tokenizer, tv::read_cases(kDataDir + "random.inp", kDataDir + name + ".random.out"));
  const auto cases =
      tv::read_cases(kDataDir + "random-special.inp", kDataDir + name + ".random-special.add-parse-special.out");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases)
    EXPECT_EQ(ids_text(v.tokenizer->encode(c.text, true, true)), ids_text(c.ids)) << "text: '" << c.text << "'";
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, SpmTokenizer, ::testing::Values("llama-spm", "phi-3"),
                         [](const auto& info) { return std::string(info.param) == "phi-3" ? "Phi3" : "Llama"; });

// Gemma's converter writes tokenizer.ggml.add_space_prefix = false: no space before the text or
// after a special token, and none dropped when decoding. No Gemma vocabulary is at hand, so
// llama.cpp's Llama 2 test vocabulary stands in with the key set (tests/vocab_fixtures.h; its
// llama.cpp ids in tests/data/vocab/llama-spm-no-space-prefix.*, tests/reference/README.md).
TEST(SpmTokenizerNoSpacePrefix, MatchesLlamaCpp) {
  AGENTKV_NEEDS_FIXTURES();
  const std::string spm = kVocabDir + "ggml-vocab-llama-spm.gguf";
  const auto file = tv::open_vocab_bytes(tv::retagged_vocab(spm, "", false).to_bytes(), "llama-spm, no space prefix");
  const auto t = Tokenizer::from_gguf(*file->reader);
  EXPECT_FALSE(t->data().add_space_prefix);
  const std::string base = kDataDir + "llama-spm-no-space-prefix";
  expect_llama_cpp_ids(*t, tv::read_cases(spm + ".inp", base + ".fixture.out"));
  expect_llama_cpp_ids(*t, tv::read_cases(kDataDir + "random.inp", base + ".random.out"));
  const auto cases = tv::read_cases(kDataDir + "texts.inp", base + ".texts.out");
  expect_llama_cpp_ids(*t, cases);
  const auto decoded = tv::read_texts(base + ".texts.detok");
  ASSERT_EQ(decoded.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(t->decode(cases[i].ids), decoded[i]) << i;
  for (const auto& c : tv::read_cases(kDataDir + "random-special.inp", base + ".random-special.add-parse-special.out"))
    EXPECT_EQ(ids_text(t->encode(c.text, true, true)), ids_text(c.ids)) << "text: '" << c.text << "'";
  // 15043 = "▁Hello", 10994 = "Hello", 1 = <s>: the space is the text's own now.
  EXPECT_EQ(t->encode("Hello", false, false), (std::vector<Token>{10994}));
  EXPECT_EQ(t->encode(" Hello", false, false), (std::vector<Token>{15043}));
  EXPECT_EQ(t->decode(std::vector<Token>{15043}), " Hello");
}

class SpmTokenizerRules : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!::agentkv::testing_support::fixtures_present()) return;
    ::agentkv::testing_support::run_suite_setup([] { vocab_ = new LoadedVocab(load("llama-spm")); }, setup_error_);
  }
  static void TearDownTestSuite() { delete vocab_; }
  void SetUp() override {
    AGENTKV_NEEDS_FIXTURES();
    AGENTKV_SUITE_SETUP_OK(setup_error_);
  }
  static const Tokenizer& tok() { return *vocab_->tokenizer; }
  static inline LoadedVocab* vocab_ = nullptr;
  static inline std::string setup_error_;
};

using V = std::vector<Token>;

// What llama.cpp d32676d7 gives for these (tests/reference/llama_vocab_ids.cpp's calls): 1 = <s>,
// 15043 = "▁Hello", 263 = "▁a", 289 = "▁b", 259 = "▁▁", 29871 = "▁".
TEST_F(SpmTokenizerRules, SpacePrefixAtTheStartAndAfterEverySpecialToken) {
  EXPECT_EQ(tok().encode("Hello", false, false), (V{15043}));
  EXPECT_EQ(tok().encode(" ", false, false), (V{259}));
  EXPECT_EQ(tok().encode("<s>Hello", false, true), (V{1, 15043}));
  EXPECT_EQ(tok().encode("a<s>b", false, true), (V{263, 1, 289}));
  EXPECT_EQ(tok().encode("Hello<s>", false, true), (V{15043, 1}));
  EXPECT_EQ(tok().encode("", true, false), (V{1}));
  // add_bos_token = true in the file: BOS first, even before a BOS the text names.
  EXPECT_TRUE(tok().add_bos());
  EXPECT_FALSE(tok().add_eos());
  EXPECT_EQ(tok().encode("<s>Hello", true, true), (V{1, 1, 15043}));
}

TEST_F(SpmTokenizerRules, DecodeDropsOnlyTheFirstTokensSpace) {
  EXPECT_EQ(tok().decode(V{1, 15043}, true), "<s> Hello");
  EXPECT_EQ(tok().decode(V{1, 15043}, false), " Hello");
  EXPECT_EQ(tok().decode(V{15043, 29871}), "Hello ");
  EXPECT_EQ(tok().decode(V{29871, 15043}), " Hello");
  EXPECT_EQ(tok().decode(V{2, 29871, 15043}, false), "  Hello");
  // A piece on its own keeps its space; byte tokens give their byte.
  EXPECT_EQ(tok().token_to_piece(15043), " Hello");
  EXPECT_EQ(tok().token_to_piece(3 + 0x0A), "\n");
  EXPECT_EQ(tok().token_to_piece(0), "<unk>");
  EXPECT_EQ(tok().token_to_piece(0, false), "");
}

// The merge loop is a heap over the whole fragment (no pre-tokenizer splits it): O(n log n).
TEST_F(SpmTokenizerRules, LongTextsStayFast) {
  std::string text;
  for (const auto& t : tv::read_texts(kVocabDir + "ggml-vocab-llama-spm.gguf.inp")) text += t + "\n";
  std::string big;
  while (big.size() < 300000) big += text;
  for (const std::string& t : {big, std::string(100000, 'x'), std::string(100000, ' ')}) {
    const auto start = std::chrono::steady_clock::now();
    const auto ids = tok().encode(t);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_FALSE(ids.empty());
    EXPECT_LT(seconds, 5.0) << t.size() << " bytes";  // ~0.2 s for 300 kB measured on 2 cores
    EXPECT_EQ(tok().decode(ids), t);
  }
}

TEST_F(SpmTokenizerRules, LoaderReadsTheSentencePieceKeys) {
  const auto& d = tok().data();
  EXPECT_EQ(d.model, "llama");
  EXPECT_EQ(d.unk, 0);
  EXPECT_EQ(tok().bos(), 1);
  EXPECT_EQ(tok().eos(), 2);
  EXPECT_TRUE(d.add_space_prefix);
  ASSERT_EQ(d.scores.size(), size_t(tok().n_vocab()));
  EXPECT_TRUE(d.merges.empty());
  EXPECT_TRUE(tok().is_eog(2));
}

// llama.cpp gives Phi-3's special tokens (general.name "Phi3") the rstrip attribute, except <unk>,
// <s> and <|endoftext|>: the "\n" its chat template writes after them goes. Ids from llama.cpp
// d32676d7 (32010 <|user|>, 32007 <|end|>, 32001 <|assistant|>, 921 "▁x", 343 "▁y", 503 "▁z").
TEST(SpmTokenizerPhi3, SpecialTokensEatTheWhitespaceAfterThem) {
  AGENTKV_NEEDS_FIXTURES();
  const auto v = load("phi-3");
  const Tokenizer& t = *v.tokenizer;
  EXPECT_EQ(t.encode("<|user|>\nHello<|end|>\n<|assistant|>\n", true, true), (V{1, 32010, 15043, 32007, 32001}));
  EXPECT_EQ(t.encode("<s> x </s> y", false, true), (V{1, 29871, 921, 29871, 2, 343}));
  EXPECT_EQ(t.encode("<|endoftext|> z", false, true), (V{32000, 29871, 503}));
  EXPECT_EQ(t.encode("a <|end|> b", false, true), (V{263, 29871, 32007, 289}));
}

// A small SentencePiece vocabulary written here: llama.cpp's defaults where keys are missing, the
// file's keys where present, and the score order of merges.
agentkv::gguf::Writer tiny_spm(const std::vector<std::string>& tokens, const std::vector<float>& scores) {
  agentkv::gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_f32("tokenizer.ggml.scores", scores);
  std::vector<int32_t> types(tokens.size(), 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i].rfind("<0x", 0) == 0) types[i] = 6;
  w.set_array_i32("tokenizer.ggml.token_type", types);
  return w;
}

std::unique_ptr<Tokenizer> from_writer(const agentkv::gguf::Writer& w, std::vector<uint8_t>& bytes) {
  bytes = w.to_bytes();
  const auto reader = agentkv::gguf::Reader::from_memory(bytes, "tiny-spm.gguf");
  return Tokenizer::from_gguf(*reader);
}

TEST(SpmTokenizerTiny, DefaultsFollowLlamaCppAndKeysOverrideThem) {
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a"};
  std::vector<uint8_t> bytes;
  auto w = tiny_spm(tokens, std::vector<float>(tokens.size(), 0.0f));
  const auto t = from_writer(w, bytes);
  EXPECT_TRUE(t->add_bos());  // no add_bos_token key: SentencePiece's default
  EXPECT_EQ(t->bos(), 1);     // no bos_token_id key: 1, eos 2, unk 0
  EXPECT_EQ(t->eos(), 2);
  EXPECT_EQ(t->data().unk, 0);
  EXPECT_EQ(t->encode("a", true), (V{1, 6}));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_bool("tokenizer.ggml.add_eos_token", true);
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  const auto t2 = from_writer(w, bytes);
  EXPECT_FALSE(t2->add_bos());
  EXPECT_TRUE(t2->add_eos());
  EXPECT_EQ(t2->encode("a", true), (V{4, 2}));  // no space prefix, EOS appended
  EXPECT_EQ(t2->decode(V{6}), " a");            // and no space dropped
}

TEST(SpmTokenizerTiny, HighestScoreMergesFirstAndMissingBytesAreDropped) {
  // "▁ab": "▁a" (score -1) against "ab" (score -2): the better score wins, then "b" is left.
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab",
                                           "<0x63>"};
  std::vector<uint8_t> bytes;
  const auto t = from_writer(tiny_spm(tokens, {0, 0, 0, -5, -5, -5, -1, -2, 0}), bytes);
  EXPECT_EQ(t->encode("ab"), (V{6, 5}));
  const auto t2 = from_writer(tiny_spm(tokens, {0, 0, 0, -5, -5, -5, -2, -1, 0}), bytes);
  EXPECT_EQ(t2->encode("ab"), (V{3, 7}));
  // "c" has only a byte token; "d" has none (llama.cpp throws; we drop it).
  EXPECT_EQ(t->encode("cd"), (V{3, 8}));
  EXPECT_EQ(t->decode(V{3, 8}), "c");
}

TEST(SpmTokenizerTiny, RefusesTooFewScores) {
  agentkv::VocabData v;
  v.model = "llama";
  v.tokens = {"<unk>", "a", "b"};
  v.scores = {0.0f, 0.0f};
  EXPECT_THROW(Tokenizer(std::move(v), "few-scores.gguf"), agentkv::Error);
}

}  // namespace
