// GBNF grammars as llama.cpp's `grammar` field accepts them (grammars/README.md of llama.cpp):
//
//   root   ::= object                  # rules: name ::= alternatives, one per line
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ":" ws value
//   ws     ::= [ \t\n]{0,8}            # [..] classes with ranges and ^, "..." literals,
//                                      # . any character, ( ) groups, | * + ? {m} {m,} {m,n}
//
// Parsing compiles the rules into llama.cpp's element form (each rule a sequence of elements,
// alternatives separated by ALT, ended by END; repetitions rewritten into helper rules exactly as
// llama.cpp rewrites them). Characters are Unicode code points; the text a grammar matches is
// UTF-8. A grammar must define `root`, may not reference undefined rules and may not be left
// recursive; anything else is refused with an agentkv::Error naming the position.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::grammar {

enum class ElemType : uint8_t {
  End,           // end of a rule
  Alt,           // start of another alternative
  RuleRef,       // value: rule id
  Char,          // value: code point (first of a class)
  CharNot,       // value: code point (first of a negated class)
  CharRngUpper,  // value: upper bound of the range started by the previous element
  CharAlt,       // value: another code point of the class
  CharAny,       // "." any code point
};

struct Elem {
  ElemType type;
  uint32_t value;
};

struct Grammar {
  // All rules' elements in one array; rule r starts at rule_start[r]. A position in a rule is an
  // index into elems.
  std::vector<Elem> elems;
  std::vector<uint32_t> rule_start;
  std::vector<std::string> rule_names;  // for messages
  uint32_t root = 0;
  std::string source;  // the text it was parsed from
};

// Limits: the text is untrusted input.
constexpr size_t kMaxGrammarBytes = 1u << 20;
constexpr size_t kMaxGrammarElems = 1u << 22;
constexpr int kMaxRepetition = 10000;

// Throws agentkv::Error ("grammar: ... at line L, column C") for bad syntax, an undefined rule, a
// missing root, left recursion, or a grammar over the limits.
Grammar parse_gbnf(std::string_view text);

// Escapes text as the body of a GBNF "..." literal.
std::string gbnf_literal(std::string_view text);

}  // namespace agentkv::grammar
