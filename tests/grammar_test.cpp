// GBNF parsing and matching (src/grammar/), JSON schema -> grammar, token masks.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <regex>
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
}

// A keyword that restricts values and that the grammar does not enforce is refused (the server's
// 400 names it); annotations and unknown keywords are not.
TEST(JsonSchema, RefusesWhatItCannotEnforce) {
  for (const char* schema : {R"J({"type":"string","pattern":"a(?=b)"})J", R"J({"type":"string","pattern":"(a)\\1"})J",
                             R"J({"type":"string","pattern":"\\bword"})J", R"J({"type":"string","pattern":"a^b"})J",
                             R"J({"type":"string","pattern":"(ab"})J", R"J({"type":"string","pattern":"^a+$","maxLength":3})J",
                             R"({"type":"integer","multipleOf":3})",
                             R"({"type":"array","uniqueItems":true})", R"({"type":"object","minProperties":1})",
                             R"({"not":{"type":"null"}})", R"({"type":"string","format":"regex"})",
                             R"({"type":"string","format":"uri","maxLength":9})", R"({"type":"number","maximum":0.5})",
                             R"({"type":"object","properties":{"a":{"type":"number","exclusiveMinimum":1.25}}})",
                             R"({"type":"integer","minimum":5,"maximum":4})", R"({"type":"integer","minimum":1e17})"}) {
    EXPECT_THROW(agentkv::grammar::json_schema_to_gbnf(Json::parse(schema)), agentkv::Error) << schema;
  }
  // minProperties / maxProperties that every object the grammar writes meets are fine.
  EXPECT_NO_THROW(agentkv::grammar::json_schema_to_gbnf(Json::parse(
      R"({"type":"object","properties":{"a":{},"b":{}},"required":["a"],"minProperties":1,"maxProperties":2})")));
  EXPECT_THROW(agentkv::grammar::json_schema_to_gbnf(Json::parse(
                   R"({"type":"object","properties":{"a":{},"b":{}},"minProperties":1})")), agentkv::Error);
  EXPECT_THROW(agentkv::grammar::json_schema_to_gbnf(Json::parse(
                   R"({"type":"object","properties":{"a":{},"b":{}},"maxProperties":1})")), agentkv::Error);
  auto m = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(
      R"({"type":"object","properties":{"a":{"type":"integer","format":"int64","nullable":true,"x-vendor":1,
          "description":"d","examples":[1]}},"required":["a"]})")));
  EXPECT_TRUE(matches(*m, R"({"a": 12})"));
}

// Integer bounds: for random ranges (open on either side, negative, around zero, fractional
// bounds rounding inward), the grammar accepts exactly the integers in range, written as JSON
// writes them (no leading zeros, no "-0").
TEST(JsonSchema, IntegerBoundsAcceptExactlyTheRange) {
  std::mt19937 rng(3);
  auto pick = [&]() -> int64_t {
    switch (rng() % 4) {
      case 0: return static_cast<int64_t>(rng() % 21) - 10;
      case 1: return static_cast<int64_t>(rng() % 2001) - 1000;
      case 2: return static_cast<int64_t>(rng() % 200001) - 100000;
      default: return static_cast<int64_t>(rng() % 20000001) - 10000000;
    }
  };
  for (int round = 0; round < 60; ++round) {
    int64_t lo = pick(), hi = pick();
    if (lo > hi) std::swap(lo, hi);
    const bool has_lo = round % 5 != 1, has_hi = round % 5 != 2;
    const bool lo_exclusive = round % 3 == 0, hi_exclusive = round % 4 == 0;
    Json schema = {{"type", "integer"}};
    if (has_lo) schema[lo_exclusive ? "exclusiveMinimum" : "minimum"] = lo;
    if (has_hi) schema[hi_exclusive ? "exclusiveMaximum" : "maximum"] = hi;
    if (has_lo && has_hi && (lo_exclusive || hi_exclusive) && hi - lo < 2) continue;  // may be empty
    auto m = matcher(agentkv::grammar::json_schema_to_gbnf(schema));
    auto in_range = [&](int64_t v) {
      return (!has_lo || (lo_exclusive ? v > lo : v >= lo)) && (!has_hi || (hi_exclusive ? v < hi : v <= hi));
    };
    std::vector<int64_t> values;
    for (int64_t edge : {lo, hi, int64_t{0}})
      for (int64_t d = -12; d <= 12; ++d) values.push_back(edge + d);
    for (int k = 0; k < 40; ++k) values.push_back(pick());
    for (int64_t v : values) EXPECT_EQ(matches(*m, std::to_string(v)), in_range(v)) << schema.dump() << " value " << v;
    EXPECT_FALSE(matches(*m, "-0")) << schema.dump();
    if (in_range(7)) EXPECT_FALSE(matches(*m, "07")) << schema.dump();
  }
  auto int32 = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type":"integer","format":"int32"})")));
  EXPECT_TRUE(matches(*int32, "2147483647"));
  EXPECT_TRUE(matches(*int32, "-2147483648"));
  EXPECT_FALSE(matches(*int32, "2147483648"));
  auto rounded = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type":"integer","minimum":1.5,"maximum":4.5})")));
  EXPECT_FALSE(matches(*rounded, "1"));
  EXPECT_TRUE(matches(*rounded, "2"));
  EXPECT_TRUE(matches(*rounded, "4"));
  EXPECT_FALSE(matches(*rounded, "5"));
}

// Number bounds (whole numbers, inclusive or exclusive): whatever the grammar accepts is within
// them, and every number within them written without exponent, sign of zero or more than 16
// decimals is accepted.
TEST(JsonSchema, NumberBoundsAcceptExactlyTheRange) {
  std::mt19937 rng(4);
  const char* const fractions[] = {"", ".0", ".00", ".5", ".05", ".000001", ".9999", ".1"};
  for (int round = 0; round < 60; ++round) {
    int64_t lo = static_cast<int64_t>(rng() % 41) - 20, hi = static_cast<int64_t>(rng() % 41) - 20;
    if (lo > hi) std::swap(lo, hi);
    const bool has_lo = round % 5 != 1, has_hi = round % 5 != 2;
    const bool lo_exclusive = round % 3 == 0, hi_exclusive = round % 4 == 0;
    Json schema = {{"type", "number"}};
    if (has_lo) schema[lo_exclusive ? "exclusiveMinimum" : "minimum"] = lo;
    if (has_hi) schema[hi_exclusive ? "exclusiveMaximum" : "maximum"] = hi;
    if (has_lo && has_hi && lo == hi && (lo_exclusive || hi_exclusive)) continue;  // empty
    auto m = matcher(agentkv::grammar::json_schema_to_gbnf(schema));
    auto in_range = [&](double v) {
      return (!has_lo || (lo_exclusive ? v > lo : v >= lo)) && (!has_hi || (hi_exclusive ? v < hi : v <= hi));
    };
    for (int64_t whole = -25; whole <= 25; ++whole) {
      for (const char* f : fractions) {
        for (bool negative : {false, true}) {
          if (negative != (whole < 0) && whole != 0) continue;
          const std::string text = (negative ? "-" : "") + std::to_string(whole < 0 ? -whole : whole) + f;
          const double v = std::stod(text);
          const bool canonical = !(negative && v == 0);  // "-0…" is refused, its value is not
          const bool accepted = matches(*m, text);
          if (accepted) EXPECT_TRUE(in_range(v)) << schema.dump() << " accepted " << text;
          if (canonical && in_range(v)) EXPECT_TRUE(accepted) << schema.dump() << " refused " << text;
        }
      }
    }
  }
}

// pattern: for random ASCII patterns and strings, the grammar accepts a string's JSON text exactly
// when std::regex (ECMAScript) finds the pattern in it (strings hold no control characters other
// than \n and \t, which the grammar writes as JSON escapes).
TEST(JsonSchema, PatternAcceptsExactlyWhatTheRegexFinds) {
  std::mt19937 rng(11);
  const std::vector<std::string> atoms = {"a", "b", "c", "1", "_", "-", " ", "\\\"", "\\\\", "/", ".", "\\d", "\\w",
                                          "\\s", "\\D", "\\S", "[a-c]", "[^ab]", "[\\d_]", "\\.", "\\n", "\\x61"};
  const std::vector<std::string> quantifiers = {"", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,}", "*?"};
  std::function<std::string(int)> piece = [&](int depth) -> std::string {
    if (depth < 2 && rng() % 5 == 0) {
      std::string g = std::string(rng() % 2 ? "(" : "(?:") + piece(depth + 1) + piece(depth + 1);
      if (rng() % 2) g += "|" + piece(depth + 1);
      return g + ")" + quantifiers[rng() % quantifiers.size()];
    }
    return atoms[rng() % atoms.size()] + quantifiers[rng() % quantifiers.size()];
  };
  const std::string alphabet = "abc1_- \"\\/.x\n\t";
  int accepted_total = 0;
  for (int round = 0; round < 150; ++round) {
    std::string pattern = std::string(rng() % 3 == 0 ? "^" : "") + piece(0) + piece(0) + (rng() % 3 == 0 ? "$" : "");
    if (rng() % 6 == 0) pattern += "|" + piece(0);
    const std::regex re(pattern, std::regex::ECMAScript);
    auto m = matcher(agentkv::grammar::json_schema_to_gbnf(Json{{"type", "string"}, {"pattern", pattern}}));
    for (int k = 0; k < 60; ++k) {
      std::string text;
      for (int n = static_cast<int>(rng() % 7); n > 0; --n) text += alphabet[rng() % alphabet.size()];
      const bool found = std::regex_search(text, re);
      const bool accepted = matches(*m, Json(text).dump());
      EXPECT_EQ(accepted, found) << "pattern " << pattern << " text " << Json(text).dump();
      accepted_total += accepted;
    }
  }
  EXPECT_GT(accepted_total, 500);  // the strings do meet the patterns often
}

TEST(JsonSchema, StringFormats) {
  auto uri = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type":"string","format":"uri"})")));
  EXPECT_TRUE(matches(*uri, R"("https://example.org/a?b=1#c")"));
  EXPECT_FALSE(matches(*uri, R"("no scheme")"));
  EXPECT_FALSE(matches(*uri, R"("http://a b")"));
  auto email = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type":"string","format":"email"})")));
  EXPECT_TRUE(matches(*email, R"("a.b+c@example.org")"));
  EXPECT_FALSE(matches(*email, R"("a@b@c")"));
  auto ipv4 = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type":"string","format":"ipv4"})")));
  EXPECT_TRUE(matches(*ipv4, R"("192.168.0.255")"));
  EXPECT_FALSE(matches(*ipv4, R"("256.1.1.1")"));
  EXPECT_FALSE(matches(*ipv4, R"("01.1.1.1")"));
  auto host = matcher(agentkv::grammar::json_schema_to_gbnf(Json::parse(R"({"type":"string","format":"hostname"})")));
  EXPECT_TRUE(matches(*host, R"("api.example-1.org")"));
  EXPECT_FALSE(matches(*host, R"("-bad.org")"));
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
