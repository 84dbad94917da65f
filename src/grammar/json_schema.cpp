#include "agentkv/json_schema.h"

#include <cmath>
#include <functional>
#include <optional>
#include <map>
#include <set>

#include "agentkv/error.h"
#include "agentkv/gbnf.h"
#include "grammar/json_pattern.h"
#include "grammar/number_range.h"

namespace agentkv::grammar {

namespace {

using Json = nlohmann::ordered_json;

const char* const kPrimitives = R"GBNF(space ::= | " " | "\n"{1,2} [ \t]{0,20}
boolean ::= ("true" | "false") space
null ::= "null" space
decimal-part ::= [0-9]{1,16}
integral-part ::= [0] | [1-9] [0-9]{0,15}
number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space
integer ::= ("-"? integral-part) space
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\"" space
value ::= object | array | string | number | boolean | null
object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space
array ::= "[" space ( value ("," space value)* )? "]" space
uuid ::= "\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space
date ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( [0] [1-9] | [1-2] [0-9] | [3] [0-1] )
time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
date-time ::= date "T" time
uri-string ::= "\"" [a-zA-Z] [a-zA-Z0-9+.-]{0,31} ":" uri-char{0,2048} "\"" space
uri-reference-string ::= "\"" uri-char{0,2048} "\"" space
uri-char ::= [a-zA-Z0-9._~:/?#@!$&'()*+,;=%\[\]-]
email-string ::= "\"" email-char{1,64} "@" [a-zA-Z0-9-]{1,63} ("." [a-zA-Z0-9-]{1,63}){0,8} "\"" space
email-char ::= [a-zA-Z0-9!#$%&'*+/=?^_`{|}~.-]
hostname-string ::= "\"" [a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])? ("." [a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?){0,8} "\"" space
ipv4-string ::= "\"" ipv4-octet "." ipv4-octet "." ipv4-octet "." ipv4-octet "\"" space
ipv4-octet ::= [0-9] | [1-9] [0-9] | "1" [0-9]{2} | "2" [0-4] [0-9] | "25" [0-5]
date-string ::= "\"" date "\"" space
time-string ::= "\"" time "\"" space
date-time-string ::= "\"" date-time "\"" space
)GBNF";

const std::set<std::string> kEnforced = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "minLength", "maxLength",
    "items", "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern"};
// String formats with a rule: the exact ones (uuid, date, time, date-time) and the character
// shapes of the others (RFC 3986's scheme ":" for uri, a local part "@" a domain for email).
const std::set<std::string> kFormats = {"uuid", "date", "time", "date-time", "uri", "uri-reference", "email", "hostname", "ipv4"};
const std::set<std::string> kNumericFormats = {"int32", "int64", "float", "double"};
// Keywords that restrict a value and that the grammar does not enforce: a schema with one is
// refused. Any other keyword the converter does not know (annotations, "nullable", vendor
// extensions) cannot make a value the grammar writes invalid, and is ignored, as JSON Schema
// ignores unknown keywords.
const std::set<std::string> kRestrictingUnenforced = {
    "multipleOf", "uniqueItems", "minProperties", "maxProperties", "propertyNames", "not", "if", "then",
    "else", "contains", "minContains", "maxContains", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedItems", "patternProperties"};

std::string sanitize(const std::string& name) {
  std::string out;
  for (char c : name) out += ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-') ? c : '-';
  return out.empty() ? "r" : out;
}

std::string lit(const std::string& text) { return "\"" + gbnf_literal(text) + "\""; }

int64_t read_count(const Json& s, const char* key, int64_t def) {
  auto it = s.find(key);
  if (it == s.end()) return def;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    throw Error(std::string("json_schema: '") + key + "' must be a non-negative integer");
  const int64_t v = it->get<int64_t>();
  if (v > kMaxRepetition) throw Error(std::string("json_schema: '") + key + "' above " + std::to_string(kMaxRepetition));
  return v;
}

// "{m,n}" for GBNF ("" when m = n = 1... callers handle the general case).
std::string repeat_suffix(int64_t min, int64_t max) {
  if (max < 0) return "{" + std::to_string(min) + ",}";
  if (min == max) return "{" + std::to_string(min) + "}";
  return "{" + std::to_string(min) + "," + std::to_string(max) + "}";
}

class Converter {
 public:
  Converter(const Json& root, std::string prefix, bool strip_root_space, JsonSpacing spacing)
      : root_(root), prefix_(std::move(prefix)), strip_root_space_(strip_root_space) {
    if (spacing == JsonSpacing::Tojson) {
      comma_ = "\", \"";
      colon_ = "\": \"";
    }
  }

  std::string run() {
    std::string body = visit(root_, "root", 0);
    if (strip_root_space_ && body.size() > 6 && body.compare(body.size() - 6, 6, " space") == 0) body.resize(body.size() - 6);
    add_rule_named(prefix_ + "root", body);
    std::string out;
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    return out;
  }

 private:
  // Adds a rule; returns its (unique) name.
  std::string add_rule(const std::string& base, const std::string& body) {
    const std::string name = sanitize(prefix_ + base);
    auto it = rules_.find(name);
    if (it == rules_.end() || it->second == body) {
      rules_[name] = body;
      return name;
    }
    for (int i = 1;; ++i) {
      const std::string n = name + std::to_string(i);
      auto jt = rules_.find(n);
      if (jt == rules_.end() || jt->second == body) {
        rules_[n] = body;
        return n;
      }
    }
  }
  void add_rule_named(const std::string& name, const std::string& body) { rules_[name] = body; }

  const Json& resolve(const std::string& ref) const {
    if (ref.empty() || ref[0] != '#') throw Error("json_schema: only local $ref (#/...) is supported, got '" + ref + "'");
    const Json* cur = &root_;
    size_t pos = 1;
    while (pos < ref.size()) {
      if (ref[pos] != '/') throw Error("json_schema: bad $ref '" + ref + "'");
      size_t end = ref.find('/', pos + 1);
      if (end == std::string::npos) end = ref.size();
      std::string key = ref.substr(pos + 1, end - pos - 1);
      for (size_t k; (k = key.find("~1")) != std::string::npos;) key.replace(k, 2, "/");
      for (size_t k; (k = key.find("~0")) != std::string::npos;) key.replace(k, 2, "~");
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(key) < cur->size()) {
        cur = &(*cur)[std::stoul(key)];
      } else {
        throw Error("json_schema: cannot resolve $ref '" + ref + "'");
      }
      pos = end;
    }
    return *cur;
  }

  std::string visit(const Json& s, const std::string& name, int depth) {
    if (depth > 64) throw Error("json_schema: nested too deeply");
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw Error("json_schema: the schema 'false' matches nothing");
      return "value";
    }
    if (!s.is_object()) throw Error("json_schema: a schema must be an object or a boolean");
    refuse_unenforced(s, name);
    if (auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) throw Error("json_schema: '$ref' must be a string");
      const std::string ref = it->get<std::string>();
      auto known = refs_.find(ref);
      if (known != refs_.end()) return known->second;
      const std::string base = ref.substr(ref.find_last_of('/') == std::string::npos ? 0 : ref.find_last_of('/') + 1);
      const std::string rule = sanitize(prefix_ + "ref-" + base) + std::to_string(refs_.size());
      refs_[ref] = rule;
      rules_[rule] = "value";  // placeholder while the definition is visited (recursion)
      rules_[rule] = visit(resolve(ref), "ref-" + base, depth + 1);
      return rule;
    }
    if (auto it = s.find("const"); it != s.end()) return lit(it->dump()) + " space";
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) throw Error("json_schema: 'enum' must be a non-empty array");
      std::string alts;
      for (const Json& v : *it) alts += (alts.empty() ? "" : " | ") + lit(v.dump());
      return "(" + alts + ") space";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (!it->is_array() || it->empty()) throw Error(std::string("json_schema: '") + key + "' must be a non-empty array");
        std::string alts;
        for (size_t i = 0; i < it->size(); ++i)
          alts += (i ? " | " : "") + add_rule(name + "-" + std::to_string(i), visit((*it)[i], name + "-" + std::to_string(i), depth + 1));
        return alts;
      }
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array()) throw Error("json_schema: 'allOf' must be an array");
      Json merged = Json{{"type", "object"}, {"properties", Json::object()}, {"required", Json::array()}};
      for (const Json& part0 : *it) {
        const Json& part = part0.is_object() && part0.contains("$ref") ? resolve(part0["$ref"].get<std::string>()) : part0;
        if (!part.is_object() || !(part.contains("properties") || part.value("type", "") == "object"))
          throw Error("json_schema: 'allOf' is supported for object schemas only");
        if (part.contains("properties"))
          for (auto p = part["properties"].begin(); p != part["properties"].end(); ++p) merged["properties"][p.key()] = p.value();
        if (part.contains("required"))
          for (const Json& r : part["required"]) merged["required"].push_back(r);
      }
      return visit(merged, name, depth + 1);
    }

    Json type = s.contains("type") ? s["type"] : Json();
    if (type.is_array()) {
      std::string alts;
      for (size_t i = 0; i < type.size(); ++i) {
        Json sub = s;
        sub["type"] = type[i];
        alts += (i ? " | " : "") + add_rule(name + "-" + (type[i].is_string() ? type[i].get<std::string>() : "t"),
                                            visit(sub, name + "-" + std::to_string(i), depth + 1));
      }
      if (alts.empty()) throw Error("json_schema: 'type' must not be an empty list");
      return alts;
    }
    std::string t = type.is_string() ? type.get<std::string>() : "";
    if (!type.is_null() && !type.is_string()) throw Error("json_schema: 'type' must be a string or a list");
    if (t.empty()) {
      if (s.contains("properties")) t = "object";
      else if (s.contains("items") || s.contains("prefixItems")) t = "array";
      else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) t = "string";
      else if (read_bounds(s).has()) t = "number";  // a subset of "any value, and numbers in bounds"
    }
    if (t == "object") return object_rule(s, name, depth);
    if (t == "array") return array_rule(s, name, depth);
    if (t == "string") return string_rule(s);
    if (t == "number") return number_rule(s, name);
    if (t == "integer") return integer_rule(s);
    if (t == "boolean") return "boolean";
    if (t == "null") return "null";
    if (t.empty()) return "value";
    throw Error("json_schema: unknown type '" + t + "'");
  }

  // Whether every object the grammar writes for s meets its minProperties / maxProperties anyway:
  // the required properties reach the minimum; a closed object cannot pass the maximum.
  static bool holds_anyway(const Json& s, const std::string& key) {
    auto count = [&](const char* k) {
      auto it = s.find(k);
      return it != s.end() && it->is_structured() ? static_cast<int64_t>(it->size()) : int64_t{0};
    };
    auto limit = [&]() { return s[key].is_number_integer() ? s[key].get<int64_t>() : int64_t{-1}; };
    if (key == "minProperties") return limit() >= 0 && count("required") >= limit();
    if (key == "maxProperties") {
      const Json addl = s.contains("additionalProperties") ? s["additionalProperties"] : Json();
      const bool closed = s.contains("properties") && (addl.is_null() || (addl.is_boolean() && !addl.get<bool>()));
      return closed && limit() >= count("properties");
    }
    return false;
  }

  // A keyword the grammar cannot enforce is the caller's error (a 400 naming it), never a
  // constraint silently dropped.
  static void refuse_unenforced(const Json& s, const std::string& where) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kRestrictingUnenforced.count(it.key()) && !holds_anyway(s, it.key()))
        throw Error("json_schema: keyword '" + it.key() + "' (at " + where + ") cannot be enforced by the grammar; remove it");
    }
    // String formats: the ones with a rule; numeric formats (OpenAPI's int32 / int64 / float /
    // double) bound nothing the number rules (16 digits) do not already.
    if (auto f = s.find("format"); f != s.end() && f->is_string() && !kFormats.count(f->get<std::string>()) &&
                                   !kNumericFormats.count(f->get<std::string>()))
      throw Error("json_schema: format '" + f->get<std::string>() + "' (at " + where + ") cannot be enforced by the grammar; remove it");
    const int shapes = s.contains("format") + s.contains("pattern") + (s.contains("minLength") || s.contains("maxLength"));
    if (shapes > 1)
      throw Error("json_schema: two of format, pattern and minLength / maxLength on one string (at " + where +
                  ") cannot be enforced together by the grammar");
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum, as numbers (draft 6 on) or as
  // draft 4's booleans on minimum / maximum. has: whether any bound is given.
  struct Bounds {
    std::optional<double> lo, hi;
    bool lo_exclusive = false, hi_exclusive = false;
    bool has() const { return lo || hi; }
  };
  static Bounds read_bounds(const Json& s) {
    Bounds b;
    auto number = [&](const char* key) -> std::optional<double> {
      auto it = s.find(key);
      if (it == s.end() || it->is_boolean()) return std::nullopt;
      if (!it->is_number()) throw Error(std::string("json_schema: '") + key + "' must be a number");
      return it->get<double>();
    };
    auto draft4_exclusive = [&](const char* key) { return s.contains(key) && s[key].is_boolean() && s[key].get<bool>(); };
    b.lo = number("minimum");
    b.lo_exclusive = draft4_exclusive("exclusiveMinimum");
    if (auto x = number("exclusiveMinimum"); x && (!b.lo || *x >= *b.lo)) {
      b.lo = x;
      b.lo_exclusive = true;
    }
    b.hi = number("maximum");
    b.hi_exclusive = draft4_exclusive("exclusiveMaximum");
    if (auto x = number("exclusiveMaximum"); x && (!b.hi || *x <= *b.hi)) {
      b.hi = x;
      b.hi_exclusive = true;
    }
    for (const auto& v : {b.lo, b.hi})
      if (v && std::fabs(*v) > 9.9e15) throw Error("json_schema: a bound past 16 digits cannot be enforced by the grammar");
    return b;
  }

  std::string integer_rule(const Json& s) {
    const Bounds b = read_bounds(s);
    const bool int32 = s.value("format", "") == "int32";
    if (!b.has() && !int32) return "integer";
    std::optional<int64_t> lo, hi;  // the whole numbers within the bounds
    if (b.lo) lo = static_cast<int64_t>(b.lo_exclusive ? std::floor(*b.lo) + 1 : std::ceil(*b.lo));
    if (b.hi) hi = static_cast<int64_t>(b.hi_exclusive ? std::ceil(*b.hi) - 1 : std::floor(*b.hi));
    if (int32) {
      lo = std::max<int64_t>(lo.value_or(INT32_MIN), INT32_MIN);
      hi = std::min<int64_t>(hi.value_or(INT32_MAX), INT32_MAX);
    }
    return integer_range_gbnf(lo, hi) + " space";
  }

  std::string number_rule(const Json& s, const std::string& where) {
    const Bounds b = read_bounds(s);
    if (!b.has()) return "number";
    auto whole = [&](std::optional<double> v, bool exclusive) -> std::optional<NumberBound> {
      if (!v) return std::nullopt;
      if (*v != std::floor(*v))
        throw Error("json_schema: the bound " + Json(*v).dump() + " on a number (at " + where +
                    ") cannot be enforced by the grammar: only whole-number bounds are");
      return NumberBound{static_cast<int64_t>(*v), exclusive};
    };
    return number_range_gbnf(whole(b.lo, b.lo_exclusive), whole(b.hi, b.hi_exclusive)) + " space";
  }

  std::string string_rule(const Json& s) {
    if (auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) throw Error("json_schema: 'pattern' must be a string");
      return pattern_string_gbnf(p->get<std::string>()) + " space";
    }
    const std::string format = s.value("format", "");
    if (format == "uuid") return "uuid";
    if (kFormats.count(format)) return format + "-string";
    const int64_t min = read_count(s, "minLength", 0);
    const int64_t max = read_count(s, "maxLength", -1);
    if (max >= 0 && max < min) throw Error("json_schema: maxLength below minLength");
    if (min == 0 && max < 0) return "string";
    return "\"\\\"\" char" + repeat_suffix(min, max) + " \"\\\"\" space";
  }

  std::string array_rule(const Json& s, const std::string& name, int depth) {
    auto it = s.find("prefixItems");
    if (it == s.end() || !it->is_array()) it = s.find("items");  // draft 4's tuple form: "items": [A, B]
    if (it != s.end() && it->is_array()) {
      std::string body = "\"[\" space";
      for (size_t i = 0; i < it->size(); ++i) {
        if (i) body += " " + comma_;
        body += " " + add_rule(name + "-tuple-" + std::to_string(i), visit((*it)[i], name + "-tuple-" + std::to_string(i), depth + 1));
      }
      return body + " \"]\" space";
    }
    const Json items = s.contains("items") ? s["items"] : Json::object();
    const std::string item = add_rule(name + "-item", visit(items, name + "-item", depth + 1));
    const int64_t min = read_count(s, "minItems", 0);
    const int64_t max = read_count(s, "maxItems", -1);
    if (max >= 0 && max < min) throw Error("json_schema: maxItems below minItems");
    if (max == 0) return "\"[\" space \"]\" space";
    const std::string more = "(" + comma_ + " " + item + ")";
    std::string list;
    if (min <= 1) {
      const std::string tail = max < 0 ? more + "*" : (max == 1 ? "" : more + repeat_suffix(0, max - 1));
      list = item + (tail.empty() ? "" : " " + tail);
      if (min == 0) list = "(" + list + ")?";
    } else {
      list = item + " " + more + repeat_suffix(min - 1, max < 0 ? -1 : max - 1);
    }
    return "\"[\" space " + list + " \"]\" space";
  }

  std::string object_rule(const Json& s, const std::string& name, int depth) {
    const Json props = s.contains("properties") ? s["properties"] : Json::object();
    if (!props.is_object()) throw Error("json_schema: 'properties' must be an object");
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) throw Error("json_schema: 'required' must be an array");
      for (const Json& r : *it) {
        if (!r.is_string()) throw Error("json_schema: 'required' must hold strings");
        required.insert(r.get<std::string>());
      }
    }
    const Json addl = s.contains("additionalProperties") ? s["additionalProperties"] : Json();
    // No "properties" at all: any object. Given properties (even none, as a tool without
    // parameters declares them) close the object unless additionalProperties opens it.
    if (!s.contains("properties") && (addl.is_null() || (addl.is_boolean() && addl.get<bool>()))) return "object";

    std::vector<std::string> req_names, opt_names;
    std::map<std::string, std::string> kv;
    for (auto p = props.begin(); p != props.end(); ++p) {
      const std::string value = add_rule(name + "-" + p.key(), visit(p.value(), name + "-" + p.key(), depth + 1));
      kv[p.key()] = add_rule(name + "-" + p.key() + "-kv", lit(Json(p.key()).dump()) + " space " + colon_ + " " + value);
      (required.count(p.key()) ? req_names : opt_names).push_back(p.key());
    }
    for (const std::string& r : required)
      if (!props.contains(r)) throw Error("json_schema: required property '" + r + "' is not in 'properties'");
    if (addl.is_object() || (addl.is_boolean() && addl.get<bool>())) {
      const std::string value = addl.is_object() ? add_rule(name + "-additional", visit(addl, name + "-additional", depth + 1)) : "value";
      kv["*"] = add_rule(name + "-additional-kv", "string " + colon_ + " " + value);
      opt_names.push_back("*");
    }

    // Optional properties: any subset, in order (llama.cpp's get_recursive_refs).
    std::function<std::string(size_t, bool)> recursive_refs = [&](size_t i, bool first_optional) -> std::string {
      const std::string& k = opt_names[i];
      const std::string comma = "( " + comma_ + " " + kv[k] + " )";
      std::string res = first_optional ? comma + (k == "*" ? "*" : "?") : kv[k] + (k == "*" ? " " + comma + "*" : "");
      if (i + 1 < opt_names.size()) res += " " + add_rule(name + "-" + k + "-rest", recursive_refs(i + 1, true));
      return res;
    };
    std::string body = "\"{\" space";
    for (size_t i = 0; i < req_names.size(); ++i) body += (i ? " " + comma_ + " " : " ") + kv[req_names[i]];
    if (!opt_names.empty()) {
      body += " (";
      if (!req_names.empty()) body += " " + comma_ + " (";
      for (size_t i = 0; i < opt_names.size(); ++i) body += (i ? " | " : " ") + recursive_refs(i, false);
      if (!req_names.empty()) body += " )";
      body += " )?";
    }
    return body + " \"}\" space";
  }

  const Json& root_;
  std::string prefix_;
  bool strip_root_space_ = false;
  std::string comma_ = "\",\" space", colon_ = "\":\" space";  // GBNF of the separators
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_primitive_rules(JsonSpacing spacing) {
  std::string rules = kPrimitives;
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t k = 0; (k = rules.find(from, k)) != std::string::npos; k += to.size()) rules.replace(k, from.size(), to);
  };
  switch (spacing) {
    case JsonSpacing::LlamaCpp: break;
    case JsonSpacing::Compact: rules.replace(0, rules.find('\n'), "space ::= | \" \""); break;
    case JsonSpacing::Tojson:
      rules.replace(0, rules.find('\n'), "space ::= \"\"");
      replace_all("\",\" space", "\", \"");
      replace_all("\":\" space", "\": \"");
      break;
  }
  return rules;
}

std::string json_schema_rules(const nlohmann::ordered_json& schema, const SchemaGrammarOptions& opt, bool with_primitives) {
  std::string rules = Converter(schema, opt.prefix, opt.strip_root_space, opt.spacing).run();
  return with_primitives ? rules + kPrimitives : rules;
}

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  return json_schema_rules(schema, SchemaGrammarOptions{}, true);
}

}  // namespace agentkv::grammar
