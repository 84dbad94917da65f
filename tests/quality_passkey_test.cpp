// The pass-key case builder of `agentkv bench quality` (tools/quality_passkey.h): the prompt has
// exactly the depth asked for, holds the needle where the case's fraction puts it and ends with
// the question; cases are a function of (seed, depth, case index) only.
#include "tools/quality_passkey.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "agentkv/error.h"
#include "fixtures.h"
#include "model/model.h"

using namespace agentkv;
using namespace agentkv::tools;

namespace {

class PasskeyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!::agentkv::testing_support::fixtures_present()) return;  // SetUp() skips each test
    ::agentkv::testing_support::run_suite_setup([] {
      model_ = Model::load(std::string(AGENTKV_FIXTURES_DIR) + "/models/qwen3-micro.gguf").release();
      std::ifstream f(std::string(AGENTKV_SOURCE_DIR) + "/tests/data/quality-heldout.txt", std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      text_ = new std::string(ss.str());
    }, setup_error_);
  }
  void SetUp() override {
    AGENTKV_NEEDS_FIXTURES();
    AGENTKV_SUITE_SETUP_OK(setup_error_);
  }
  static inline std::string setup_error_;
  static void TearDownTestSuite() {
    delete model_;
    delete text_;
  }
  const Tokenizer& tok() const { return model_->tokenizer(); }
  std::vector<Token> encode(const std::string& s) const { return tok().encode(s, false, false); }
  static Model* model_;
  static std::string* text_;
};
Model* PasskeyTest::model_ = nullptr;
std::string* PasskeyTest::text_ = nullptr;

TEST_F(PasskeyTest, PromptHasTheDepthTheNeedleAndTheQuestion) {
  const PasskeyCaseBuilder builder(tok(), *text_);
  const std::vector<Token> question = encode(kPasskeyQuestion);
  for (int64_t depth : {128, 512, 1024, 4096}) {  // 4096 is longer than the text: the filler wraps
    for (int64_t i = 0; i < 5; ++i) {
      const PasskeyCase c = builder.build(depth, i, 1);
      SCOPED_TRACE("depth " + std::to_string(depth) + " case " + std::to_string(i));
      EXPECT_EQ(static_cast<int64_t>(c.prompt.size()), depth);
      EXPECT_GE(c.key, 10000);
      EXPECT_LE(c.key, 99999);
      const std::vector<Token> needle = encode(passkey_needle(c.key));
      ASSERT_EQ(c.needle_tokens, static_cast<int64_t>(needle.size()));
      EXPECT_TRUE(std::equal(needle.begin(), needle.end(), c.prompt.begin() + c.needle_at));
      EXPECT_TRUE(std::equal(question.begin(), question.end(), c.prompt.end() - question.size()));
      // The needle sits at a fraction in [0.05, 0.95] of the filler (token rounding aside).
      const double n_filler = double(depth - c.needle_tokens - static_cast<int64_t>(question.size()));
      EXPECT_GE(c.needle_at, 0.05 * n_filler - 1);
      EXPECT_LE(c.needle_at, 0.95 * n_filler + 1);
      // The filler is the text from the start of one of its lines.
      const std::string before = tok().decode(std::span<const Token>(c.prompt.data(), c.needle_at));
      const size_t at = (*text_ + *text_ + *text_ + *text_ + *text_).find(before);
      ASSERT_NE(at, std::string::npos);
      EXPECT_TRUE(at == 0 || (*text_)[at - 1] == '\n');
      EXPECT_NE(tok().decode(c.prompt).find("The pass key is " + std::to_string(c.key) + ". Remember it. " +
                                           std::to_string(c.key) + " is the pass key.\n"),
                std::string::npos);
    }
  }
}

TEST_F(PasskeyTest, CasesAreDeterministicBySeedDepthAndIndex) {
  const PasskeyCaseBuilder builder(tok(), *text_);
  const PasskeyCaseBuilder again(tok(), *text_);
  const PasskeyCase a = builder.build(512, 3, 1);
  const PasskeyCase b = again.build(512, 3, 1);
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.needle_at, b.needle_at);
  // Another seed, case or depth draws another case.
  for (const PasskeyCase& other : {builder.build(512, 3, 2), builder.build(512, 4, 1), builder.build(513, 3, 1)})
    EXPECT_TRUE(other.key != a.key || other.needle_at != a.needle_at || other.prompt != a.prompt);
  // The spec's RNG: std::mt19937_64(seed * 1000003 + depth * 7919 + case) draws the key first.
  std::mt19937_64 rng(1ull * 1000003 + 512ull * 7919 + 3);
  EXPECT_EQ(a.key, std::uniform_int_distribution<int>(10000, 99999)(rng));
}

TEST_F(PasskeyTest, RefusesADepthWithoutRoomForFiller) {
  const PasskeyCaseBuilder builder(tok(), *text_);
  EXPECT_THROW(builder.build(20, 0, 1), Error);
  EXPECT_THROW(PasskeyCaseBuilder(tok(), ""), Error);
}

TEST(PasskeyRecall, FollowsTheSpecsRule) {
  EXPECT_TRUE(passkey_recalled(" 48213", 48213));
  EXPECT_TRUE(passkey_recalled("\n  48213. Remember", 48213));
  EXPECT_TRUE(passkey_recalled("482139", 48213));  // starts with the digits: the spec's rule
  EXPECT_FALSE(passkey_recalled(" 4821", 48213));
  EXPECT_FALSE(passkey_recalled(" the 48213", 48213));
  EXPECT_FALSE(passkey_recalled("", 48213));
  EXPECT_FALSE(passkey_decided(" ", 48213));
  EXPECT_FALSE(passkey_decided(" 482", 48213));
  EXPECT_TRUE(passkey_decided(" 483", 48213));   // already wrong
  EXPECT_TRUE(passkey_decided(" 48213", 48213));
}

}  // namespace
