// GBNF parsing and matching (src/grammar/), JSON schema -> grammar, token masks.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "agentkv/error.h"
#include "agentkv/gbnf.h"
#include "agentkv/json_schema.h"
#include "agentkv/grammar_matcher.h"

namespace {

using agentkv::grammar::Matcher;
using agentkv::grammar::parse_gbnf;
using agentkv::grammar::Position;
using agentkv::grammar::TokenTrie;
using Json = nlohmann::ordered_json;

std::shared_ptr<Matcher> matcher(const std::string& gbnf) {
  return std::make_shared<Matcher>(std::make_shared<agentkv::grammar::Grammar>(parse_gbnf(gbnf)));
}

// The whole text is accepted and the grammar may end after it.
bool matches(Matcher& m, const std::string& text) { return m.can_end(m.advance(m.start(), text)); }
// The text is a prefix of some accepted text.
bool prefix_ok(Matcher& m, const std::string& text) { return m.advance(m.start(), text).ok(); }

TEST(Gbnf, RefusesBadGrammars) {
  auto refused = [](const std::string& g, const std::string& what) {
    try {
      parse_gbnf(g);
      ADD_FAILURE() << "accepted: " << g;
    } catch (const agentkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused("a ::= \"x\"\n", "no 'root'");
  refused("root ::= b\n", "undefined rule 'b'");
  refused("root ::= root \"x\" | \"y\"\n", "left recursion");
  refused("root ::= a\na ::= \"x\"? root\n", "left recursion");
  refused("root ::= \"abc\n", "unterminated");
  refused("root ::= [abc\n", "unterminated");
  refused("root ::= \"a\"{3,1}\n", "n < m");
  refused("root ::= * \"a\"\n", "expecting an item");
  refused("root ::= \"a\" )\n", "expecting a newline");
  refused("root ::= x\nroot ::= y\n", "defined twice");
  refused("root ::= <think>\n", "token references");
  refused("root ::= \"\\q\"\n", "unknown escape");
}

TEST(Gbnf, MatchesLlamaCppSyntax) {
  auto m = matcher(R"(# comment
root ::= greeting (" " name)? "!"   # trailing comment
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z]{1,4}
)");
  EXPECT_TRUE(matches(*m, "hello!"));
  EXPECT_TRUE(matches(*m, "hi Bob!"));
  EXPECT_TRUE(matches(*m, "hi Alice!"));
  EXPECT_FALSE(matches(*m, "hi Alicia!"));  // 5 lower-case letters
  EXPECT_FALSE(matches(*m, "hi bob!"));
  EXPECT_FALSE(matches(*m, "hello"));
  EXPECT_TRUE(prefix_ok(*m, "hello"));
  EXPECT_FALSE(prefix_ok(*m, "hey"));

  auto rep = matcher("root ::= \"ab\"{2,3} [^a-c\\n]* \"x\"+ .\n");
  EXPECT_TRUE(matches(*rep, "ababxx."));
  EXPECT_TRUE(matches(*rep, "abababzzzx\xC3\xA9"));  // . is one code point (é)
  EXPECT_FALSE(matches(*rep, "abx."));
  EXPECT_FALSE(matches(*rep, "ababababx."));
  EXPECT_FALSE(matches(*rep, "ababcx."));

  auto multi = matcher("root ::= (\n  \"a\" |\n  \"b\"\n) \"\\u00e9\\x41\"\n");
  EXPECT_TRUE(matches(*multi, "b\xC3\xA9" "A"));
  // A character split between two feeds (a token ending inside a UTF-8 sequence).
  Position p = multi->advance(multi->start(), "a\xC3");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.remain, 1);
  EXPECT_TRUE(multi->can_end(multi->advance(p, "\xA9" "A")));
  EXPECT_FALSE(multi->advance(p, "\xA8").ok());
}

TEST(Gbnf, JsonGrammarOfLlamaCpp) {
  // llama.cpp's grammars/json.gbnf.
  auto m = matcher(R"(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws
string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)");
  EXPECT_TRUE(matches(*m, R"({"a": [1, 2.5, "x\n\u00e9"], "b": {"c": null}})"));
  EXPECT_TRUE(matches(*m, "{}"));
  EXPECT_FALSE(matches(*m, R"({"a": })"));
  EXPECT_FALSE(matches(*m, "[1]"));
  EXPECT_FALSE(matches(*m, "{\"a\": \"\x01\"}"));
}

// A tiny vocabulary: the mask must equal a token-by-token check.
TEST(TokenMask, EqualsTokenByTokenCheck) {
  std::vector<std::string> pieces = {"{", "}", "\"", "\":", " ", "a", "ab", "abc", "\"a", "\"}", ",", "1", "12", "x",
                                     "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82", "\xAC", "", "name", "\": \"", "  "};
  const int32_t eos = static_cast<int32_t>(pieces.size());
  pieces.push_back("");
  TokenTrie trie(pieces, {eos});
  auto m = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":3}},"required":["name"]})")));
  std::mt19937 rng(7);
  Position p = m->start();
  for (int step = 0; step < 60 && p.ok(); ++step) {
    const auto& bits = m->mask(p, trie);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < trie.n_vocab(); ++id) {
      const bool in_mask = (bits[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
      EXPECT_EQ(in_mask, m->allows(p, trie, id)) << "step " << step << " token " << id;
      if (in_mask) allowed.push_back(id);
    }
    ASSERT_FALSE(allowed.empty()) << "dead end at step " << step;
    const int32_t pick = allowed[rng() % allowed.size()];
    if (pick == eos) {
      EXPECT_TRUE(m->can_end(p));
      return;
    }
    p = m->accept(p, trie, pick);
  }
}

TEST(JsonSchema, ConvertsAndValidates) {
  auto schema = Json::parse(R"({
    "type": "object",
    "properties": {
      "city": {"type": "string", "minLength": 1, "maxLength": 8},
      "unit": {"enum": ["c", "f"]},
      "days": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 2},
      "extra": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/point"}]},
      "kind": {"const": "weather"}
    },
    "required": ["city", "tags"],
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}
  })");
  auto m = matcher(agentkv::grammar::json_schema_to_gbnf(schema));
  EXPECT_TRUE(matches(*m, R"({"city": "Paris", "tags": ["a"]})"));
  EXPECT_TRUE(matches(*m, R"({"city":"Rome","tags":["ab","c"],"unit":"c","days":-3,"extra":{"x":1.5e3},"kind":"weather"})"));
  EXPECT_TRUE(matches(*m, R"({"city": "Oslo", "tags": ["x"], "extra": null})"));
  EXPECT_FALSE(matches(*m, R"({"city": "", "tags": ["a"]})"));             // minLength
  EXPECT_FALSE(matches(*m, R"({"city": "Barcelona", "tags": ["a"]})"));    // maxLength
  EXPECT_FALSE(matches(*m, R"({"city": "Paris", "tags": []})"));           // minItems
  EXPECT_FALSE(matches(*m, R"({"city": "Paris", "tags": ["a","b","c"]})")); // maxItems
  EXPECT_FALSE(matches(*m, R"({"tags": ["a"], "city": "Paris"})"));        // order: required first
  EXPECT_FALSE(matches(*m, R"({"city": "Paris", "tags": ["a"], "unit": "k"})"));
  EXPECT_FALSE(matches(*m, R"({"city": "Paris", "tags": ["a"], "other": 1})"));
  EXPECT_FALSE(matches(*m, R"({"city": "Paris", "tags": ["a"], "days": 1.5})"));
  EXPECT_FALSE(matches(*m, R"({"city": "Paris", "tags": ["a"], "kind": "w"})"));

  EXPECT_THROW(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"$ref": "#/$defs/none"})")), agentkv::Error);
  EXPECT_THROW(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type": "strange"})")), agentkv::Error);
  EXPECT_THROW(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type": "string", "minLength": 3, "maxLength": 1})")),
               agentkv::Error);
  const auto unenforced = agentkv::grammar::unenforced_keywords(
      Json::parse(R"({"type":"object","properties":{"a":{"type":"integer","minimum":1,"description":"d"}}})"));
  EXPECT_EQ(unenforced, std::vector<std::string>{"minimum"});
}

TEST(JsonSchema, RecursiveRefAndFreeObject) {
  auto tree = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({
    "$ref": "#/definitions/node",
    "definitions": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
       "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}}, "required": ["v"]}}})")));
  EXPECT_TRUE(matches(*tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})"));
  EXPECT_FALSE(matches(*tree, R"({"kids": []})"));
  auto free = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type": "object"})")));
  EXPECT_TRUE(matches(*free, R"({"anything": [1, {"x": true}]})"));
  EXPECT_FALSE(matches(*free, R"([1])"));
}

}  // namespace
