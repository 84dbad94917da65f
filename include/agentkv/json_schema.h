// JSON schema -> GBNF, after llama.cpp's json-schema-to-grammar (same rule shapes: bounded
// numbers and whitespace, properties in schema order with required ones first, optional ones in
// any prefix-closed subset).
//
// Enforced: type (one or a list), properties / required / additionalProperties (false by default
// when properties are given, as llama.cpp), enum, const, minLength / maxLength, items /
// prefixItems / minItems / maxItems, anyOf / oneOf, allOf of objects, $ref to #/$defs/... or
// #/definitions/..., minimum / maximum / exclusiveMinimum / exclusiveMaximum (integers: any bound;
// numbers: whole-number bounds; number_range.h), string formats date / time / date-time / uuid /
// uri / uri-reference / email / hostname / ipv4, OpenAPI's int32, and `pattern` (json_pattern.h:
// ECMA-262 without lookaround or backreferences). A keyword that restricts values and is not
// enforced (multipleOf, uniqueItems, not, ...), a pattern construct or string format without
// a rule, or a bound that cannot be enforced makes the conversion throw (the server's 400 names
// it): no constraint is dropped in silence. Annotations and unknown keywords are ignored.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace agentkv::grammar {

// Whitespace the grammar lets the model write between JSON tokens.
enum class JsonSpacing {
  LlamaCpp,  // llama.cpp's: `space ::= | " " | "\n"{1,2} [ \t]{0,20}` after every token
  Compact,   // `space ::= | " "`
  // Exactly what a chat template's `tojson` writes back (Python's json.dumps separators ", " and
  // ": ", nothing else): a tool call whose arguments the template re-renders with tojson is then
  // the same text in the next turn's prompt, and its tokens stay cached.
  Tojson,
};

struct SchemaGrammarOptions {
  // Rule-name prefix (several schemas in one grammar, e.g. one per tool).
  std::string prefix;  // [a-zA-Z0-9-]*
  // The root value without llama.cpp's trailing `space` (when the root rule ends with it): for
  // a value embedded in other text, where the text after it is fixed.
  bool strip_root_space = false;
  // Only Tojson changes the rules themselves (their separators); the `space` rule comes with
  // json_primitive_rules().
  JsonSpacing spacing = JsonSpacing::LlamaCpp;
};

// The rules of a grammar matching JSON text valid against `schema`; the rule named
// `<prefix>root` matches the value. Includes the shared primitive rules (prefix-independent
// names, emitted once by the caller via json_primitive_rules() when combining several schemas,
// or included here when `with_primitives`). Throws agentkv::Error for a schema it cannot turn
// into a grammar (a $ref it cannot resolve, a type it does not know, allOf of non-objects).
std::string json_schema_rules(const nlohmann::ordered_json& schema, const SchemaGrammarOptions& opt,
                              bool with_primitives = true);
std::string json_primitive_rules(JsonSpacing spacing = JsonSpacing::LlamaCpp);

// A whole grammar: root ::= the schema's value.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

}  // namespace agentkv::grammar
