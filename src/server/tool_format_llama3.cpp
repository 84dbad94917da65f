// Llama 3.x tool calls (templates of Llama 3.1 / 3.2 / 3.3). The model answers a call with one
// JSON object, {"name": "NAME", "parameters": {...}}, as the template's system prompt asks, at the
// very start of its answer; or after <|python_tag|> (Llama 3.1's ipython mode), where it may also
// write a builtin call, brave_search.call(query="..."), or raw code for its code interpreter.
//
// What counts as a call follows llama.cpp: a JSON object only at the start of the answer (a JSON
// object after text is text, so an answer that quotes JSON is not taken for a call), the python
// tag anywhere (it is a special token: text before it is content). Beyond llama.cpp, as vLLM's
// llama3_json parser does: "arguments" for "parameters", an optional "type": "function" key, and
// more calls after the first, separated by ';' or whitespace. Text after the calls is content.
// <|eom_id|> / <|eot_id|> end the turn (they are end-of-generation tokens; a trailing one that
// reaches the text is dropped).
#include <cctype>

#include "agentkv/gbnf.h"
#include "server/tool_formats.h"

namespace agentkv::server {

namespace {

using scan::Match;
using scan::expect;
using scan::skip_ws;

constexpr std::string_view kPythonTag = "<|python_tag|>";

bool starts_with(std::string_view s, size_t p, std::string_view what) { return s.substr(p, what.size()) == what; }

using CallParse = JsonCallParse;

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Llama 3.1's builtin tools after <|python_tag|>: NAME.call(key="value", ...), the template's
// rendering of them. Values are JSON values (the template writes strings).
CallParse parse_builtin_call(std::string_view s, size_t p) {
  CallParse r;
  size_t q = p;
  while (q < s.size() && is_identifier_char(s[q])) ++q;
  if (q == p) return r;
  const std::string name(s.substr(p, q - p));
  if ((r.status = expect(s, q, ".call(")) != Match::Ok) return r;
  r.call.name = name;
  r.has_name = true;
  Json args = Json::object();
  while (true) {
    q = skip_ws(s, q);
    if (q >= s.size()) {
      r.status = Match::Incomplete;
      return r;
    }
    if (s[q] == ')') break;
    if (!args.empty() && (r.status = expect(s, q, ",")) != Match::Ok) return r;
    q = skip_ws(s, q);
    const size_t key_start = q;
    while (q < s.size() && is_identifier_char(s[q])) ++q;
    const std::string key(s.substr(key_start, q - key_start));
    q = skip_ws(s, q);
    if (q >= s.size()) {
      r.status = Match::Incomplete;
      return r;
    }
    if (key.empty() || (r.status = expect(s, q, "=")) != Match::Ok) {
      r.status = Match::Bad;
      return r;
    }
    q = skip_ws(s, q);
    size_t value_end = 0;
    if ((r.status = scan::scan_json_value(s, q, value_end)) != Match::Ok) return r;
    try {
      args[key] = Json::parse(s.substr(q, value_end - q));
    } catch (const std::exception&) {
      r.status = Match::Bad;
      return r;
    }
    q = value_end;
  }
  r.call.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
  r.status = Match::Ok;
  r.end = q + 1;
  return r;
}

// The request's code-interpreter tool, which raw code after <|python_tag|> calls ("" if none).
std::string code_tool(const Json& tools) {
  for (const char* want : {"python", "code_interpreter"})
    for (const Json& t : tools) {
      const Json& fn = t.contains("function") ? t["function"] : t;
      if (fn.is_object() && fn.value("name", "") == want) return want;
    }
  return "";
}

// The text without a trailing end-of-turn marker (and, streaming, without the start of one).
std::string_view without_end_marker(std::string_view text, bool partial) {
  for (std::string_view marker : {std::string_view("<|eom_id|>"), std::string_view("<|eot_id|>")}) {
    const std::string_view t = scan::rtrim(text);
    if (t.size() >= marker.size() && t.substr(t.size() - marker.size()) == marker)
      return t.substr(0, t.size() - marker.size());
    if (partial) text.remove_suffix(scan::partial_tag_suffix(text, marker));
  }
  return text;
}

}  // namespace

ToolSection parse_llama3_tool_calls(std::string_view text, const ChatParseOptions& o, bool partial) {
  ToolSection out;
  text = without_end_marker(text, partial);
  const size_t first = skip_ws(text, 0);
  size_t section = first;  // where the calls start (the python tag or the '{')
  bool tagged = starts_with(text, first, kPythonTag);
  if (!tagged && !starts_with(text, first, "{")) {
    const size_t k = text.find(kPythonTag);
    if (k == std::string_view::npos) {
      std::string_view content = text;
      if (partial) content.remove_suffix(scan::partial_tag_suffix(content, kPythonTag));
      out.content = std::string(content);
      return out;
    }
    out.content = std::string(text.substr(0, k));
    section = k;
    tagged = true;
  }
  size_t pos = tagged ? skip_ws(text, section + kPythonTag.size()) : section;
  if (pos >= text.size()) {
    if (!partial) out.content += text.substr(section);  // a tag and nothing after it
    return out;
  }

  if (tagged && text[pos] != '{') {
    // Not JSON: a builtin call, else code for the code interpreter.
    CallParse c = parse_builtin_call(text, pos);
    if (c.status == Match::Ok) {
      out.calls.push_back(std::move(c.call));
      out.content += scan::trim(text.substr(c.end));
      return out;
    }
    if (c.status == Match::Incomplete && partial) {
      if (c.has_name) out.calls.push_back(std::move(c.call));
      return out;
    }
    const std::string tool = code_tool(o.tools);
    if (tool.empty()) {
      out.content += text.substr(section);
      return out;
    }
    const std::string body = scan::json_string_body_prefix(text.substr(pos));
    out.calls.push_back(ToolCall{"", tool, "{\"code\": \"" + body + (partial ? "" : "\"}")});
    return out;
  }

  while (true) {
    CallParse c = parse_json_object_call(text, pos);
    c.call.id.clear();  // Llama templates render no ids: the server's own are given
    if (c.status == Match::Ok) {
      out.calls.push_back(std::move(c.call));
      // Between calls: whitespace, ';', or the python tag again.
      size_t next = skip_ws(text, c.end);
      if (next < text.size() && text[next] == ';') next = skip_ws(text, next + 1);
      if (starts_with(text, next, kPythonTag)) next = skip_ws(text, next + kPythonTag.size());
      if (next >= text.size()) return out;
      if (text[next] == '{') {
        pos = next;
        continue;
      }
      std::string_view tail = text.substr(next);
      if (partial && kPythonTag.substr(0, tail.size()) == tail) return out;  // "<|py": wait
      out.content += tail;  // text after the calls
      return out;
    }
    if (c.status == Match::Incomplete && partial) {
      if (c.has_name) out.calls.push_back(std::move(c.call));
      return out;
    }
    // Malformed (or cut off): from the failed call on, everything is content.
    out.content += text.substr(out.calls.empty() ? section : pos);
    return out;
  }
}

std::string llama3_tool_rules(const std::vector<GrammarTool>& tools, bool /*parallel: one call per turn*/) {
  std::string rules, alts;
  for (const GrammarTool& t : tools) {
    rules += arguments_rules(t);
    rules += t.prefix + "call ::= \"" + grammar::gbnf_literal(t.name + "\", \"parameters\": ") + "\" " + t.prefix + "root\n";
    alts += (alts.empty() ? "" : " | ") + t.prefix + "call";
  }
  // The JSON call only, as llama.cpp writes it for tools that are not Llama 3.1's builtins: the
  // python tag is a control token, which generated text does not spell (its text would be a
  // string the template never renders back), so the grammar does not offer it.
  return std::string("tool-calls ::= tool-call\n") +
         "tool-call ::= \"{\\\"name\\\": \\\"\" (" + alts + ") \"}\"\n" + rules;
}

}  // namespace agentkv::server
